"""Which skill bank a corpus was made with: the one stage 3 (distill) read.

That is the work dir's own `skill_bank.json` (stage 2's output) unless the run was given
`--skill-bank FILE`; then the bank lives outside the work dir and the distill manifest is the
only record of it (`inputs.skill_bank`: its path and sha256 when distill ran). The report and
the card name this bank's hash, and publish uploads this file, so both describe the bank that
made the records, not whatever `skill_bank.json` happens to lie in the work dir.
"""

import hashlib
from dataclasses import dataclass
from pathlib import Path

import orjson

from skillsft.pipeline import workdir

BANK_ROLE = "skill_bank"  # the InputFile role the graph gives a --skill-bank file


@dataclass(frozen=True)
class CorpusBank:
    path: Path  # where the bank is (it may have moved or changed since: see `current`)
    sha256: str  # of the bank distill read
    current: bool  # the file at `path` still has those bytes


def file_sha256(path: Path) -> str | None:
    try:
        with open(path, "rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError:
        return None


def recorded_input(root: Path, role: str) -> tuple[Path, str] | None:
    """(path, sha256) of the outside file distill's manifest lists under `role`."""
    try:
        manifest = orjson.loads(workdir.manifest_for(root / workdir.DISTILLED).read_bytes())
        entry = manifest["inputs"][role]
        return Path(entry["path"]), str(entry["sha256"])
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError):
        return None


def corpus_bank(work_dir: str | Path) -> CorpusBank | None:
    """The bank the work dir's corpus was distilled with, or None when there is none."""
    root = Path(work_dir)
    recorded = recorded_input(root, BANK_ROLE)
    if recorded is not None:
        path, sha256 = recorded
        return CorpusBank(path, sha256, file_sha256(path) == sha256)
    own = root / workdir.SKILL_BANK
    digest = file_sha256(own)
    return CorpusBank(own, digest, True) if digest else None
