"""Where a round of evolution lives: `WORK_DIR/evolution/round-NNN/`, and which round a
command is.

A round is named by what it starts from: the current bank's bytes (sha256) and the new rollout
folder. The same command finds its round again (and Luigi recomputes nothing that is done); a
command starting from another bank or other rollouts gets the next number. `round.json` records
the identity. The edits the gate rejected in earlier rounds (`rejected_edits.jsonl`) are what
the next round's reflect prompt is shown as "edits that did not help".
"""

import re
from pathlib import Path
from typing import Any

import orjson

from skillsft.pipeline import workdir
from skillsft.pipeline.durable import write_bytes_atomically
from skillsft.pipeline.formats import jsonio

EVOLUTION_DIR = "evolution"
ROUND_FILE = "round.json"
# a round's stage 1 and memories outputs, and its accepted bank, carry the work dir's names
PROCESSED, MEMORIES, ACCEPTED = workdir.PROCESSED, workdir.MEMORIES, workdir.SKILL_BANK
CANDIDATE = "candidate_skill_bank.json"
SELECTION = "selection.jsonl"  # every edit with its fate as of selection (candidate task)
EDITS = "edits.jsonl"  # the same after the gate: final fates
REJECTED = "rejected_edits.jsonl"
GATE = "gate.json"
CHANGES = "changes.md"
REJECTS = "evolve_rejects.jsonl"
_ROUND = re.compile(r"^round-(\d{3,})$")


def evolution_dir(work_dir: str | Path) -> Path:
    return Path(work_dir) / EVOLUTION_DIR


def round_dir(work_dir: str | Path, number: int) -> Path:
    return evolution_dir(work_dir) / f"round-{number:03d}"


def existing_rounds(work_dir: str | Path) -> dict[int, Path]:
    folder = evolution_dir(work_dir)
    if not folder.is_dir():
        return {}
    return {int(m.group(1)): p for p in folder.iterdir() if (m := _ROUND.match(p.name))}


def identity(bank_sha256: str, rollout_dir: Path) -> dict[str, str]:
    return {"skill_bank_sha256": bank_sha256, "rollout_dir": str(Path(rollout_dir).resolve())}


def find_round(work_dir: str | Path, bank_sha256: str, rollout_dir: Path) -> int:
    """The round this command is: an earlier one with the same identity, else the next."""
    wanted = identity(bank_sha256, rollout_dir)
    rounds = existing_rounds(work_dir)
    for number, folder in sorted(rounds.items()):
        try:
            recorded = orjson.loads((folder / ROUND_FILE).read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue
        if {k: recorded.get(k) for k in wanted} == wanted:
            return number
    return max(rounds, default=0) + 1


def record_round(work_dir: str | Path, number: int, bank_sha256: str, rollout_dir: Path,
                 skill_bank: str) -> Path:
    """Write round.json (once; the identity never changes) and return the round's folder."""
    folder = round_dir(work_dir, number)
    path = folder / ROUND_FILE
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        write_bytes_atomically(path, jsonio.dumps({
            "round": number, **identity(bank_sha256, rollout_dir), "skill_bank": skill_bank}))
    return folder


def rejected_before(work_dir: str | Path, number: int) -> list[dict[str, Any]]:
    """The gate-rejected edits of every earlier round, oldest first."""
    found: list[dict[str, Any]] = []
    for earlier, folder in sorted(existing_rounds(work_dir).items()):
        if earlier >= number:
            continue
        try:
            lines = (folder / REJECTED).read_bytes().splitlines()
        except FileNotFoundError:
            continue
        for line in lines:
            try:
                found.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                continue
    return found
