"""Exceptions skillsft raises on purpose, so callers can tell a user's mistake from a bug.

    SkillsftError                 anything skillsft raises deliberately
     +-- InputError               the user's input cannot be used as given (fix the input)
     |    +-- RolloutDirError     ROLLOUT_DIR is missing, not a folder, or holds no rollouts
     |    +-- UnreadableFile      a user-given file is not the JSON it should be
     |    +-- MalformedRollout    one rollout file breaks the format (becomes a reject, not a
     |                            crash: stage 1 catches it per file and carries on)
     +-- ConfigError              options that contradict each other or are out of range
     +-- TooManyFailures          a stage lost more items than its tolerated share
          +-- EmptyOutput         a stage produced nothing from a non-empty input

Every message names the file (and line, when known) and says what to do about it.
"""


class SkillsftError(Exception):
    """Base of every deliberate skillsft error."""


class InputError(SkillsftError):
    """The user's input cannot be used as given."""


class RolloutDirError(InputError):
    """ROLLOUT_DIR does not exist, is not a folder, or holds no rollout files."""


class UnreadableFile(InputError, ValueError):
    """A user-given JSON file (skill bank, memories, trajectories) cannot be parsed.

    Also a ValueError, which is what callers caught before this class existed."""


class MalformedRollout(InputError):
    """One rollout file breaks the format; `reason` is a short counter-friendly name.

    `line` is 1-based in the file when the fault has a position, and `hint` tells the user
    what to do. Stage 1 turns this into a `schemas.Reject` and moves on to the next file.
    """

    def __init__(self, reason: str, detail: str, *, line: int | None = None, hint: str = ""):
        super().__init__(f"{reason}: {detail}" + (f" (line {line})" if line else ""))
        self.reason = reason
        self.detail = detail
        self.line = line
        self.hint = hint


class ConfigError(SkillsftError, ValueError):
    """Options that are out of range or contradict each other."""


class TooManyFailures(SkillsftError):
    """More items of a stage failed than the tolerated share: the output would mislead."""


class EmptyOutput(TooManyFailures):
    """A stage made no record from a non-empty input: a corpus of nothing is not a success."""

