"""Request claims on a local disk: one lock file per journal, one locked byte per request key.

The journal takes a claim before every paid call (journal.py), so a claim must cost almost
nothing. A claim file per key (create, `flock`, check the inode, unlink, close: five system calls
that change the folder) was the largest per-request cost the client had besides HTTP. Here every
journal's claims folder holds one file, `requests.lock`, and a claim on a key is a POSIX record
lock (`fcntl(F_SETLK)`) on one byte of it, at an offset taken from a hash of the key: two system
calls per claim (lock, unlock), the folder never changes, and the kernel drops the locks of a
process that dies, kill -9 included, as it does for `flock`. The file stays empty: a record lock
may lie past its end.

Two keys that hash to the same byte (offsets are 62 bits wide, so a collision is about as likely
as two equal sha256 prefixes of that length) only make one wait for the other: a claim never lets
two holders through, it can only make one wait needlessly.

Record locks belong to a process, not to a descriptor, which shapes the rest:
- within a process they never conflict, so the held bytes are also kept in a table of this
  process (a claim taken by another Journal object or thread of the same process is refused);
- closing any descriptor of the file drops every lock the process holds on it, so each process
  opens the file once and never closes it (`_LockFile`; nothing else opens `requests.lock`);
- a forked child holds none of its parent's locks (they are not inherited) and opens its own.

The lease mode (claims.py) keeps a file per key: it is the mode for file systems where record
locks cannot be trusted, and O_CREAT|O_EXCL is what it relies on there.
"""

import errno
import fcntl
import hashlib
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

LOCK_FILE = "requests.lock"
_OFFSET_BITS = 62  # offset + length stays below off_t's limit


def key_offset(name: str) -> int:
    """The byte that stands for `name` in the lock file."""
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - _OFFSET_BITS)


@dataclass
class _LockFile:
    """This process's one descriptor on a lock file and the bytes it holds there."""

    fd: int
    held: set[int] = field(default_factory=set)


_files: dict[tuple[int, Path], _LockFile] = {}  # (pid, path): a forked child opens its own
_table_lock = threading.Lock()


def _reset_after_fork() -> None:
    global _table_lock
    _table_lock = threading.Lock()  # a thread of the parent may have held it at the fork
    # The child holds none of its parent's locks (record locks are not inherited); its own
    # table starts empty, so a reused pid can never find an ancestor's `held` set.
    _files.clear()


os.register_at_fork(after_in_child=_reset_after_fork)


def _lock_file(path: Path) -> _LockFile:
    """Called with `_table_lock` held."""
    entry = _files.get((os.getpid(), path))
    if entry is None:
        entry = _LockFile(os.open(path, os.O_CREAT | os.O_RDWR, 0o666))
        _files[(os.getpid(), path)] = entry
    return entry


@dataclass
class RequestClaim:
    file: _LockFile
    offset: int
    released: bool = False

    def release(self) -> None:
        with _table_lock:
            if self.released:
                return
            self.released = True
            try:
                fcntl.lockf(self.file.fd, fcntl.LOCK_UN, 1, self.offset)
            finally:
                self.file.held.discard(self.offset)


@dataclass
class RequestClaims:
    """Claims on names (request keys) inside one folder, as byte locks of one file."""

    folder: Path
    mode: str = "flock"

    def __post_init__(self) -> None:
        # resolved, so two spellings of one folder share this process's descriptor and table
        self.path = (Path(self.folder) / LOCK_FILE).resolve()

    def try_claim(self, name: str) -> RequestClaim | None:
        """The claim on `name`, or None when this or another live process holds it."""
        offset = key_offset(name)
        with _table_lock:
            file = _lock_file(self.path)
            if offset in file.held:
                return None
            try:
                fcntl.lockf(file.fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, offset)
            except OSError as error:
                if error.errno in (errno.EAGAIN, errno.EACCES):
                    return None  # another process holds the byte
                raise  # e.g. ENOLCK: record locks do not work here (use the lease mode)
            file.held.add(offset)
        return RequestClaim(file, offset)
