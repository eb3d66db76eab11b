"""Durable file writes, shared by the work dir's targets and the teacher journal.

`os.write` may write fewer bytes than asked (signals, full disks, network file systems), so
every write loops until done; data is fsynced before it counts, and a folder is fsynced after
a file is created or renamed in it, since the name lives in the folder.
"""

import os
import tempfile
from pathlib import Path


def write_all(descriptor: int, data: bytes) -> None:
    """Write every byte of `data`, however many calls it takes."""
    view = memoryview(data)
    while view:
        written = os.write(descriptor, view)
        if written <= 0:
            raise OSError(f"write returned {written} with {len(view)} bytes left")
        view = view[written:]


def fsync_folder(folder: Path) -> None:
    """Make a rename or a new file in `folder` durable (the entry lives in the folder)."""
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_bytes_atomically(path: Path, data: bytes) -> None:
    """Write a temporary file beside the target, fsync it, rename it over the target, fsync the
    folder: a reader or a crash (even a power loss) sees the old bytes or the new, never half,
    and a manifest written after an output can never survive without that output."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        write_all(handle, data)
        os.fsync(handle)
    except BaseException:
        os.close(handle)
        os.unlink(temporary)
        raise
    os.close(handle)
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
