"""`--skills` through the `skillsft` command and Luigi: the default keeps today's fingerprints
and corpus; `retrieve` with `--embedding-model` embeds over HTTP once, then resumes from the
journal, and says what it chose in the fingerprint, the report and the card."""

import json
import os
import subprocess
import sys
from pathlib import Path

from skillsft.tasks.targets import iter_manifests
from skillsft.testing.stage_responder import stage_responder
from tests.support.fixtures import TEST_API_KEY

REPO_ROOT = Path(__file__).resolve().parents[2]


def run(work: Path, *extra: str, base_url: str = "") -> str:
    environ = {**os.environ, "OPENAI_API_KEY": TEST_API_KEY}
    if base_url:
        environ["OPENAI_BASE_URL"] = base_url
    done = subprocess.run(
        [sys.executable, "-m", "skillsft", "run", "alfworld", "--teacher", "offline",
         "--work-dir", str(work), *extra],
        cwd=REPO_ROOT, env=environ, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def distill_manifest(work: Path) -> dict:
    return next(m for name, m in iter_manifests(work) if name == "distilled_trajectories.json")


def test_default_and_explicit_category_are_the_same_run(tmp_path: Path) -> None:
    run(tmp_path / "a")
    run(tmp_path / "b", "--skills", "category")
    a, b = distill_manifest(tmp_path / "a"), distill_manifest(tmp_path / "b")
    assert a["fingerprint"] == b["fingerprint"]
    assert "skills" not in a["params"]
    corpus = "alfworld_sft_data.json"
    assert (tmp_path / "a" / corpus).read_bytes() == (tmp_path / "b" / corpus).read_bytes()


def test_retrieve_with_embeddings_over_http_resumes_from_the_journal(
    tmp_path: Path, server_factory
) -> None:
    server = server_factory(responder=stage_responder)
    work = tmp_path / "w"
    flags = ("--skills", "retrieve", "--embedding-model", "test-embed", "--top-k-skills", "2")
    run(work, *flags, base_url=server.base_url)
    sent = list(server.stats.embedded_texts)
    assert sent and len(sent) == len(set(sent))  # each text embedded once
    params = distill_manifest(work)["params"]
    assert params["skills"] == "retrieve" and params["embedding_model"] == "test-embed"
    report = json.loads((work / "report.json").read_text())
    assert "embeddings (test-embed)" in report["details"]["skill_use"]["selection"]
    assert "top 2 task-specific skills" in (work / "report.md").read_text()
    dry = subprocess.run([sys.executable, "-m", "skillsft", "publish", "--work-dir", str(work),
                          "--dry-run"], cwd=REPO_ROOT, capture_output=True, text=True)
    assert dry.returncode == 0, dry.stderr[-2000:]
    card = (work / "hub" / "README.md").read_text()
    assert "Skills per record: retrieve" in card and "Smoke-test corpus" in card
    # Forcing distillation again asks the endpoint for nothing: every vector is journaled.
    first = distill_manifest(work)["written_at"]
    run(work, *flags, "--force", "distill", base_url=server.base_url)
    assert distill_manifest(work)["written_at"] != first  # distillation did run again
    assert server.stats.embedded_texts == sent
    for path in work.rglob("*"):
        if path.is_file():
            assert TEST_API_KEY.encode() not in path.read_bytes(), path
