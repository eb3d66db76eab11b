"""Durable file writes, shared by the work dir's targets and the teacher journal.

`os.write` may write fewer bytes than asked (signals, full disks, network file systems), so
every write loops until done; data is fsynced before it counts, and a folder is fsynced after
a file is created or renamed in it, since the name lives in the folder.
"""

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

# Streamed writes gather small chunks into writes of about this size.
WRITE_BYTES = 1 << 20


def write_all(descriptor: int, data: bytes) -> None:
    """Write every byte of `data`, however many calls it takes."""
    view = memoryview(data)
    while view:
        written = os.write(descriptor, view)
        if written <= 0:
            raise OSError(f"write returned {written} with {len(view)} bytes left")
        view = view[written:]


def _write_chunks(descriptor: int, chunks: Iterable[bytes]) -> None:
    pending: list[bytes] = []
    size = 0
    for chunk in chunks:
        pending.append(chunk)
        size += len(chunk)
        if size >= WRITE_BYTES:
            write_all(descriptor, b"".join(pending))
            pending, size = [], 0
    if pending:
        write_all(descriptor, b"".join(pending))


def fsync_folder(folder: Path) -> None:
    """Make a rename or a new file in `folder` durable (the entry lives in the folder)."""
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_bytes_atomically(path: Path, data: bytes | Iterable[bytes]) -> None:
    """Write a temporary file beside the target, fsync it, rename it over the target, fsync the
    folder: a reader or a crash (even a power loss) sees the old bytes or the new, never half,
    and a manifest written after an output can never survive without that output.

    `data` may be the bytes or an iterable of chunks (a stage streaming its records out): the
    file is the chunks joined, and only about `WRITE_BYTES` of them are held at a time."""
    commit_staged(stage_file(path, data), path)


def stage_file(path: Path, data: bytes | Iterable[bytes]) -> Path:
    """The first half of `write_bytes_atomically`: the bytes in a temporary file beside `path`,
    fsynced, not yet in place (a stage writes its streamed outputs before it is judged, and
    puts them in place only if it passes). Returns the temporary file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        if isinstance(data, bytes | bytearray | memoryview):
            write_all(handle, bytes(data))
        else:
            _write_chunks(handle, data)
        os.fsync(handle)
    except BaseException:
        os.close(handle)
        os.unlink(temporary)
        raise
    os.close(handle)
    return Path(temporary)


def commit_staged(temporary: Path, path: Path) -> None:
    """The second half: rename the staged file over `path` and fsync the folder."""
    os.replace(temporary, path)
    fsync_folder(path.parent)


def make_folder_durably(folder: Path) -> None:
    """mkdir -p, fsyncing the parent of each folder it creates."""
    if folder.is_dir():
        return
    make_folder_durably(folder.parent)
    try:
        folder.mkdir()
    except FileExistsError:
        return
    fsync_folder(folder.parent)
