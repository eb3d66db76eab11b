"""`skillsft run <env> --repo-id` publishes at the end of the run, through the Luigi Publish
task, to a Hub that is a local HTTP server (huggingface_hub runs unchanged, pointed at it by
HF_ENDPOINT as a user would point it at a private Hub)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_card_flags_reach_the_published_card_through_run_and_publish(tmp_path: Path) -> None:
    work = tmp_path / "w"
    citation = tmp_path / "origin.bib"
    citation.write_text("@misc{alfworld,\n  title = {ALFWorld rollouts}\n}\n")
    with running_hub() as hub:
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN,
               "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HOME": str(tmp_path / "hf")}
        command = [sys.executable, "-m", "skillsft", "run", "alfworld", "--teacher", "offline",
                   "--work-dir", str(work), "--repo-id", "someone/agent-sft",
                   "--license", "cc-by-4.0", "--pretty-name", "Skills SFT",
                   "--citation", str(citation), "--cutoff-len", "100", "--allow-offline"]
        done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        card = hub.files("someone/agent-sft")["README.md"].decode()
        assert "license: cc-by-4.0" in card and "pretty_name: Skills SFT" in card
        assert 'load_dataset("someone/agent-sft", "alfworld_metadata")' in card
        assert "title = {ALFWorld rollouts}" in card
        assert "longer than a cutoff of 100 tokens" in card
        assert any(n.startswith("alfworld/metadata/train-") for n in hub.files("someone/agent-sft"))

        # an edited citation file is a new card: publishing (only) would run again
        citation.write_text("@misc{alfworld,\n  title = {ALFWorld rollouts, 2nd ed.}\n}\n")
        dry = subprocess.run([*command, "--dry-run"], cwd=REPO_ROOT, env=env, capture_output=True,
                             text=True)
        would = {line.split()[2] for line in dry.stdout.splitlines() if "would run" in line}
        assert would == {"PublishCorpus", "RunEnv"}, dry.stdout

        # the same flags on `skillsft publish`, dry run: the local card changes, nothing is sent
        commits = len(hub.commits)
        publish = [sys.executable, "-m", "skillsft", "publish", "--work-dir", str(work),
                   "--repo-id", "someone/agent-sft", "--dry-run", "--license", "mit",
                   "--pretty-name", "Renamed", "--allow-offline"]
        done = subprocess.run(publish, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        local = (work / "hub" / "README.md").read_text()
        assert "license: mit" in local and "pretty_name: Renamed" in local
        assert len(hub.commits) == commits

        missing = subprocess.run([*publish, "--citation", str(tmp_path / "nope.bib")],
                                 cwd=REPO_ROOT, env=env, capture_output=True, text=True)
        assert missing.returncode == 2 and "--citation" in missing.stderr


@pytest.mark.parametrize(
    ("token", "repo_id", "expected"),
    [
        ("hf_revoked0123456789abcdef", "someone/agent-sft", "the Hugging Face token was rejected"),
        ("hf_readonly0123456789abcde", "someone/agent-sft", "is read-only"),
        (TOKEN, "elsewhere/agent-sft", "cannot write under 'elsewhere'"),
    ],
    ids=["revoked", "read-only", "other-namespace"],
)
def test_a_run_that_cannot_publish_stops_before_any_stage(tmp_path: Path, token: str,
                                                          repo_id: str, expected: str) -> None:
    with running_hub() as hub:
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_TOKEN": token,
               "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HOME": str(tmp_path / "hf")}
        command = [sys.executable, "-m", "skillsft", "run", "alfworld", "--teacher", "offline",
                   "--work-dir", str(tmp_path / "w"), "--repo-id", repo_id, "--allow-offline"]
        done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
        assert done.returncode == 2, done.stderr[-2000:]
        assert expected in done.stderr and "Traceback" not in done.stderr
        assert token not in done.stdout + done.stderr
        assert not hub.commits
    assert not (tmp_path / "w" / "processed_trajectories.json").exists()
