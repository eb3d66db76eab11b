"""Which episodes stage 1 keeps (FORMATS.md sections 1-2), every threshold a parameter.

ALFWorld/WebShop, per env folder (several attempts at one task):
  1. folders with fewer than `min_trajs_per_env` parsed files are skipped (a rejected file does
     not count: it is not an attempt we can learn from);
  2. the env is labelled from its outcomes, first rule that matches:
     >= `mixed_min_successes` wins and >= `mixed_min_failures` losses -> `mixed`
     (skipped unless `include_mixed`), >= `label_min_outcomes` wins -> `all_success`,
     >= `label_min_outcomes` losses -> `all_fail`, else skipped as `unlabelled`;
  3. within the env the `n_trajs_per_env` shortest episodes are kept, by number of steps in the
     file before loop removal, ties by natural file-name order. For `all_success` only wins and
     for `all_fail` only losses are candidates (an all_fail env may hold one win; teaching it as
     a failure would be wrong); `mixed` takes any;
  4. the first `n_success_envs` all_success and `n_fail_envs` all_fail envs in natural
     folder-name order are kept (`n_mixed_envs`, unlimited by default, for mixed ones).

Search, per question file, the QA source comes from the first rule that answers (each counted
as `source_rule_<rule>`):
  `folder`        a folder name in the file's path, compared without case, `-`, `_` or spaces,
                  that is a known source or one of its usual spellings (`2wiki`, `hotpot_qa`);
  `range`         the user's `search_source_ranges`, by the last number in the file name;
  `default_range` when the user gave no ranges: the item ranges of the Search-R1 test set that
                  SkillRL's search rollouts are numbered by (`DEFAULT_SOURCE_RANGES`); a user's
                  mapping replaces them, since one file name cannot follow two numberings;
  `unknown`       none of the above.
Per source all successes are kept plus the first floor(`failure_ratio` x successes) failures
in natural id order.
"""

import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import PurePosixPath
from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from skillsft.pipeline.formats.rollouts.text import DEFAULT_MAX_FILE_MB, natural_key
from skillsft.pipeline.options import Opt

EnvLabel = Literal["all_success", "all_fail", "mixed", "unlabelled"]
RecordT = TypeVar("RecordT")


class SourceRange(BaseModel):
    """Files numbered `first`..`last` (inclusive) come from QA source `source`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    first: int
    last: int
    source: str

    def __str__(self) -> str:
        return f"{self.first}-{self.last}={self.source}"

    @classmethod
    def parse(cls, text: str) -> "SourceRange":
        """`FIRST-LAST=SOURCE`, the command-line spelling (`--source-range 1-500=nq`)."""
        span, sep, source = text.partition("=")
        first, dash, last = span.partition("-")
        if not (sep and dash and source.strip()):
            raise ValueError(f"source range {text!r}: expected FIRST-LAST=SOURCE, e.g. 1-500=nq")
        return cls(first=int(first), last=int(last), source=source.strip())

    @model_validator(mode="after")
    def _ordered(self) -> "SourceRange":
        if self.first > self.last:
            raise ValueError(f"source range {self.first}-{self.last}: first is after last")
        return self


class SelectionOptions(BaseModel):
    """Stage-1 selection knobs; defaults are the CLI defaults (CLI.md, selection flags)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    min_trajs_per_env: Annotated[int, Opt("envs with fewer trajectories are skipped",
                                          kind="positive_int")] = Field(3, ge=1)
    n_trajs_per_env: Annotated[int, Opt("trajectories kept per env", kind="positive_int")] = \
        Field(3, ge=1)
    n_success_envs: Annotated[int, Opt("all-success envs kept", kind="non_negative_int")] = \
        Field(70, ge=0)
    n_fail_envs: Annotated[int, Opt("all-fail envs kept", kind="non_negative_int")] = \
        Field(30, ge=0)
    include_mixed: Annotated[bool, Opt("also keep envs with both wins and losses")] = False
    n_mixed_envs: int | None = Field(None, ge=0)
    mixed_min_successes: int = Field(2, ge=1)
    mixed_min_failures: int = Field(1, ge=1)
    label_min_outcomes: Annotated[int, Opt(
        "wins (or losses) that label an env all_success (all_fail)", kind="positive_int")] = \
        Field(3, ge=1)
    failure_ratio: Annotated[float, Opt("search: failures kept per success",
                                        kind="non_negative_float")] = Field(0.5, ge=0)
    search_source_ranges: Annotated[tuple[SourceRange, ...], Opt(
        "search: files numbered FIRST..LAST come from QA source SOURCE (repeatable), for files "
        "not under a folder named after their source", name="source_ranges", flag="--source-range",
        kind="source_range", metavar="FIRST-LAST=SOURCE")] = ()
    # Checked on each file's size before it is read; not a regular file is always rejected.
    max_file_mb: Annotated[int, Opt(
        "rollout files larger than this many MiB are rejected unread", kind="positive_int",
        metavar="MB", omit_at_default=True)] = Field(DEFAULT_MAX_FILE_MB, ge=1)


def label_env(successes: int, failures: int, options: SelectionOptions) -> EnvLabel:
    if successes >= options.mixed_min_successes and failures >= options.mixed_min_failures:
        return "mixed"
    if successes >= options.label_min_outcomes:
        return "all_success"
    if failures >= options.label_min_outcomes:
        return "all_fail"
    return "unlabelled"


def shortest_episodes(
    episodes: Sequence[tuple[str, int, bool]], label: EnvLabel, options: SelectionOptions
) -> list[int]:
    """Indices of the episodes to keep from (file name, step count, won) triples."""
    wanted = {"all_success": (True,), "all_fail": (False,)}.get(label, (True, False))
    candidates = [i for i, (_, _, won) in enumerate(episodes) if won in wanted]
    candidates.sort(key=lambda i: (episodes[i][1], natural_key(episodes[i][0])))
    return candidates[: options.n_trajs_per_env]


def env_quotas(options: SelectionOptions) -> dict[str, int | None]:
    """How many envs of each label may be kept (None: no limit). A worker compares its
    folder's place with them to know whether its env is kept whatever comes before it."""
    return {
        "all_success": options.n_success_envs,
        "all_fail": options.n_fail_envs,
        "mixed": options.n_mixed_envs if options.include_mixed else 0,
    }


def apply_env_quotas(
    labelled: Iterable[tuple[EnvLabel, RecordT]],
    options: SelectionOptions,
    counts: Counter[str],
    on_skip: Callable[[RecordT, str], None] | None = None,
) -> Iterator[RecordT]:
    """Keep the first envs of each label up to its quota; `labelled` is in folder order.
    Each env left out is given to `on_skip` with its reason, for the rejects file (the caller
    keeps what the reject needs, not the record, which may be large).

    A stream: an env is kept or left out as soon as it arrives (the quotas count the envs
    before it only), so stage 1 builds a kept record while the workers parse the folders
    after it instead of waiting for the last one."""
    quotas = env_quotas(options)
    taken: Counter[str] = Counter()
    for label, record in labelled:
        quota = quotas[label]
        if quota is not None and taken[label] >= quota:
            reason = "skipped_mixed" if label == "mixed" and not options.include_mixed else (
                f"over_quota_{label}"
            )
            counts[f"envs_{reason}"] += 1
            if on_skip is not None:
                on_skip(record, reason)
            continue
        taken[label] += 1
        counts[f"envs_{label}"] += 1
        yield record


def file_number(path: PurePosixPath) -> int | None:
    """The last run of digits in the file's name (`q_0042.txt` -> 42), if any."""
    digits = "".join(ch if ch.isdigit() else " " for ch in path.stem).split()
    return int(digits[-1]) if digits else None


# Usual spellings of the QA sources in public search-agent data sets, after `source_key`.
SOURCE_ALIASES: dict[str, str] = {
    "2wiki": "2wikimultihopqa",
    "2wikimqa": "2wikimultihopqa",
    "2wikimultihop": "2wikimultihopqa",
    "wikimultihopqa": "2wikimultihopqa",
    "naturalquestions": "nq",
    "nqopen": "nq",
    "trivia": "triviaqa",
    "tqa": "triviaqa",
    "hotpot": "hotpotqa",
    "musiqueans": "musique",
    "bamboogleqa": "bamboogle",
}


def source_key(name: str) -> str:
    """`2Wiki-MultiHopQA`, `hotpot_qa` and `Pop QA` compare as `2wikimultihopqa`, `hotpotqa`..."""
    return "".join(ch for ch in name.lower() if ch not in "-_ .")


def _spans(table: Iterable[tuple[int, int, str]]) -> tuple[SourceRange, ...]:
    return tuple(SourceRange(first=a, last=b, source=s) for a, b, s in table)


# Item numbers of the Search-R1 test set (its seven sources concatenated in this order, sizes of
# their test splits): SkillRL's search rollouts are numbered by these items.
DEFAULT_SOURCE_RANGES: tuple[SourceRange, ...] = _spans((
    (0, 3609, "nq"),
    (3610, 14922, "triviaqa"),
    (14923, 29189, "popqa"),
    (29190, 36594, "hotpotqa"),
    (36595, 49170, "2wikimultihopqa"),
    (49171, 51587, "musique"),
    (51588, 51712, "bamboogle"),
))


def resolve_source(
    path: PurePosixPath, known_sources: Iterable[str], options: SelectionOptions
) -> tuple[str, str]:
    """(QA source, the rule that gave it) of a Search file; rules in the module docstring."""
    known = {source_key(name): name for name in known_sources}
    known.update({alias: known[name] for alias, name in SOURCE_ALIASES.items() if name in known})
    for folder in reversed(path.parent.parts):
        if source_key(folder) in known:
            return known[source_key(folder)], "folder"
    number = file_number(path)
    rules = (
        ("range", options.search_source_ranges),
        ("default_range", () if options.search_source_ranges else DEFAULT_SOURCE_RANGES),
    )
    if number is not None:
        for rule, spans in rules:
            for span in spans:
                if span.first <= number <= span.last:
                    return span.source, rule
    return "unknown", "unknown"


def failures_allowed(successes: int, ratio: float) -> int:
    """floor(ratio x successes), rounded first so 0.29 x 100 gives 29, not 28."""
    return math.floor(round(ratio * successes, 9))


def balance_by_source(
    questions: Iterable[tuple[str, str, bool, RecordT]],
    options: SelectionOptions,
    counts: Counter[str],
    skipped: list[tuple[RecordT, str]] | None = None,
) -> list[RecordT]:
    """Keep every success and the first failures per source; result in natural id order.

    `questions` holds (id, source, won, record) in any order; each failure left out is
    appended to `skipped` with its reason.
    """
    ordered = sorted(questions, key=lambda q: natural_key(q[0]))
    wins = Counter(source for _, source, won, _ in ordered if won)
    allowed = {source: failures_allowed(wins[source], options.failure_ratio) for source in wins}
    used: Counter[str] = Counter()
    kept: list[RecordT] = []
    for _, source, won, record in ordered:
        if not won:
            if used[source] >= allowed.get(source, 0):
                counts["questions_dropped_failure_balance"] += 1
                if skipped is not None:
                    skipped.append((record, "failure_balance"))
                continue
            used[source] += 1
        counts[f"questions_kept_{'success' if won else 'failure'}"] += 1
        counts[f"source_{source}"] += 1
        kept.append(record)
    return kept
