"""End-to-end runs through Luigi and the `skillsft` command against the local OpenAI-compatible
server over real HTTP: every environment, injected faults, and a kill -9 during distillation."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skillsft.tasks.targets import iter_manifests, manifest_path_for
from skillsft.testing.openai_server import ServerFault
from skillsft.testing.stage_responder import stage_responder
from tests.support.fixtures import TEST_API_KEY
from tests.tasks.conftest import manifest_times

REPO_ROOT = Path(__file__).resolve().parents[2]


def skillsft(env: str, work: Path, base_url: str, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "skillsft", "run", env, "--teacher", "openai",
         "--base-url", base_url, "--work-dir", str(work), *extra],
        cwd=REPO_ROOT,
        env={**os.environ, "OPENAI_API_KEY": TEST_API_KEY},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def finish(process: subprocess.Popen[bytes]) -> str:
    out, _ = process.communicate(timeout=600)
    text = out.decode(errors="replace")
    assert process.returncode == 0, text[-3000:]
    return text


def corpus(work: Path, env: str) -> bytes:
    return (work / f"{env}_sft_data.json").read_bytes()


def assert_no_key_under(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            assert TEST_API_KEY.encode() not in path.read_bytes(), path


@pytest.mark.parametrize("env", ["alfworld", "webshop", "search"])
def test_faults_lose_nothing_and_change_nothing(tmp_path: Path, server_factory, env: str) -> None:
    clean = server_factory(responder=stage_responder)
    reference = tmp_path / "reference"
    finish(skillsft(env, reference, clean.base_url))

    # Faults are drawn per (seed, prompt, attempt); a seed under which no request meets more
    # 500s in a row than --max-retries allows (answers carry a tag of their whole request, so
    # the later stages' prompts, and their draws, changed with the tag: seed 11 drew five)
    faulty = server_factory(responder=stage_responder, p_server_error=0.2, p_rate_limit=0.1,
                            p_malformed=0.05, retry_after=0.01, seed=12)
    work = tmp_path / "faulty"
    output = finish(skillsft(env, work, faulty.base_url))
    faults = faulty.stats.faults
    assert faults["server_error"] > 0 and faults["rate_limit"] > 0, faults
    assert corpus(work, env) == corpus(reference, env), "faults changed the corpus"
    assert "FAILED" not in output
    assert_no_key_under(work)

    # recomputing every teacher stage answers everything from the journal: no new request
    requests_before = faulty.stats.total
    finish(skillsft(env, work, faulty.base_url, "--force", "memories"))
    assert faulty.stats.total == requests_before
    assert corpus(work, env) == corpus(reference, env)
    usage = [u for _, m in iter_manifests(work) for u in m.get("teacher", [])]
    assert {u["stage"] for u in usage} == {"memories", "aggregate", "distill"}
    assert all(u["calls_new"] == 0 and u["calls_from_journal"] > 0 for u in usage), usage
    assert all(u["reused_prompt_tokens"] > 0 and u["reused_cost_usd"] > 0 for u in usage), usage

    # another distillation model leaves stages 1 and 2 alone
    dry = finish(skillsft(env, work, faulty.base_url, "--dry-run", "--distill-model", "other"))
    would = {line.split()[2] for line in dry.splitlines() if "would run" in line}
    assert would == {"Distill", "Flatten", "BuildReport", "RunEnv"}


def test_kill_during_distillation_then_rerun(tmp_path: Path, server_factory) -> None:
    concurrency = 2
    reference_server = server_factory(responder=stage_responder)
    reference = tmp_path / "reference"
    finish(skillsft("alfworld", reference, reference_server.base_url))

    server = server_factory(responder=stage_responder, latency=0.4)
    work = tmp_path / "killed"
    process = skillsft("alfworld", work, server.base_url, "--concurrency", str(concurrency),
                       "--max-concurrency", str(concurrency))
    bank_manifest = manifest_path_for(work / "skill_bank.json")
    deadline = time.monotonic() + 300
    while not bank_manifest.exists():
        assert process.poll() is None, "run ended before distillation"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    paid_at_bank = sum(server.stats.paid_by_prompt.values())
    while sum(server.stats.paid_by_prompt.values()) < paid_at_bank + 3:
        assert process.poll() is None, "distillation finished before the kill"
        time.sleep(0.01)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert not (work / "alfworld_sft_data.json").exists()

    finish(skillsft("alfworld", work, server.base_url, "--concurrency", str(concurrency),
                    "--max-concurrency", str(concurrency)))
    assert corpus(work, "alfworld") == corpus(reference, "alfworld")
    paid_twice = [h for h, n in server.stats.paid_by_prompt.items() if n > 1]
    assert len(paid_twice) <= concurrency, f"{len(paid_twice)} requests paid twice"
    assert_no_key_under(work)


def test_failed_teacher_requests_are_retried_by_the_next_run(tmp_path: Path, server_factory):
    reference_server = server_factory(responder=stage_responder)
    reference = tmp_path / "reference"
    finish(skillsft("alfworld", reference, reference_server.base_url))

    outage = {"on": True}
    broken_goal = "put a hot tomato in sinkbasin"  # env000: 3 of the 12 distilled trajectories

    def flaky(body):
        text = str(body.get("messages"))
        if outage["on"] and "step_index in" in text and broken_goal in text:
            raise ServerFault(503, "the GPU node is down")  # transient: the next run retries
        return stage_responder(body)

    server = server_factory(responder=flaky)
    work = tmp_path / "w"
    finish(skillsft("alfworld", work, server.base_url, "--max-failure-rate", "0.5"))
    assert corpus(work, "alfworld") != corpus(reference, "alfworld")  # three trajectories short
    distill = dict(iter_manifests(work))["distilled_trajectories.json"]
    assert distill["teacher"][0]["calls_failed"] == 3

    outage["on"] = False
    paid_before = sum(server.stats.paid_by_prompt.values())
    output = finish(skillsft("alfworld", work, server.base_url, "--max-failure-rate", "0.5"))
    assert "retrying them" in output
    assert corpus(work, "alfworld") == corpus(reference, "alfworld")
    assert sum(server.stats.paid_by_prompt.values()) - paid_before == 3  # only the failed ones

    # nothing failed any more: a third run recomputes nothing and calls nothing
    written = manifest_times(work)
    calls = server.stats.total
    output = finish(skillsft("alfworld", work, server.base_url, "--max-failure-rate", "0.5"))
    assert "retrying" not in output and server.stats.total == calls
    assert manifest_times(work) == written


def test_too_many_failed_distillations_fail_the_run(tmp_path: Path, server_factory) -> None:
    def broken(body):
        if "step_index in" in str(body.get("messages")):
            return "this is not JSON"
        return stage_responder(body)

    server = server_factory(responder=broken)
    work = tmp_path / "w"
    process = skillsft("alfworld", work, server.base_url)
    out, _ = process.communicate(timeout=600)
    assert process.returncode == 1
    # Every distillation answer is broken: the stage made nothing, and says so in one line.
    assert b"distill: " in out and b"produced no record from" in out and b"teacher x" in out
    assert not (work / "alfworld_sft_data.json").exists()
    listed = (work / "distill_rejects.jsonl").read_bytes().splitlines()
    assert listed and all(b'"reason":"teacher"' in line for line in listed)


def test_price_file_and_pace_flags_reach_the_teacher(tmp_path: Path, server_factory) -> None:
    server = server_factory(responder=stage_responder)
    prices = tmp_path / "prices.json"
    prices.write_text('{"gpt-4o-mini": [1000000.0, 0.0]}')  # one dollar per prompt token
    work = tmp_path / "w"
    finish(skillsft("webshop", work, server.base_url, "--prices", str(prices), "--rpm", "100000",
                    "--tpm", "100000000"))
    usage = [u for _, m in iter_manifests(work) for u in m.get("teacher", [])]
    assert usage and all(u["cost_usd"] == pytest.approx(u["prompt_tokens"]) for u in usage)
    assert all(u["prompt_tokens"] > 0 for u in usage)
