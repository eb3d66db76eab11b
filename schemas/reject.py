"""A rejected input (a file, a line of it, or a record) and why: one line of rejects.jsonl."""

from skillsft.schemas.base import StrictModel

# The reason of a rejects line for an item a stage chose not to use (selection, a skipped env):
# listed, but not a failure.
SKIP_PREFIX = "skipped_"


class Reject(StrictModel):
    stage: str
    file: str
    line: int | None = None
    reason: str
    detail: str = ""
    hint: str = ""  # what the user can do about it
    # For an item inside a file (a dropped turn, a skipped env): which trajectory, which step or
    # turn, and the agent's action there, so the line can be found without reading `detail`.
    trajectory: str | None = None
    step: str | None = None
    action: str | None = None
