"""Who may call the model for a key, and who may append to a journal: two ways to decide.

`flock` (the default on local file systems) asks the kernel: a non-blocking exclusive lock on
`<key>.lock`, dropped by the kernel when its holder dies, even by kill -9. It is exact and free,
but on network file systems it is only as good as the mount: NFSv3 needs a lock daemon, Lustre
needs the `flock` mount option (`localflock` locks one node only), some FUSE mounts ignore it.

`lease` works wherever creating a file with O_CREAT|O_EXCL is atomic, which NFSv3+, NFSv4,
Lustre, GPFS, BeeGFS and CephFS all guarantee. A claim is the file `<key>.lease`, created
exclusively and holding its owner (host, pid, token). While held, a heartbeat thread touches it
every `ttl/4` seconds. A waiter takes a lease over when its owner is on this host and its pid
is gone (kill -9: at once), or when the file has not changed for `ttl` seconds as measured by
the waiter's own clock (so clock skew between machines does not matter). Take-over renames the
stale file to a unique name first; only one waiter's rename can succeed, and it checks that
what it moved is the stale lease it judged, putting back a fresh one it moved by mistake.

The mode comes from `SKILLSFT_JOURNAL_CLAIMS` (`flock`, `lease` or `auto`, the default); `auto`
picks `lease` when /proc/self/mounts says the folder is on a network or cluster file system.
`SKILLSFT_LEASE_SECONDS` sets the lease time to live (default 60).

Every lock of a run is a claim of this module, so one setting covers them all: the journal's
request claims and append lock, the batch ledger's submission and append locks, the spend file
of --max-cost, the response-mode store and the work dir's run lock (`try_hold`, which adds
shared holders for runs that share one central scheduler). A lock is a name inside a folder:
`exclusive_beside(path)` is the blocking lock named after a file, kept in the file's folder.
"""

import contextlib
import fcntl
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import orjson

from skillsft.pipeline.durable import write_all

log = logging.getLogger("skillsft.teacher")

MODE_VARIABLE = "SKILLSFT_JOURNAL_CLAIMS"
LEASE_SECONDS_VARIABLE = "SKILLSFT_LEASE_SECONDS"
NETWORK_FILE_SYSTEMS = frozenset({
    "nfs", "nfs4", "lustre", "cifs", "smb3", "smbfs", "gpfs", "beegfs", "ceph", "fuse.sshfs",
    "glusterfs", "fuse.glusterfs", "9p", "afs", "ocfs2", "gfs2", "panfs", "wekafs",
})


class Claim(Protocol):
    def release(self) -> None: ...


class Claims(Protocol):
    """Exclusive claims on names inside one folder."""

    folder: Path
    mode: str
    suffix: str  # of the file that stands for a claim on disk

    def try_claim(self, name: str) -> Claim | None: ...

    @contextlib.contextmanager
    def exclusive(self, name: str) -> Iterator[None]: ...

    def undecided(self, name: str) -> bool: ...


# flock ----------------------------------------------------------------------------------------


@dataclass
class FlockClaim:
    path: Path
    fd: int

    def release(self) -> None:
        try:
            self.path.unlink(missing_ok=True)
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)


@dataclass
class FlockClaims:
    folder: Path
    mode: str = "flock"
    suffix: str = ".lock"

    def try_claim(self, name: str) -> FlockClaim | None:
        """The holder unlinks the file before unlocking it; a taker checks that the file it
        locked is still the one at the path (same inode), which closes the unlink race."""
        path = self.folder / f"{name}.lock"
        while True:
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return None
            try:
                same_file = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same_file = False
            if same_file:
                return FlockClaim(path, fd)
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def undecided(self, name: str) -> bool:
        """Never: the kernel knows at once whether a holder is alive."""
        return False

    @contextlib.contextmanager
    def exclusive(self, name: str) -> Iterator[None]:
        """A blocking lock on a file that is never unlinked (so no inode race to close)."""
        fd = os.open(self.folder / f"{name}.lock", os.O_CREAT | os.O_RDWR, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing drops the lock


# lease ----------------------------------------------------------------------------------------


@dataclass
class LeaseClaim:
    path: Path
    token: str
    owner: "LeaseClaims"

    def release(self) -> None:
        self.owner._forget(self)
        try:
            if _read_owner(self.path).get("token") == self.token:
                self.path.unlink(missing_ok=True)
            else:
                log.warning("%s: lease was taken over while held (heartbeat too slow?)", self.path)
        except OSError:
            pass


def _read_owner(path: Path) -> dict[str, object]:
    try:
        owner = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    return owner if isinstance(owner, dict) else {}


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return (stat.st_ino, stat.st_mtime_ns, stat.st_size)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class LeaseClaims:
    folder: Path
    ttl: float = 60.0
    mode: str = "lease"
    suffix: str = ".lease"
    host: str = field(default_factory=socket.gethostname)
    _held: dict[str, LeaseClaim] = field(default_factory=dict)
    _seen: dict[Path, tuple[tuple[int, int, int], float]] = field(default_factory=dict)
    _alive: set[Path] = field(default_factory=set)  # leases seen touched since first sight
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _heartbeat: threading.Thread | None = None

    def try_claim(self, name: str) -> LeaseClaim | None:
        path = self.folder / f"{name}.lease"
        for _ in range(3):
            token = uuid.uuid4().hex
            body = orjson.dumps({"host": self.host, "pid": os.getpid(), "token": token})
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
            except FileExistsError:
                if not self._take_over_if_stale(path):
                    return None
                continue
            try:
                # No fsync: the exclusive create is what excludes, and a lease left unreadable
                # by a crash is judged by its age like any other (on NFS, close() sends it).
                write_all(fd, body)
            finally:
                os.close(fd)
            claim = LeaseClaim(path, token, self)
            with self._lock:
                self._held[token] = claim
                self._seen.pop(path, None)
                self._alive.discard(path)
            self._start_heartbeat()
            return claim
        return None

    @contextlib.contextmanager
    def exclusive(self, name: str) -> Iterator[None]:
        """Wait for the claim: short locks (an append) are free again within milliseconds, long
        ones (a batch round) are polled more slowly, up to every 50 ms."""
        pause = 0.002
        while (claim := self.try_claim(name)) is None:
            time.sleep(pause)
            pause = min(0.05, pause * 1.5)
        try:
            yield
        finally:
            claim.release()

    def _is_stale(self, path: Path) -> bool:
        owner = _read_owner(path)
        pid = owner.get("pid")
        if owner.get("host") == self.host and isinstance(pid, int) and not _pid_alive(pid):
            return True
        signature = _signature(path)
        if signature is None:
            return False
        seen = self._seen.get(path)
        now = time.monotonic()
        if seen is None or seen[0] != signature:
            if seen is not None:
                self._alive.add(path)  # touched since we first looked: its holder is alive
            self._seen[path] = (signature, now)  # changed (or new to us): the holder is alive
            return False
        return now - seen[1] >= self.ttl

    def undecided(self, name: str) -> bool:
        """True while a lease on `name` held from another machine has been neither seen touched
        (its holder is alive) nor left untouched for the lease time (stale): a caller that may
        wait can try again to decide, which takes at most `ttl` (a live holder touches its
        lease every `ttl/4`)."""
        path = self.folder / f"{name}{self.suffix}"
        owner = _read_owner(path)
        if not owner or owner.get("host") == self.host:
            return False  # gone, or on this host, where the pid decides at once
        return path in self._seen and path not in self._alive

    def _take_over_if_stale(self, path: Path) -> bool:
        """Move a stale lease out of the way; True when the caller should try to create again."""
        if not self._is_stale(path):
            return False
        stale_token = _read_owner(path).get("token")
        moved = path.with_name(f"{path.name}.stale.{uuid.uuid4().hex}")
        try:
            os.rename(path, moved)
        except FileNotFoundError:
            return True  # someone else moved it first: race for the create
        if _read_owner(moved).get("token") != stale_token:
            with contextlib.suppress(OSError):
                os.link(moved, path)  # a fresh lease we moved by mistake: put it back
        moved.unlink(missing_ok=True)
        self._seen.pop(path, None)
        log.info("%s: took over a stale lease", path.name)
        return True

    def _forget(self, claim: LeaseClaim) -> None:
        with self._lock:
            self._held.pop(claim.token, None)

    def _start_heartbeat(self) -> None:
        with self._lock:
            if self._heartbeat is not None and self._heartbeat.is_alive():
                return
            self._heartbeat = threading.Thread(target=self._beat, daemon=True,
                                               name="skillsft-lease-heartbeat")
            self._heartbeat.start()

    def _beat(self) -> None:
        while True:
            time.sleep(self.ttl / 4)
            with self._lock:
                held = list(self._held.values())
                if not held:
                    self._heartbeat = None
                    return
            for claim in held:
                with contextlib.suppress(OSError):
                    os.utime(claim.path)


# choice ---------------------------------------------------------------------------------------


def file_system_type(folder: Path) -> str:
    """The type of the mount holding `folder` (longest matching mount point), '' if unknown."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return ""
    target, best, kind = str(folder.resolve()), "", ""
    for line in mounts:
        parts = line.split()
        if len(parts) < 3:
            continue
        point = parts[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, parts[2]
    return kind


def claims_for(folder: Path) -> Claims:
    """flock or lease claims for a folder, as SKILLSFT_JOURNAL_CLAIMS and the mount decide."""
    mode = os.environ.get(MODE_VARIABLE, "auto").strip().lower() or "auto"
    if mode not in ("auto", "flock", "lease"):
        raise ValueError(f"{MODE_VARIABLE}={mode!r}: use flock, lease or auto")
    if mode == "auto":
        mode = "lease" if file_system_type(folder) in NETWORK_FILE_SYSTEMS else "flock"
    if mode == "flock":
        return FlockClaims(folder)
    ttl = float(os.environ.get(LEASE_SECONDS_VARIABLE) or 60.0)
    return LeaseClaims(folder, ttl=ttl)


# locks built on claims ----------------------------------------------------------------------


@contextlib.contextmanager
def exclusive_beside(path: Path) -> Iterator[None]:
    """The blocking exclusive lock named after `path`, kept in its folder (`<name>.lock` or
    `<name>.lease`): for files several processes rewrite or append to."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with claims_for(path.parent).exclusive(path.name):
        yield


SHARED_MARK = ".shared-"
# How long a run-lock attempt waits out another process that only looks at the lock for a
# moment (a shared holder checking for an exclusive one); a real holder keeps it for its run.
HOLD_SETTLE_SECONDS = 0.5


@dataclass
class _Holds:
    """Several claims released together (a shared hold is its own claim)."""

    claims: list[Claim]

    def release(self) -> None:
        for claim in self.claims:
            claim.release()


def _shared_holders(claims: Claims, name: str) -> list[str]:
    prefix = f"{name}{SHARED_MARK}"
    return sorted(path.name[: -len(claims.suffix)] for path in claims.folder.iterdir()
                  if path.name.startswith(prefix) and path.name.endswith(claims.suffix))


def _live_shared_holder(claims: Claims, name: str) -> str | None:
    """A shared hold on `name` whose holder may be alive, else None (the holds of dead
    processes are removed on the way)."""
    for holder in _shared_holders(claims, name):
        probe = claims.try_claim(holder)
        if probe is None:
            return holder  # alive (or a lease from another machine not yet judged)
        probe.release()  # the holder died: its claim was taken over, and is dropped now
    return None


def try_hold(claims: Claims, name: str, *, shared: bool = False,
             settle_seconds: float = HOLD_SETTLE_SECONDS,
             waiting: Callable[[str], None] | None = None) -> Claim | None:
    """A claim held for a whole run: exclusive, or `shared` with other shared holders and
    never with an exclusive one; None when a conflicting holder is alive.

    A shared holder claims a name of its own (`<name>.shared-<id>`) and then checks that nobody
    holds `<name>` itself; an exclusive holder claims `<name>` and then checks that no shared
    holder is alive. Each checks after it has claimed, so of two that race, at least one sees
    the other and backs off: never both. A holder that died is noticed as the claims notice it:
    flock at once; a lease at once on its own machine, and from another machine by watching it
    (alive once seen touched, within a quarter of the lease time; stale, and taken over, once
    untouched for the whole lease time), `waiting` hearing once why we wait."""
    deadline = time.monotonic() + settle_seconds
    own = claims.try_claim(f"{name}{SHARED_MARK}{uuid.uuid4().hex}") if shared else None
    if shared and own is None:
        return None
    told = False
    while True:
        blocker = name
        claim = claims.try_claim(name)
        if claim is not None:
            if shared:
                claim.release()  # nobody holds it exclusively: our shared hold stands
                assert own is not None
                return _Holds([own])
            holder = _live_shared_holder(claims, name)
            if holder is None:
                return _Holds([claim])
            claim.release()
            blocker = holder
        if time.monotonic() >= deadline:
            if not claims.undecided(blocker):
                if own is not None:
                    own.release()
                return None
            if waiting is not None and not told:
                waiting(f"{claims.folder / (blocker + claims.suffix)} is held from another "
                        "machine; watching it to tell a live run from a dead one's lease")
                told = True
        time.sleep(0.01 if time.monotonic() < deadline else 0.1)
