"""The machine-local runtime folder: where the limits that hold for a whole machine keep their
state (the in-flight slots, slots.py; the --rpm/--tpm windows, pace.py).

That state is per machine by nature: it lives only as long as the processes that use it, and
it relies on `flock`, which is trusted only within one machine. So it stays out of the work dir
(which may be shared over NFS/Lustre by several machines) and goes to a local folder:

1. `SKILLSFT_RUNTIME_DIR`, when set;
2. else `$XDG_RUNTIME_DIR/skillsft` (a per-user tmpfs on most Linux desktops and servers);
3. else `<tmp>/skillsft-<uid>` (the system temp folder, usually /tmp).

Inside it, each work dir has a folder of its own named by a digest of its path, so two runs in
two work dirs on one machine keep separate limits, and the workers of one run share theirs.
"""

import hashlib
import os
import tempfile
from pathlib import Path

from skillsft.pipeline.errors import ConfigError

RUNTIME_DIR_VARIABLE = "SKILLSFT_RUNTIME_DIR"


class RuntimeDirError(ConfigError):
    """The machine-local runtime folder cannot be used; the message names it and the fix."""


def runtime_root(environ: dict[str, str] | None = None) -> Path:
    """The machine-local folder for skillsft's cross-process limits (see the module doc)."""
    env = os.environ if environ is None else environ
    if env.get(RUNTIME_DIR_VARIABLE):
        return Path(env[RUNTIME_DIR_VARIABLE])
    if env.get("XDG_RUNTIME_DIR"):
        return Path(env["XDG_RUNTIME_DIR"]) / "skillsft"
    return Path(tempfile.gettempdir()) / f"skillsft-{os.getuid()}"


def machine_folder(work_key: Path | str, part: str) -> Path:
    """`<runtime root>/<digest of work_key>/<part>`, created (mode 0700 for the root: the
    files name nothing secret, but other users have no business taking our slots). Raises
    RuntimeDirError (one line) when the folder cannot be made or written."""
    root = runtime_root()
    digest = hashlib.sha256(str(Path(work_key).resolve()).encode()).hexdigest()[:16]
    folder = root / digest / part
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        folder.mkdir(parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK | os.X_OK):
            raise PermissionError("not writable")
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise RuntimeDirError(
            f"the machine-local runtime folder {root} cannot be used ({reason}); set "
            f"{RUNTIME_DIR_VARIABLE} to a writable folder on a local disk"
        ) from None
    return folder
