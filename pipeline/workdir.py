"""Every path in a work dir, in one place.

A work dir holds the stage outputs under the fixed names of docs/formats.md, a rejects file per
stage, and under `.skillsft/` the manifests, recorded failures, logs, spend files, the run lock
and the estimate's scratch dir; the teacher journal lives in `journal/`. Targets, the summary,
the report, publish and the CLI ask this module instead of spelling names themselves.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from skillsft.schemas.stages import STAGES

STATE_DIR = ".skillsft"
MANIFEST_SUFFIX = ".manifest.json"

PROCESSED = "processed_trajectories.json"
MEMORIES = "generated_memories.json"
SKILL_BANK = "skill_bank.json"
DISTILLED = "distilled_trajectories.json"
REPORT_JSON = "report.json"
REPORT_MD = "report.md"
HUB_DIR = "hub"
SKILLS_DIR = "skills"

# The rejects file each stage writes beside its output (the stage registry names them).
REJECTS: dict[str, str] = {stage.name: stage.rejects for stage in STAGES if stage.rejects}


def corpus(env: str) -> str:
    return f"{env}_sft_data.json"


def corpus_lines(env: str) -> str:
    return f"{env}_sft_data.jsonl"


def provenance(env: str) -> str:
    return f"{env}_sft_provenance.jsonl"


def preference_pairs(env: str) -> str:
    return f"{env}_preference_pairs.jsonl"


def published(env: str) -> str:
    return f"published_{env}.json"


def manifest_for(output: Path) -> Path:
    """The manifest beside any output file (which may live outside a work dir)."""
    return output.parent / STATE_DIR / f"{output.name}{MANIFEST_SUFFIX}"


def read_manifests(folder: Path) -> Iterator[tuple[str, dict[str, Any] | str]]:
    """Every manifest of a work dir, sorted by output file name: (output name, the manifest),
    or (output name, why it cannot be used) for one that is unreadable or not an object. The
    one reader of the manifests as a set (the report, the summary, tests)."""
    for path in sorted((folder / STATE_DIR).glob(f"*{MANIFEST_SUFFIX}")):
        name = path.name.removesuffix(MANIFEST_SUFFIX)
        try:
            manifest = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            yield name, f"{path}: unreadable manifest skipped ({exc})"
            continue
        if not isinstance(manifest, dict):
            yield name, f"{path}: manifest is not a JSON object; skipped"
            continue
        yield name, manifest


def failure_for(output: Path) -> Path:
    return output.parent / STATE_DIR / "failures" / f"{output.name}.json"


@dataclass(frozen=True)
class WorkDir:
    root: Path

    def __truediv__(self, name: str) -> Path:
        return self.root / name

    @property
    def state(self) -> Path:
        return self.root / STATE_DIR

    @property
    def journal(self) -> Path:
        return self.root / "journal"

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    @property
    def lock(self) -> Path:
        return self.state / "run.lock"

    @property
    def estimate_scratch(self) -> Path:
        return self.state / "estimate"

    def spend_file(self, spend_id: str) -> Path:
        return self.state / "spend" / f"{spend_id}.jsonl"
