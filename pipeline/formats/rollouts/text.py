"""Reading rollout files as text, turning every way a file can be unusable into a reject reason.

A rollout corpus is written by other people's scripts, often on machines that crashed or ran
out of disk, so a file may be empty, binary, in another encoding or cut off. Each case becomes
a `MalformedRollout` with a reason name that ends up as a `rejected_<reason>` counter.

Nor is the folder trusted to hold files: a named pipe would block the reader forever and a
link to `/dev/zero` would fill the memory, so what is not a regular file is rejected from its
`stat` alone, never opened, and a file over the size limit is rejected before it is read.
"""

import os
import re
import stat
from pathlib import Path

from skillsft.pipeline.errors import MalformedRollout

_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key putting `test2` before `test10`, so order follows numbers, not characters."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in _DIGITS.split(name))


# The default of `--max-file-mb`: far above any real episode (the largest seen are a few MB).
DEFAULT_MAX_FILE_MB = 64
MIB = 1 << 20
# What a folder entry is, when it is not a regular file (by `stat.S_IFMT`).
_NOT_REGULAR = {
    stat.S_IFIFO: "a named pipe",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a folder",
}


def _unreadable(exc: OSError) -> MalformedRollout:
    return MalformedRollout(
        "unreadable",
        f"cannot read the file ({exc.strerror or exc})",
        hint="check the file's permissions, or remove it from ROLLOUT_DIR",
    )


def _too_large(size: int, max_mb: float) -> MalformedRollout:
    return MalformedRollout(
        "too_large",
        f"the file is {size / MIB:.1f} MiB, over --max-file-mb {max_mb:g}; it was not read",
        hint="raise --max-file-mb if it really is one episode, else remove it from ROLLOUT_DIR",
    )


def check_regular_file(path: Path, max_mb: float = DEFAULT_MAX_FILE_MB) -> int:
    """The file's size, once its `stat` (through symlinks) shows a regular file no larger than
    `max_mb` MiB; else raise `MalformedRollout` (`not_regular_file`, `too_large`). Opens
    nothing."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise _unreadable(exc) from exc
    if not stat.S_ISREG(info.st_mode):
        kind = _NOT_REGULAR.get(stat.S_IFMT(info.st_mode), "not a regular file")
        link = f" (a symlink to {os.readlink(path)})" if os.path.islink(path) else ""
        raise MalformedRollout(
            "not_regular_file",
            f"{kind}{link}, not a regular file; it was not opened",
            hint="rollout folders hold plain text files: remove it from ROLLOUT_DIR",
        )
    if info.st_size > max_mb * MIB:
        raise _too_large(info.st_size, max_mb)
    return info.st_size


def read_limited(path: Path, max_mb: float = DEFAULT_MAX_FILE_MB) -> bytes:
    """A regular file's bytes, at most `max_mb` MiB of them (see `check_regular_file`). The
    file is opened without blocking and checked again once open, so one swapped for a pipe
    after the `stat` is still never waited on, and one that grew is cut off, not read whole."""
    check_regular_file(path, max_mb)
    limit = int(max_mb * MIB)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise _unreadable(exc) from exc
    with open(fd, "rb") as handle:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            raise MalformedRollout("not_regular_file", "it stopped being a regular file between "
                                   "its stat and its opening; it was not read",
                                   hint="remove it from ROLLOUT_DIR")
        try:
            data = handle.read(limit + 1)
        except OSError as exc:
            raise _unreadable(exc) from exc
    if len(data) > limit:
        raise _too_large(max(opened.st_size, len(data)), max_mb)
    return data


def read_rollout_text(path: Path, max_mb: float = DEFAULT_MAX_FILE_MB) -> str:
    """Return the file's text with Unix newlines, or raise `MalformedRollout` saying why not."""
    data = read_limited(path, max_mb)
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
