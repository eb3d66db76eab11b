"""Parser for Search-QA rollouts (FORMATS.md section 2).

    Your question: <question>
    History:                                       zero or more blocks, one per turn;
    Step 0:<search>q</search> <information>..</information>   the last block is complete
    Now it's your turn to take an action.
    Action 2: <answer>final answer</answer>        the final action (a one-shot file has only this)
    Reward: 1.0

Steps come from the last `History:` block followed by the final `Action k:`. Each step keeps its
full action tag and, as its observation, the text inside `<information>` ("" when it retrieved
nothing). `memory_context` is the history the agent saw before that step, rendered the way
the distilled prompts show it (FORMATS.md 7): one `Step j: <tag> <information>..</information>`
line per earlier step, joined by newlines, "" for the first step.
"""

from dataclasses import dataclass

from skillsft.pipeline.errors import MalformedRollout

QUESTION_MARKER = "Your question:"
HISTORY_MARKER = "History:"
TURN_LINE = "Now it's your turn to take an action."
INFO_OPEN, INFO_CLOSE = "<information>", "</information>"
_HINT = "fix or delete this file; the rest of the corpus is processed without it"


@dataclass(slots=True)
class SearchRawStep:
    step_id: str
    action: str
    information: str
    memory_context: str
    reward: float
    done: bool


@dataclass(slots=True)
class SearchEpisode:
    question: str
    steps: list[SearchRawStep]
    reward: float


def _split_action(text: str) -> tuple[str, str]:
    """Split `<search>q</search> <information>i</information>` into (action tag, information)."""
    pos = text.find(INFO_OPEN)
    if pos < 0:
        return text.strip(), ""
    end = text.rfind(INFO_CLOSE)
    info = text[pos + len(INFO_OPEN) : end if end > pos else len(text)]
    return text[:pos].strip(), info.strip()


def _history_steps(lines: list[str], first_lineno: int) -> list[tuple[str, str, str]]:
    """(step number, action tag, information) for each `Step j:` entry of one History block."""
    entries: list[tuple[str, list[str]]] = []
    for offset, line in enumerate(lines):
        head, sep, rest = line.partition(":")
        if line.startswith("Step ") and sep and head[5:].strip().isdigit():
            entries.append((head[5:].strip(), [rest]))
        elif entries:
            entries[-1][1].append(line)
        elif line.strip():
            raise MalformedRollout(
                "unparseable_step",
                f"History: block line is not 'Step <n>: ...': {line[:80]!r}",
                line=first_lineno + offset,
                hint=_HINT,
            )
    return [(number, *_split_action("\n".join(body))) for number, body in entries]


def render_history_line(number: str, action: str, information: str) -> str:
    line = f"Step {number}: {action}"
    return f"{line} {INFO_OPEN}{information}{INFO_CLOSE}" if information else line


def parse_search_rollout(text: str) -> SearchEpisode:
    """Parse one Search-QA file; raise `MalformedRollout` (with a line number) when broken."""
    lines = text.split("\n")
    q_at = next((i for i, line in enumerate(lines) if line.startswith(QUESTION_MARKER)), None)
    if q_at is None:
        raise MalformedRollout(
            "no_question",
            "no 'Your question:' line in the file",
            hint="this is not a Search rollout; remove it from ROLLOUT_DIR",
        )
    question = lines[q_at][len(QUESTION_MARKER) :].strip()
    reward_at = next(
        (i for i in range(len(lines) - 1, q_at, -1) if lines[i].startswith("Reward:")), None
    )
    if reward_at is None:
        raise MalformedRollout(
            "truncated",
            "no final 'Reward: <float>' line",
            line=len(lines),
            hint="the file was probably cut off while writing; re-export or delete it",
        )
    try:
        reward = float(lines[reward_at][len("Reward:") :])
    except ValueError:
        raise MalformedRollout(
            "unparseable_step", f"bad reward {lines[reward_at]!r}", line=reward_at + 1, hint=_HINT
        ) from None
    action_at = next(
        (i for i in range(reward_at - 1, q_at, -1) if lines[i].startswith("Action ")), None
    )
    head, sep, final_text = lines[action_at].partition(":") if action_at else ("", "", "")
    if action_at is None or not sep or not head[7:].strip().isdigit():
        raise MalformedRollout(
            "truncated" if action_at is None else "unparseable_step",
            "no final 'Action <k>: <tag>' line before the reward",
            line=(action_at or reward_at) + 1,
            hint=_HINT,
        )
    final_body = "\n".join([final_text, *lines[action_at + 1 : reward_at]])
    history_at = max(
        (i for i in range(q_at, action_at) if lines[i].strip() == HISTORY_MARKER), default=None
    )
    entries: list[tuple[str, str, str]] = []
    if history_at is not None:
        block_end = next(
            (i for i in range(history_at + 1, action_at) if lines[i].startswith(TURN_LINE)),
            action_at,
        )
        entries = _history_steps(lines[history_at + 1 : block_end], history_at + 2)
    final_action, final_info = _split_action(final_body)
    if not final_action:
        raise MalformedRollout(
            "unparseable_step", "the final action is empty", line=action_at + 1, hint=_HINT
        )
    entries.append((head[7:].strip(), final_action, final_info))
    steps: list[SearchRawStep] = []
    context: list[str] = []
    for k, (number, action, info) in enumerate(entries):
        last = k == len(entries) - 1
        steps.append(
            SearchRawStep(
                f"Step {number}", action, info, "\n".join(context), reward if last else 0.0, last
            )
        )
        context.append(render_history_line(number, action, info))
    return SearchEpisode(question, steps, reward)
