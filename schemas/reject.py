"""A rejected input (a file, a line of it, or a record) and why: one line of rejects.jsonl."""

from skillsft.schemas.base import StrictModel


class Reject(StrictModel):
    stage: str
    file: str
    line: int | None = None
    reason: str
    detail: str = ""
    hint: str = ""  # what the user can do about it
