"""Stage 4: conversations to alpaca records (FORMATS.md 8), after the environment's post-checks.

Each gpt turn becomes one record whose instruction is what the agent saw at that step, in the
released corpus's layout; the environment's layout (`EnvSpec.layout`) decides that layout and
`EnvSpec.postchecks` which turns are dropped, rewritten or inserted first. A conversation that
cannot be read back in its layout is rejected whole, with the reason, and counted; it never
stops the run. The unit is the conversation: `rejected` counts the unreadable ones; a turn the
post-checks drop is listed in the rejects too (`dropped_<check>`), but is not a failure.
"""

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated

from skillsft.pipeline.errors import ConfigError
from skillsft.pipeline.formats.conversations import (
    Fits,
    LayoutError,
    RenderOptions,
    TextLayout,
    TextTurn,
)
from skillsft.pipeline.formats.token_lengths import DEFAULT_CUTOFF_LEN
from skillsft.pipeline.options import Nested, Opt
from skillsft.pipeline.stages.result import StageResult, stage_counts
from skillsft.schemas.conversation import AlpacaRecord, Conversation
from skillsft.schemas.reject import Reject

if TYPE_CHECKING:
    from skillsft.pipeline.envs import EnvSpec


@dataclass(frozen=True)
class CutoffFit:
    """--fit-cutoff: make `--cutoff-len` a guarantee instead of a count."""

    fit_cutoff: Annotated[bool, Opt(
        "shrink a record's history window until instruction + output fit in --cutoff-len "
        "tokens (--tokenizer's, else estimated); drop, and list, a record that never fits")] = False
    cutoff_len: Annotated[int, Opt(
        "the student's training cutoff in tokens (default 8192)",
        kind="positive_int")] = DEFAULT_CUTOFF_LEN
    tokenizer: Annotated[str, Opt(
        "count tokens with the student's tokenizer (a local tokenizer.json or model folder)",
        kind="tokenizer", metavar="PATH_OR_NAME")] = ""

    def shapes_output(self) -> bool:
        """Off, nothing changes: the fingerprint is what it was before the option existed."""
        return self.fit_cutoff

    def fits(self) -> "Fits | None":
        if not self.fit_cutoff:
            return None
        from skillsft.pipeline.formats.token_lengths import approx_tokens, load_counter

        if self.tokenizer:
            counter = load_counter(self.tokenizer)
            return lambda r: sum(counter([r.instruction, r.output])) <= self.cutoff_len
        return lambda r: approx_tokens(r.instruction) + approx_tokens(r.output) <= self.cutoff_len


@dataclass(frozen=True)
class FlattenOptions:
    # The history window distillation used; read from the conversations when they show it.
    # Seed and information shape distillation's output, and reach this stage through it.
    render: Annotated[RenderOptions, Nested(only=("history",))] = field(
        default_factory=RenderOptions)
    fit: CutoffFit = field(default_factory=CutoffFit)
    input_name: str = "distilled_trajectories.json"  # how rejects name the input


def smallest_record(spec: "EnvSpec") -> AlpacaRecord:
    """The fixed text every record of this environment carries (every field empty): a cutoff
    that this does not fit in fits no record at all."""
    layout = spec.turn_layout()
    if isinstance(layout, TextLayout):
        return layout.alpaca_record(layout.system(task="", block=""), [TextTurn("", (), "")],
                                    0, 0)
    human = layout.human_template.format(question="", block="", history="")
    return AlpacaRecord(instruction=layout.system(task="", block="") + layout.progress_first
                        + human, output=layout.output.format(thought="", action=""))


def check_cutoff(fit: CutoffFit, spec: "EnvSpec") -> None:
    """ConfigError (one line, before any teacher call) when --fit-cutoff is given a cutoff no
    record of this environment can fit."""
    fits = fit.fits()
    if fits is not None and not fits(smallest_record(spec)):
        raise ConfigError(f"--cutoff-len {fit.cutoff_len} is smaller than the text every "
                          f"{spec.name} record carries, so --fit-cutoff would drop them all; "
                          "raise --cutoff-len")


def flatten(
    conversations: Iterable[Conversation],
    spec: "EnvSpec",
    options: FlattenOptions | None = None,
) -> StageResult[AlpacaRecord]:
    """Alpaca records for every conversation, in order, with drop/rewrite/insert counts.

    `extras["provenance"]` holds one entry per record, same order: which trajectory and turn
    it came from, so publishing can split by trajectory and the report count per category."""
    result, pairs = iter_flattened(conversations, spec, options)
    provenance: list[dict[str, object]] = []
    for record, origin in pairs:
        result.records.append(record)
        provenance.append(origin)
    result.extras["provenance"] = provenance
    return result


def iter_flattened(
    conversations: Iterable[Conversation],
    spec: "EnvSpec",
    options: FlattenOptions | None = None,
) -> tuple[StageResult[AlpacaRecord], Iterator[tuple[AlpacaRecord, dict[str, object]]]]:
    """`flatten` as a stream: the result (records left empty) and each record with its
    provenance entry, one conversation's worth at a time. The result's rejects and counters
    are complete once the stream has been taken to its end."""
    options = options or FlattenOptions()
    layout = spec.turn_layout()
    fits = options.fit.fits()
    counts: Counter[str] = Counter()
    rejects: list[Reject] = []
    result: StageResult[AlpacaRecord] = StageResult([], rejects, unit="conversations")

    def pairs() -> Iterator[tuple[AlpacaRecord, dict[str, object]]]:
        made = 0
        for number, conversation in enumerate(conversations):
            counts["conversations_in"] += 1
            dropped: list[tuple[int, TextTurn]] = []
            try:
                produced = layout.alpaca_records(
                    conversation, spec.postchecks, options.render, counts, dropped, fits
                )
            except LayoutError as exc:
                counts["dropped_unreadable_conversation"] += 1
                where = conversation.extra_info.env_id or f"conversation {number}"
                rejects.append(
                    Reject(
                        stage="flatten",
                        file=options.input_name,
                        reason="unreadable_conversation",
                        detail=f"{where} (item {number}): {exc}; regenerate it with "
                               "`skillsft distill`",
                    )
                )
                continue
            info = conversation.extra_info
            trajectory = info.trajectory_id or info.env_id or f"conversation {number}"
            rejects.extend(
                Reject(stage="flatten", file=options.input_name, reason=turn.dropped_by,
                       trajectory=trajectory, step=f"turn {k}", action=turn.action,
                       detail=f"{trajectory} turn {k}: " + (
                           f"longer than --cutoff-len {options.fit.cutoff_len} tokens even "
                           "with the smallest history window; raise --cutoff-len to keep it"
                           if turn.dropped_by == "over_cutoff" else
                           f"post-check dropped action {turn.action!r}; the turn stays in "
                           "later histories but is not a record"))
                for k, turn in dropped
            )
            origin = info.trajectory_id or info.env_id or f"conversation-{number}"
            # what the record's instruction shows (conversations older than the field: none)
            shown = {} if info.skill_ids is None else {"skill_ids": info.skill_ids}
            for turn, record in enumerate(produced):
                made += 1
                yield record, {"trajectory_id": origin, "task_type": info.task_type,
                               "turn": turn, "num_steps": info.num_steps, "source": info.source,
                               **shown}
        counts["records"] = made
        result.counts = stage_counts(counts, inputs=counts["conversations_in"], outputs=made,
                                     rejected=counts["dropped_unreadable_conversation"])

    return result, pairs()
