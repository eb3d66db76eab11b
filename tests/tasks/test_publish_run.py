"""`skillsft run <env> --repo-id` publishes at the end of the run, through the Luigi Publish
task, to a Hub that is a local HTTP server (huggingface_hub runs unchanged, pointed at it by
HF_ENDPOINT as a user would point it at a private Hub)."""

import os
import subprocess
import sys
from pathlib import Path

from tests.support.hub_server import running_hub

REPO_ROOT = Path(__file__).resolve().parents[2]
TOKEN = "hf_TESTtokenThatMustNeverLeak0123456789"


def test_run_with_a_repo_id_publishes_once(tmp_path: Path) -> None:
    work = tmp_path / "w"
    with running_hub() as hub:
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN,
               "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HOME": str(tmp_path / "hf")}
        command = [sys.executable, "-m", "skillsft", "run", "alfworld", "--teacher", "offline",
                   "--work-dir", str(work), "--repo-id", "someone/agent-sft", "--allow-offline"]
        first = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
        assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
        files = hub.files("someone/agent-sft")
        assert "README.md" in files
        assert any(name.startswith("alfworld/train-") for name in files), sorted(files)
        commits = len(hub.commits)

        second = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
        assert second.returncode == 0
        assert len(hub.commits) == commits == 1  # nothing changed, nothing uploaded again
    assert (work / "published_alfworld.json").is_file()
    for path in work.rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path
    assert TOKEN not in first.stdout + first.stderr
    assert "Smoke-test corpus" in first.stdout


def test_run_refuses_to_publish_an_offline_corpus_without_consent(tmp_path: Path) -> None:
    with running_hub() as hub:
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN,
               "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HOME": str(tmp_path / "hf")}
        command = [sys.executable, "-m", "skillsft", "run", "alfworld", "--teacher", "offline",
                   "--work-dir", str(tmp_path / "w"), "--repo-id", "someone/agent-sft"]
        done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
        assert done.returncode != 0
        assert "--allow-offline" in done.stdout + done.stderr
        assert not hub.commits
    assert "Smoke-test corpus" in (tmp_path / "w" / "report.md").read_text()
