"""Conversation turns (FORMATS.md 7) and their alpaca form (section 8), per turn layout.

Two layouts exist because the environments' prompts differ in shape, not because stage code
cares which environment it runs:

- `TextLayout` (ALFWorld, WebShop): the system prompt carries the task and the skill block;
  each human turn shows a window of earlier (observation, action) pairs, the current
  observation and the admissible actions. Its alpaca form splices the history behind a
  `## Current Progress` header. An optional synthetic last turn answers `final_action`.
- `SearchLayout` (Search-QA): a fixed system prompt; each human turn repeats the question and
  the block and carries the earlier searches with the information they retrieved. Its alpaca
  form is always the turn-0 form.

Both offer the same methods (`system`, `succeeded`, `build_turns`, `alpaca_records`), so an
`EnvSpec` simply points at one of them. Templates are plain strings with named fields, kept in
the environment's module (`pipeline/envs/alfworld.py`, ...) beside its other data.
"""

import functools
import hashlib
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Annotated, Any

from skillsft.pipeline.formats.postchecks import PostCheck, apply_postchecks
from skillsft.pipeline.formats.turns import TextTurn
from skillsft.pipeline.options import Opt
from skillsft.schemas.conversation import AlpacaRecord, Conversation
from skillsft.schemas.trajectory import Step

__all__ = ["LayoutError", "RenderOptions", "TextTurn"]  # TextTurn is re-exported for callers

Fits = Callable[[AlpacaRecord], bool]  # does a record fit the student's cutoff (--fit-cutoff)


@dataclass(frozen=True)
class RenderOptions:
    history: Annotated[int, Opt("(observation, action) pairs per turn", kind="positive_int")] = 5
    # With the trajectory id, seeds the synthetic final turn's action sample.
    seed: Annotated[int, Opt("seed of the done turn", kind="int")] = 0
    # False reproduces the older actions-only Search history.
    search_information: Annotated[bool, Opt(
        "search: no retrieved information in the history", name="keep_information",
        flag="--actions-only-history")] = True
    final_choices: int = 9  # how many of the winning step's actions the synthetic turn shows


@dataclass(frozen=True)
class TurnDraft:
    """One human turn and the action that answers it, before a thought is attached.

    `observation` and `admissible` are what the teacher is shown for this step; `human` is the
    exact text the corpus will carry.
    """

    human: str
    action: str
    observation: str
    admissible: tuple[str, ...] = ()
    synthetic: bool = False


class LayoutError(ValueError):
    """A trajectory or conversation that does not fit its environment's layout."""


def final_choice_rng(seed: int, trajectory_id: str) -> random.Random:
    """An RNG that is the same for a record in every run and on every machine.

    str seeds go through Python's own hashing of the seed; sha256 makes the derivation explicit
    and independent of PYTHONHASHSEED and Python version.
    """
    digest = hashlib.sha256(f"{seed}:{trajectory_id}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def sample_final_choices(
    actions: Sequence[str], final_action: str, count: int, rng: random.Random
) -> tuple[str, ...]:
    """Up to `count` of the given actions in random order, with `final_action` at a random place."""
    pool = [a for a in actions if a != final_action]
    choices = rng.sample(pool, min(count, len(pool)))
    choices.insert(rng.randint(0, len(choices)), final_action)
    return tuple(choices)


_ACTION_BREAKS = re.compile(r"[\[\]]|, ")


def split_actions(text: str) -> tuple[str, ...]:
    """Split a rendered admissible list on ", " outside brackets (`search[a, b]` is one action).

    Flatten reads every turn's list back, so only the brackets and separators are visited
    (a list without brackets is a plain split); a "]" without its "[" does not go below depth 0.
    """
    if not text:
        return ()
    if "[" not in text:
        return tuple(text.split(", "))
    actions, depth, start = [], 0, 0
    for found in _ACTION_BREAKS.finditer(text):
        mark = found.group()
        if mark == "[":
            depth += 1
        elif mark == "]":
            depth = max(0, depth - 1)
        elif depth == 0:
            actions.append(text[start : found.start()])
            start = found.end()
    actions.append(text[start:])
    return tuple(actions)


def template_pattern(template: str, groups: dict[str, str]) -> re.Pattern[str]:
    """A regex matching what `template.format(...)` produces, capturing the named fields.

    Built once per (template, groups): flatten asks for the same few on every turn."""
    return _template_pattern(template, tuple(sorted(groups.items())))


@functools.lru_cache(maxsize=64)
def _template_pattern(template: str, groups: tuple[tuple[str, str], ...]) -> re.Pattern[str]:
    given = dict(groups)
    pattern, pos = "", 0
    for match in re.finditer(r"\{(\w+)\}", template):
        pattern += re.escape(template[pos : match.start()])
        pattern += f"(?P<{match.group(1)}>{given.get(match.group(1), '.*?')})"
        pos = match.end()
    pattern += re.escape(template[pos:])
    return re.compile(pattern, re.DOTALL)


@functools.lru_cache(maxsize=64)
def _after_leading_field(template: str, groups: tuple[tuple[str, str], ...]
                         ) -> tuple[str, str, re.Pattern[str]] | None:
    """(field, literal, pattern of the rest from the literal on) when the template starts with
    a free field (`{history}...`) followed by literal text, else None."""
    start = re.match(r"\{(\w+)\}", template)
    if start is None or start.group(1) in dict(groups):
        return None
    rest = template[start.end():]
    literal = rest.split("{", 1)[0]
    if not literal or "}" in literal:
        return None
    return start.group(1), literal, _template_pattern(rest, groups)


def match_template(template: str, text: str, groups: dict[str, str]) -> dict[str, str] | None:
    """`template_pattern(template, groups).fullmatch(text).groupdict()`, or None if no match.

    A template that starts with a free field (a text turn's `{history}`) makes the regex try
    every length of that field, one character at a time, over most of the turn's text. The
    regex takes the shortest length at which the rest matches, and the rest begins with known
    literal text, so only the places where that literal occurs can be it: those are found with
    `str.find` and the rest is matched from each in turn, which gives the same fields."""
    key = tuple(sorted(groups.items()))
    leading = _after_leading_field(template, key)
    if leading is None:
        match = _template_pattern(template, key).fullmatch(text)
        return match.groupdict() if match else None
    field_name, literal, rest = leading
    at = text.find(literal)
    while at >= 0:
        match = rest.fullmatch(text, at)
        if match is not None:
            return {field_name: text[:at], **match.groupdict()}
        at = text.find(literal, at + 1)
    return None


def template_fields(template: str, text: str, groups: dict[str, str]) -> dict[str, str]:
    """The fields `text` was rendered from with `template`; LayoutError unless they render
    back to exactly `text`."""
    match = template_pattern(template, groups).fullmatch(text)
    if match is None or template.format(**match.groupdict()) != text:
        raise LayoutError("text does not follow the layout's template")
    return match.groupdict()


_THOUGHT_ACTION = re.compile(r"<think>(?P<thought>.*)</think>\n(?P<answer>.*)", re.DOTALL)


@dataclass(frozen=True)
class TextLayout:
    """ALFWorld/WebShop turns. Field templates use {task}, {block}, {observation}, {admissible},
    {history}, {step}, {k}, {n}, {i}, {action}, {thought}."""

    system_template: str
    first_turn: str
    later_turn: str
    history_line: str
    output: str
    progress_first: str
    progress_later: str
    final_action: str | None = None  # answer of a synthetic last turn after a win; None: none
    win_reward: float = 10.0  # must equal the EnvSpec's (checked when the spec is built)
    # Post-checks that add or change turns (WebShop's navigation back) run here, before
    # distillation, so the teacher writes the thought of every turn the corpus will show.
    repairs: tuple[Any, ...] = ()
    # The part of `system_template` that holds the experience block, separator included: what
    # a skill-free record leaves out (`without_block`).
    block_slot: str = "\n\n{block}"

    def system(self, task: str, block: str) -> str:
        return self.system_template.format(task=task, block=block)

    def without_block(self, conversation: Conversation) -> Conversation:
        """The conversation as this layout renders it with no experience block: the system
        prompt re-rendered from its fields without the block's slot (turns are unchanged)."""
        fields = template_fields(self.system_template, conversation.system, {})
        system = self.system_template.replace(self.block_slot, "").format(
            **{k: v for k, v in fields.items() if k != "block"})
        return conversation.model_copy(update={"system": system})

    def succeeded(self, record: Any, steps: Sequence[Step]) -> bool:
        return any(s.done and s.reward >= self.win_reward for s in steps)

    # -- building ----------------------------------------------------------------------------

    def turns_from_steps(
        self, steps: Sequence[Step], trajectory_id: str, options: RenderOptions
    ) -> list[TextTurn]:
        """Turn k shows step k's observation and is answered by step k+1's action, verbatim."""
        turns = []
        for k in range(len(steps) - 1):
            action = steps[k + 1].action
            if action is None:
                raise LayoutError(f"{steps[k + 1].step_id} has no action; only Step -1 may")
            turns.append(TextTurn(steps[k].observation, tuple(steps[k].admissible_actions), action))
        if self.final_action is not None and steps and self.succeeded(None, steps):
            win = steps[-1]
            rng = final_choice_rng(options.seed, trajectory_id)
            choices = sample_final_choices(
                win.admissible_actions, self.final_action, options.final_choices, rng
            )
            turns.append(TextTurn(win.observation, choices, self.final_action))
        return turns

    def build_turns(
        self,
        task: str,
        block: str,
        steps: Sequence[Step],
        trajectory_id: str,
        options: RenderOptions,
        counts: Counter[str] | None = None,
    ) -> list[TurnDraft]:
        turns = self.turns_from_steps(steps, trajectory_id, options)
        has_final = len(turns) == len(steps)  # one turn per step pair, plus the synthetic one
        if self.repairs:
            turns = apply_postchecks(turns, self.repairs, Counter() if counts is None else counts)
        humans = self.render_humans(turns, options.history)
        synthetic_at = len(turns) - 1 if has_final else -1
        return [
            TurnDraft(human, t.action, t.observation, t.admissible, synthetic=k == synthetic_at)
            for k, (human, t) in enumerate(zip(humans, turns, strict=True))
        ]

    def history_lines(self, turns: Sequence[TextTurn], k: int, history: int) -> list[str]:
        window = turns[max(0, k - history) : k] if history > 0 else []
        return [
            self.history_line.format(i=i, observation=t.observation, action=t.action)
            for i, t in enumerate(window, start=1)
        ]

    def render_human(self, turns: Sequence[TextTurn], k: int, history: int) -> str:
        turn = turns[k]
        admissible = ", ".join(turn.admissible)
        if k == 0:
            return self.first_turn.format(observation=turn.observation, admissible=admissible)
        return self.later_turn.format(
            history="\n".join(self.history_lines(turns, k, history)),
            step=k + 1,
            observation=turn.observation,
            admissible=admissible,
        )

    def render_humans(self, turns: Sequence[TextTurn], history: int) -> list[str]:
        return [self.render_human(turns, k, history) for k in range(len(turns))]

    # -- reading back (stage 4) -------------------------------------------------------------

    def parse_turns(self, conversation: Conversation, history: int) -> tuple[list[TextTurn], int]:
        """Recover the turn data, and the history window used, from a conversation we rendered.

        The result is checked by rendering it again: a conversation that does not come back
        byte for byte (hand-edited, another layout, another history window) raises LayoutError
        rather than being flattened wrongly. The history window is read from the conversation
        when a turn shows a full window, else `history` is used.
        """
        pairs = conversation.conversations
        roles = [t.from_ for t in pairs]
        if roles != ["human", "gpt"] * (len(pairs) // 2) or len(pairs) % 2:
            raise LayoutError("turns must alternate human, gpt")
        later_groups = {"step": r"\d+", "admissible": ".*"}
        turns, shown = [], []
        for k in range(0, len(pairs), 2):
            human, gpt = pairs[k].value, pairs[k + 1].value
            match = (match_template(self.first_turn, human, {}) if k == 0 else
                     match_template(self.later_turn, human, later_groups))
            if match is None:
                raise LayoutError(f"human turn {k // 2} does not follow the layout")
            answer = _THOUGHT_ACTION.fullmatch(gpt)
            action = answer and _answer_action(self.output, gpt)
            if answer is None or action is None:
                raise LayoutError(f"gpt turn {k // 2} is not <think>…</think> + action")
            if k:
                shown.append(len(match["history"].split("\n[Observation ")))
            turns.append(
                TextTurn(
                    match["observation"],
                    split_actions(match["admissible"]),
                    action,
                    answer.group("thought"),
                )
            )
        window = history
        truncated = [n for k, n in enumerate(shown, start=1) if n < k]
        if truncated:
            window = truncated[0]
        elif shown:
            window = max(history, max(shown))
        if self.render_humans(turns, window) != [p.value for p in pairs[::2]]:
            raise LayoutError("turns do not render back to the same text")
        return turns, window

    def alpaca_records(
        self,
        conversation: Conversation,
        checks: Sequence[PostCheck],
        options: RenderOptions,
        counts: Counter[str],
        dropped: list[tuple[int, TextTurn]] | None = None,
        fits: Fits | None = None,
    ) -> list[AlpacaRecord]:
        """Records of the emitted turns; (turn number, turn) of each turn a check dropped is
        appended to `dropped`, so the caller can list it. With `fits` (--fit-cutoff), a record
        that does not fit is rendered again with one history pair fewer at a time, and dropped
        (reason `over_cutoff`) when even no history does not fit."""
        parsed, window = self.parse_turns(conversation, options.history)
        turns = apply_postchecks(parsed, checks, counts)
        # parse_turns checked that the parsed turns render back to the conversation's human
        # turns with `window`: while the checks leave what a human turn shows unchanged, a
        # record's human text at that window is the conversation's own, not rendered again.
        humans = ([t.value for t in conversation.conversations[::2]]
                  if _same_text(parsed, turns) else None)
        records = []
        for k, turn in enumerate(turns):
            if not turn.emit:
                if turn.dropped_by and dropped is not None:
                    dropped.append((k, turn))
                continue
            windows = range(window, -1, -1) if fits is not None and k else [window]
            for shown in windows:
                known = humans[k] if humans is not None and shown == window else None
                record = self.alpaca_record(conversation.system, turns, k, shown, known)
                if fits is None or fits(record):
                    break
            else:
                record = None
            if record is None:  # not even the smallest window fits
                counts["dropped_over_cutoff"] += 1
                if dropped is not None:
                    dropped.append((k, replace(turn, emit=False, dropped_by="over_cutoff")))
                continue
            if shown != window:
                counts["fitted_to_cutoff"] += 1
            records.append(record)
        return records

    def alpaca_record(self, system: str, turns: Sequence[TextTurn], k: int,
                      window: int, human: str | None = None) -> AlpacaRecord:
        """Turn k's record with `window` history pairs; `human`: turn k's human text at that
        window when it is already known."""
        turn = turns[k]
        if human is None:
            human = self.render_human(turns, k, window)
        if k == 0:
            progress = self.progress_first
        else:
            n = min(k, window) if window > 0 else 0  # the lines `human` shows
            progress = self.progress_later.format(k=k, n=n)
        return AlpacaRecord(
            instruction=system + progress + human,
            output=self.output.format(thought=turn.thought, action=turn.action),
        )


def _same_text(before: Sequence[TextTurn], after: Sequence[TextTurn]) -> bool:
    """Do both lists render the same human turns: same length, and every turn shows the same
    observation, admissible actions and action (a check that only drops a turn keeps them)."""
    return len(before) == len(after) and all(
        a is b or (a.observation, a.admissible, a.action) == (b.observation, b.admissible,
                                                              b.action)
        for a, b in zip(before, after, strict=True))


def _answer_action(output_template: str, text: str) -> str | None:
    match = template_pattern(output_template, {"action": ".*"}).fullmatch(text)
    return match.group("action") if match else None


@dataclass(frozen=True)
class SearchLayout:
    """Search-QA turns: the question, the block and the search history live in each human turn."""

    system_template: str
    human_template: str
    history_header: str
    history_line: str
    information: str
    history_footer: str
    output: str
    progress_first: str
    block_slot: str = "{block}\n\n"  # the part of `human_template` the block fills

    def system(self, task: str, block: str) -> str:
        return self.system_template.format(task=task, block=block)

    def without_block(self, conversation: Conversation) -> Conversation:
        """The conversation as this layout renders it with no experience block: each human
        turn re-rendered from its fields (question, history) without the block's slot. The
        history field is empty or starts with its header, which fixes where the block ends."""
        groups = {"history": f"(?:{re.escape(self.history_header)}.*)?"}
        template = self.human_template.replace(self.block_slot, "")
        turns = []
        for turn in conversation.conversations:
            if turn.from_ == "human":
                fields = template_fields(self.human_template, turn.value, groups)
                turn = turn.model_copy(update={"value": template.format(
                    **{k: v for k, v in fields.items() if k != "block"})})
            turns.append(turn)
        return conversation.model_copy(update={"conversations": turns})

    def succeeded(self, record: Any, steps: Sequence[Step]) -> bool:
        return getattr(record, "outcome", None) == "Success"

    def history_section(self, steps: Sequence[Step], i: int, options: RenderOptions) -> str:
        if i == 0:
            return ""
        lines = []
        for j, step in enumerate(steps[:i]):
            # the rollout's own step number, as in the step's memory_context; position otherwise
            number = step.step_id.removeprefix("Step ").strip()
            line = self.history_line.format(
                j=number if number.lstrip("-").isdigit() else j, action=step.action
            )
            if options.search_information and step.observation:
                line += self.information.format(information=step.observation)
            lines.append(line)
        return self.history_header + "\n".join(lines) + self.history_footer

    def build_turns(
        self,
        task: str,
        block: str,
        steps: Sequence[Step],
        trajectory_id: str,
        options: RenderOptions,
        counts: Counter[str] | None = None,
    ) -> list[TurnDraft]:
        drafts = []
        for i, step in enumerate(steps):
            if step.action is None:
                raise LayoutError(f"{step.step_id} has no action tag")
            human = self.human_template.format(
                question=task, block=block, history=self.history_section(steps, i, options)
            )
            seen = steps[i - 1].observation if i else ""
            drafts.append(TurnDraft(human, step.action, seen))
        return drafts

    def alpaca_records(
        self,
        conversation: Conversation,
        checks: Sequence[PostCheck],
        options: RenderOptions,
        counts: Counter[str],
        dropped: list[tuple[int, TextTurn]] | None = None,
        fits: Fits | None = None,
    ) -> list[AlpacaRecord]:
        """Search has no post-checks, and its history is not windowed: with `fits`, a record
        that does not fit is dropped (reason `over_cutoff`, listed in `dropped`)."""
        pairs = conversation.conversations
        if len(pairs) % 2:
            raise LayoutError("turns must come in human, gpt pairs")
        records = []
        for k in range(0, len(pairs), 2):
            human, gpt = pairs[k], pairs[k + 1]
            if (human.from_, gpt.from_) != ("human", "gpt"):
                raise LayoutError(f"turn pair {k // 2} is not human, gpt")
            if _THOUGHT_ACTION.fullmatch(gpt.value) is None:
                raise LayoutError(f"gpt turn {k // 2} is not <think>…</think> + answer")
            record = AlpacaRecord(
                instruction=conversation.system + self.progress_first + human.value,
                output=gpt.value,
            )
            if fits is not None and not fits(record):
                counts["dropped_over_cutoff"] += 1
                if dropped is not None:
                    dropped.append((k // 2, TextTurn(human.value, (), gpt.value, emit=False,
                                                     dropped_by="over_cutoff")))
                continue
            records.append(record)
        return records


Layout = TextLayout | SearchLayout
