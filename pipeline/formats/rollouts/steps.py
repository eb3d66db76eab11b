"""Parser for the ALFWorld/WebShop step format (FORMATS.md section 1).

The parser is line-oriented and uses str methods rather than one big regex: a corpus holds tens
of thousands of files, and each line only needs a couple of `startswith` checks to know what it
is. It returns light `RawStep`s; pydantic models are built later, for kept trajectories only.

What a file looks like, and what happens to each part:

    === Trajectory for Test K, Env N ===          optional banner, skipped
    Step 00 | Action: a | Reward: 0.0 | Done: False   header -> step_id, action, reward, done
    Raw Model Output: ...                         writer lines -> RawStep.metadata
    Obs: text ...                                 observation, cleaned (see `clean_observation`)
    Your admissible actions ... are: [ ... ].     -> RawStep.admissible_actions
    Now it's your turn to take an action. ...     boilerplate, dropped
"""

import math
from dataclasses import dataclass, field

from skillsft.pipeline.errors import MalformedRollout
from skillsft.pipeline.formats.rollouts.admissible import PREFIX as ADMISSIBLE_PREFIX
from skillsft.pipeline.formats.rollouts.admissible import split_admissible

TASK_MARKER = "Your task is to:"
BANNER = "-= Welcome to TextWorld, ALFRED! =-"
TURN_PARAGRAPH = "Now it's your turn to take an action."
# Where the writer's instruction paragraph may begin (some writers omit its first sentence).
INSTRUCTION_STARTS = (TURN_PARAGRAPH, "Once you've finished your reasoning")
REASON_START = "You should first reason step-by-step"
REASON_END = "<think> </think> tags."
OBS_PREFIXES = ("Your current observation is:",)
STEP_OBS_START = "You are now at step "
STEP_OBS_MARK = "and your current observation is:"
KNOWN_METADATA = frozenset({"Raw Model Output", "Parsed Action", "Valid Action"})

_HINT_EDIT = "fix or delete this file; the rest of the corpus is processed without it"


@dataclass(slots=True)
class RawStep:
    step_id: str
    action: str | None
    observation: str
    admissible_actions: list[str]
    reward: float
    done: bool
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Episode:
    """One parsed rollout file: the task from its first block and every step in order."""

    task: str
    steps: list[RawStep]
    # The writer finished the last block (observation and admissible list) but the episode is
    # not done: the agent ran out of steps. A failure, not a file cut off while writing.
    stopped_at_step_limit: bool = False

    def succeeded(self, success_reward: float) -> bool:
        return any(step.done and step.reward >= success_reward for step in self.steps)


HEADER_START = "Step "
HEADER_MARK = " | Action: "


def header_starts(text: str) -> list[int]:
    """Offsets of the header lines: lines that start with `Step ` and hold ` | Action: ` (which
    may begin at the space of `Step `: such a line is a header, and a broken one). Found by
    jumping from one `\nStep ` to the next, so the lines between are never looked at."""
    marker = "\n" + HEADER_START
    at = 0 if text.startswith(HEADER_START) else text.find(marker) + 1
    if at == 0 and not text.startswith(HEADER_START):
        return []
    starts: list[int] = []
    while True:
        line_end = text.find("\n", at)
        if line_end < 0:
            line_end = len(text)
        if text.find(HEADER_MARK, at, line_end) >= 0:
            starts.append(at)
        following = text.find(marker, line_end)
        if following < 0:
            return starts
        at = following + 1


def parse_header(line: str, lineno: int) -> tuple[str, str | None, float, bool]:
    """Split `Step <id> | Action: <a> | Reward: <r> | Done: <d>`; the action may hold ` | `."""
    left, _, rest = line.partition(" | Action: ")
    action, sep1, reward_part = rest.rpartition(" | Reward: ")
    reward_text, sep2, done_text = reward_part.partition(" | Done: ")
    step_number = left[5:].strip()
    done_text = done_text.strip()
    try:
        if not (sep1 and sep2) or done_text not in ("True", "False"):
            raise ValueError
        int(step_number)
        reward = float(reward_text)
        if not math.isfinite(reward):  # nan/inf would not survive JSON, nor decide a win
            raise ValueError
    except ValueError:
        raise MalformedRollout(
            "bad_step_header",
            f"cannot read step header {line[:120]!r}; expected "
            "'Step <id> | Action: <action> | Reward: <float> | Done: <True|False>'",
            line=lineno,
            hint=_HINT_EDIT,
        ) from None
    parsed_action = None if action == "None" and step_number == "-1" else action
    return f"Step {step_number}", parsed_action, reward, done_text == "True"


def _is_metadata_key(key: str) -> bool:
    return key in KNOWN_METADATA or (
        0 < len(key) <= 40 and key[0].isupper() and key.replace(" ", "").isalpha()
    )


RAW_OUTPUT_KEY = "Raw Model Output"
RAW_OUTPUT_END = "</action>"


def _starts_known_key(line: str) -> bool:
    name, sep, _ = line.partition(": ")
    return bool(sep) and name in KNOWN_METADATA


def _raw_output_open_after(line: str, open_now: bool) -> bool:
    """Whether a model's raw output is still being written after this line.

    A model's text may contain anything, `Obs:` and `Note: ...` lines included; it ends at its
    `</action>` or where the writer's next known key (`Parsed Action:`, ...) begins.
    """
    if line.startswith(RAW_OUTPUT_KEY + ": "):
        return RAW_OUTPUT_END not in line
    if open_now and (RAW_OUTPUT_END in line or _starts_known_key(line)):
        return False
    return open_now


def find_obs_line(lines: list[str], start: int, end: int) -> int | None:
    """Index of the step's `Obs:` line, skipping any inside a multi-line raw model output."""
    raw_open = False
    for j in range(start, end):
        line = lines[j]
        was_open = raw_open
        raw_open = _raw_output_open_after(line, raw_open)
        if not was_open and not line.startswith(RAW_OUTPUT_KEY) and line.startswith("Obs:"):
            return j
    return None


def parse_metadata(lines: list[str], first_lineno: int) -> dict[str, str]:
    """Writer lines between the header and `Obs:`; a line without a key continues the last."""
    metadata: dict[str, str] = {}
    key = None
    raw_open = False
    for offset, line in enumerate(lines):
        name, sep, value = line.partition(": ")
        was_open = raw_open
        raw_open = _raw_output_open_after(line, raw_open)
        if was_open and not _starts_known_key(line):
            metadata[RAW_OUTPUT_KEY] += "\n" + line  # the model's own text, whatever it says
        elif sep and _is_metadata_key(name):
            key = name
            metadata[key] = value
        elif key is not None:
            metadata[key] += "\n" + line
        elif line.strip():
            raise MalformedRollout(
                "unparseable_step",
                f"unexpected text between a step header and its 'Obs:' line: {line[:80]!r}",
                line=first_lineno + offset,
                hint=_HINT_EDIT,
            )
    return {k: v.rstrip("\n") for k, v in metadata.items()}


def strip_task(line: str) -> tuple[str, str | None]:
    """Remove `Your task is to: ...` from a line; return (what remains, the task if found)."""
    pos = line.find(TASK_MARKER)
    if pos < 0:
        return line, None
    task = line[pos + len(TASK_MARKER) :].strip()
    if task.endswith("."):
        task = task[:-1].rstrip()
    return line[:pos].rstrip(), task


def strip_observation_prefix(line: str) -> str:
    for prefix in OBS_PREFIXES:
        if line.startswith(prefix):
            return line[len(prefix) :].lstrip()
    if line.startswith(STEP_OBS_START):
        pos = line.find(STEP_OBS_MARK)
        if pos >= 0:
            return line[pos + len(STEP_OBS_MARK) :].lstrip()
    return line


def cut_admissible(text: str, first_lineno: int, *, last_block: bool) -> tuple[str, list[str]]:
    """Remove the admissible list from an observation; return (rest, actions).

    The list ends at the first `].` after which every `[` is closed, so WebShop actions such as
    `click[< prev]` inside it do not end it early.
    """
    pos = text.find(ADMISSIBLE_PREFIX)
    if pos < 0:
        return text, []
    open_at = text.find("[", pos + len(ADMISSIBLE_PREFIX))
    end = text.find("]", open_at) if open_at >= 0 else -1
    while end >= 0 and text.count("[", open_at, end + 1) > text.count("]", open_at, end + 1):
        end = text.find("]", end + 1)
    if open_at < 0 or end < 0 or text[pos + len(ADMISSIBLE_PREFIX) : open_at].strip():
        raise MalformedRollout(
            "truncated" if last_block and end < 0 else "unparseable_step",
            "the admissible-action list is not a '[...]' closed with ']'",
            line=first_lineno + text.count("\n", 0, pos),
            hint=_HINT_EDIT,
        )
    after = end + 2 if text.startswith("].", end) else end + 1
    return text[:pos] + text[after:], split_admissible(text[open_at + 1 : end])


def clean_observation(
    text: str, first_lineno: int, *, last_block: bool
) -> tuple[str, list[str], str | None]:
    """Return (observation, admissible actions, task) from the text after `Obs:`.

    Removes the admissible list, the task line, the TextWorld banner, the instruction paragraph,
    the reasoning instruction and the observation prefixes; blank-line runs become one.
    """
    text, actions = cut_admissible(text, first_lineno, last_block=last_block)
    lines = text.split("\n")
    # Each marker is looked for line by line only when the observation holds it at all (most
    # do not). A line is a piece of `text` unless the reasoning or banner cut joined two
    # pieces: such a line is searched for everything, whatever `text` holds.
    starts = [marker for marker in INSTRUCTION_STARTS if marker in text]
    has_prefix = STEP_OBS_START in text or any(prefix in text for prefix in OBS_PREFIXES)
    has_task = TASK_MARKER in text
    has_reason = REASON_START in text  # a line is still a piece of `text` when it is looked at
    has_banner = BANNER in text
    # Only a reasoning or banner cut can join pieces, so without any of these markers a line
    # needs no more than the instruction cut and the blank-line rule.
    has_other = has_prefix or has_task or has_reason or has_banner
    kept: list[str] = []
    task = None
    k = 0
    n = len(lines)
    while k < n:
        line = lines[k]
        k += 1
        cut = -1
        for marker in starts:
            found = line.find(marker)
            if found >= 0 and (cut < 0 or found < cut):
                cut = found
        if cut >= 0:  # the instruction runs from here to the end of its paragraph
            while k < n and lines[k].strip():
                k += 1
            line = line[:cut].rstrip()
            if not line:
                continue
        if has_other:
            joined = False
            if has_reason and REASON_START in line:
                joined = True
                begin = line.find(REASON_START)
                end = line.find(REASON_END, begin)
                while end < 0 and k < n:
                    line = lines[k]
                    begin = 0
                    k += 1
                    end = line.find(REASON_END)
                if end < 0:
                    continue
                before, after = line[:begin].strip(), line[end + len(REASON_END) :].strip()
                line = f"{before} {after}".strip()
            if (has_banner or joined) and BANNER in line:
                joined = True
                line = line.replace(BANNER, "").strip()
            if has_prefix or joined:
                line = strip_observation_prefix(line)
            found = None
            if has_task or joined:
                line, found = strip_task(line)
            if found is not None and task is None:
                task = found
        if line.strip() or (kept and kept[-1]):
            kept.append(line.rstrip())
    while kept and not kept[-1]:
        kept.pop()
    return "\n".join(kept), actions, task


def _obs_block(
    text: str, after_header: int, block_end: int, header_lineno: int, step_id: str,
    last_block: bool,
) -> tuple[dict[str, str], str, int]:
    """(metadata, observation text after `Obs:`, line number of the `Obs:` line) of the block
    between a header line's end and `block_end`. Most blocks start with their `Obs:` line and
    are sliced out of `text` whole; only one with writer lines first is cut into lines."""
    if after_header < block_end and text.startswith("Obs:", after_header + 1):
        first_end = text.find("\n", after_header + 1, block_end)
        if first_end < 0:
            first_end = block_end
        observation = text[after_header + 5 : first_end].lstrip() + text[first_end:block_end]
        return {}, observation, header_lineno + 1
    lines = text[after_header + 1 : block_end].split("\n") if after_header < block_end else []
    obs_at = find_obs_line(lines, 0, len(lines))
    if obs_at is None:
        raise MalformedRollout(
            "truncated" if last_block else "unparseable_step",
            f"{step_id} has no 'Obs:' line",
            line=header_lineno,
            hint=_HINT_EDIT,
        )
    metadata = parse_metadata(lines[:obs_at], header_lineno + 1)
    observation = "\n".join([lines[obs_at][4:].lstrip(), *lines[obs_at + 1 :]])
    return metadata, observation, header_lineno + 1 + obs_at


def parse_step_rollout(text: str) -> Episode:
    """Parse one episode; raise `MalformedRollout` (with a line number) on anything broken.

    The file is walked by character offsets, header to header (`header_starts`), not split
    into lines: each block's observation is one slice of the text."""
    starts = header_starts(text)
    if not starts:
        raise MalformedRollout(
            "no_step_header",
            "no 'Step <id> | Action: ... | Reward: ... | Done: ...' line in the file",
            hint="this is not a rollout in the step format; remove it from ROLLOUT_DIR",
        )
    for i, line in enumerate(text[: starts[0]].split("\n")[:-1]):
        stripped = line.strip()
        if stripped and not (stripped.startswith("===") and stripped.endswith("===")):
            raise MalformedRollout(
                "text_before_first_step",
                f"unexpected text before the first step header: {stripped[:80]!r}",
                line=i + 1,
                hint=_HINT_EDIT,
            )
    steps: list[RawStep] = []
    task = None
    last_block_complete = False
    first_lineno = lineno = text.count("\n", 0, starts[0]) + 1
    # A block ends before the newline of the next header's line, the last one at the end.
    block_ends = [start - 1 for start in starts[1:]] + [len(text)]
    previous = starts[0]
    for b, (start, block_end) in enumerate(zip(starts, block_ends, strict=True)):
        lineno += text.count("\n", previous, start)
        previous = start
        last_block = b == len(starts) - 1
        header_end = text.find("\n", start, block_end)
        if header_end < 0:
            header_end = block_end
        step_id, action, reward, done = parse_header(text[start:header_end], lineno)
        metadata, obs_text, obs_lineno = _obs_block(
            text, header_end, block_end, lineno, step_id, last_block)
        observation, actions, found = clean_observation(obs_text, obs_lineno,
                                                        last_block=last_block)
        if b == 0:
            task = found
        # cut_admissible raised if the list was left open, so its presence means it closed.
        last_block_complete = last_block and ADMISSIBLE_PREFIX in obs_text
        steps.append(RawStep(step_id, action, observation, actions, reward, done, metadata))
    if not task:
        raise MalformedRollout(
            "no_task",
            "the first step has no 'Your task is to: ...' line",
            line=first_lineno,
            hint="the task must appear in the first block; fix or delete this file",
        )
    if not steps[-1].done and not last_block_complete:
        raise MalformedRollout(
            "truncated",
            f"the episode stops inside {steps[-1].step_id} (no admissible-action list after its "
            "observation) without a 'Done: True' step",
            line=lineno,
            hint="the file was probably cut off while writing; re-export or delete it",
        )
    return Episode(task, steps, stopped_at_step_limit=not steps[-1].done)
