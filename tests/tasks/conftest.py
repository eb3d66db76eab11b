"""Helpers for tests that run the Luigi graph for real (local scheduler, tmp work dirs)."""

import shutil
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLES = REPO_ROOT / "examples" / "rollouts"


@pytest.fixture
def sample_copy(tmp_path: Path):
    """A private copy of a bundled sample, so a test may edit rollout files."""

    def copy(env: str) -> Path:
        target = tmp_path / f"rollouts_{env}"
        shutil.copytree(SAMPLES / env, target)
        return target

    return copy


def manifest_times(work_dir: Path) -> dict[str, str]:
    """Output name -> when its stage last wrote it (to see which stages ran)."""
    from skillsft.tasks.targets import iter_manifests

    return {name: m["written_at"] + m["fingerprint"] for name, m in iter_manifests(work_dir)}
