"""Reading rollout files as text, turning every way a file can be unusable into a reject reason.

A rollout corpus is written by other people's scripts, often on machines that crashed or ran
out of disk, so a file may be empty, binary, in another encoding or cut off. Each case becomes
a `MalformedRollout` with a reason name that ends up as a `rejected_<reason>` counter.
"""

import re
from pathlib import Path

from skillsft.pipeline.errors import MalformedRollout

_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key putting `test2` before `test10`, so order follows numbers, not characters."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in _DIGITS.split(name))


def read_rollout_text(path: Path) -> str:
    """Return the file's text with Unix newlines, or raise `MalformedRollout` saying why not."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise MalformedRollout(
            "unreadable",
            f"cannot read the file ({exc.strerror or exc})",
            hint="check the file's permissions, or remove it from ROLLOUT_DIR",
        ) from exc
    if not data.strip():
        raise MalformedRollout(
            "empty", "the file is empty", hint="delete it or re-export the episode"
        )
    if b"\x00" in data:
        raise MalformedRollout(
            "binary",
            "the file holds NUL bytes, so it is not rollout text",
            line=data.count(b"\n", 0, data.index(b"\x00")) + 1,
            hint="remove binary files from ROLLOUT_DIR",
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedRollout(
            "not_utf8",
            f"byte {exc.start} is not valid UTF-8 ({exc.reason})",
            line=data.count(b"\n", 0, exc.start) + 1,
            hint="re-encode the file as UTF-8 (e.g. iconv -t utf-8)",
        ) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text
