"""Helpers for tests that run the Luigi graph for real (local scheduler, tmp work dirs)."""

import shutil
import socket
import subprocess
import sys
import time
import urllib.request
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


LUIGID = Path(sys.executable).with_name("luigid")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def scheduler_url(tmp_path: Path):
    """A real central scheduler (luigid) on a free port, stopped after the test."""
    if not LUIGID.exists() and shutil.which("luigid") is None:
        pytest.skip("luigid is not installed")
    port = free_port()
    process = subprocess.Popen(
        [str(LUIGID if LUIGID.exists() else "luigid"), "--address", "127.0.0.1",
         "--port", str(port), "--state-path", str(tmp_path / "state.pickle"),
         "--logdir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url + "/api/task_list?data={}", timeout=1)
            break
        except OSError:
            assert time.monotonic() < deadline, "luigid did not start"
            time.sleep(0.1)
    yield url
    process.terminate()
    process.wait(timeout=10)
