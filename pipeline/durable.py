"""Durable file writes, shared by the work dir's targets and the teacher journal.

`os.write` may write fewer bytes than asked (signals, full disks, network file systems), so
every write loops until done; data is fsynced before it counts, and a folder is fsynced after
a file is created or renamed in it, since the name lives in the folder.

Files are created with mode 0666 and folders 0777, so the kernel applies the process umask
(and any default ACL) as it does for `open` and `mkdir`: under `umask 002` a group sharing a
work dir can read and update the corpus, under `umask 022` everyone can read it. (`mkstemp`
would create 0600, and a rename keeps the mode, so every output would be owner-only.)
"""

import os
import secrets
from collections.abc import Iterable
from pathlib import Path

# Streamed writes gather small chunks into writes of about this size.
WRITE_BYTES = 1 << 20
FILE_MODE = 0o666  # before the umask, like open(); the umask takes away what it must


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
    handle, temporary = create_temporary(path)
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


def create_temporary(path: Path) -> tuple[int, Path]:
    """A new, exclusively created file beside `path` (a hidden, random name), mode 0666 less
    the umask; the name is retried in the (astronomically unlikely) case it exists."""
    while True:
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
            return os.open(temporary, flags, FILE_MODE), temporary
        except FileExistsError:
            continue


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
