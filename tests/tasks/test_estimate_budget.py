"""`skillsft estimate`, `run --dry-run` and `--max-cost` against the local server, for real."""

import os
import re
import subprocess
import sys
from pathlib import Path

from skillsft.tasks.targets import iter_manifests
from skillsft.testing.stage_responder import stage_responder
from tests.support.fixtures import REPO_ROOT, TEST_API_KEY
from tests.tasks.test_e2e_server import finish, skillsft

ROW = re.compile(r"^\s+(memories|aggregate|distill|total)\s+(\S*)\s+(\d+)\s+(\d+)\s+(\d+)\s+"
                 r"(\d+)\s+(\d+)\s+(\S+)\s+(\S+)$", re.M)
TEACHER_STAGES = ("memories", "aggregate", "distill")
MEMORY_ANSWERS = {"SuccessMemoryAnswer", "FailureMemoryAnswer"}


def run_command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "skillsft", *args], cwd=REPO_ROOT,
                          env={**os.environ, "OPENAI_API_KEY": TEST_API_KEY},
                          capture_output=True, text=True, timeout=600)


def estimate_rows(output: str) -> dict[str, dict]:
    rows = {}
    for match in ROW.finditer(output):
        stage, model, requests, journal, to_send, tokens_in, _, live, batch = match.groups()
        rows[stage] = {"requests": int(requests), "in_journal": int(journal),
                       "to_send": int(to_send), "input_tokens": int(tokens_in),
                       "usd_live": live, "usd_batch": batch, "model": model}
    assert rows, output
    return rows


def estimate(env: str, work: Path, base_url: str, *extra: str) -> dict[str, dict]:
    done = run_command("estimate", env, "--teacher", "openai", "--base-url", base_url,
                       "--work-dir", str(work), *extra)
    assert done.returncode == 0, done.stdout + done.stderr
    return estimate_rows(done.stdout)


def usage(work: Path) -> dict[str, dict]:
    return {u["stage"]: u for _, m in iter_manifests(work) for u in m.get("teacher", [])}


def test_estimate_counts_the_requests_the_run_then_sends(tmp_path: Path, server_factory):
    server = server_factory(responder=stage_responder)
    work = tmp_path / "w"
    before = estimate("alfworld", work, server.base_url)
    assert server.stats.total == 0 and not (work / "alfworld_sft_data.json").exists()

    finish(skillsft("alfworld", work, server.base_url))

    paid = usage(work)
    for stage in TEACHER_STAGES:
        assert before[stage]["to_send"] == paid[stage]["calls_new"] > 0, stage
        assert before[stage]["in_journal"] == 0
    assert before["total"]["to_send"] == server.stats.stage_requests
    # memory prompts depend on the rollouts only: their tokens are rendered exactly
    assert abs(before["memories"]["input_tokens"] / paid["memories"]["prompt_tokens"] - 1) < 0.10
    assert float(before["total"]["usd_batch"]) * 2 == float(before["total"]["usd_live"]) or (
        abs(float(before["total"]["usd_batch"]) * 2 - float(before["total"]["usd_live"]))
        <= 0.0001)

    # everything is in the journal now: free
    after = estimate("alfworld", work, server.base_url)
    assert after["total"]["to_send"] == 0 and after["total"]["usd_live"] == "0.0000"
    assert after["total"]["in_journal"] == before["total"]["requests"]

    # another distillation model: stages 2 priced free, distillation's prompts are rendered
    # from the journaled skill bank, so their tokens match what the server then bills
    changed = estimate("alfworld", work, server.base_url, "--distill-model", "gpt-4.1-mini")
    assert changed["memories"]["to_send"] == changed["aggregate"]["to_send"] == 0
    calls_before = server.stats.stage_requests
    finish(skillsft("alfworld", work, server.base_url, "--distill-model", "gpt-4.1-mini"))
    distill = usage(work)["distill"]
    sent = server.stats.stage_requests - calls_before
    assert changed["distill"]["to_send"] == distill["calls_new"] == sent
    assert abs(changed["distill"]["input_tokens"] / distill["prompt_tokens"] - 1) < 0.10
    assert changed["distill"]["model"] == "gpt-4.1-mini"


def test_dry_run_prints_the_estimate_and_names_an_unknown_model(tmp_path, server_factory):
    server = server_factory(responder=stage_responder)
    done = run_command("run", "webshop", "--teacher", "openai", "--base-url", server.base_url,
                       "--work-dir", str(tmp_path / "w"), "--dry-run",
                       "--distill-model", "my-local-llama")
    assert done.returncode == 0, done.stderr
    rows = estimate_rows(done.stdout)
    assert rows["distill"]["usd_live"] == "unknown" and rows["total"]["usd_live"] == "unknown"
    assert rows["memories"]["usd_live"] != "unknown"
    assert "no price for model my-local-llama" in done.stdout
    assert "would run" in done.stdout and server.stats.total == 0

    prices = tmp_path / "prices.json"
    prices.write_text('{"my-local-llama": [1000000.0, 0]}')  # a dollar per input token
    done = run_command("estimate", "webshop", "--teacher", "openai", "--base-url",
                       server.base_url, "--work-dir", str(tmp_path / "w"),
                       "--distill-model", "my-local-llama", "--prices", str(prices))
    rows = estimate_rows(done.stdout)
    assert float(rows["distill"]["usd_live"]) == rows["distill"]["input_tokens"]


def test_max_cost_stops_before_a_stage_and_during_one(tmp_path: Path, server_factory):
    server = server_factory(responder=stage_responder)
    prices = tmp_path / "prices.json"
    prices.write_text('{"gpt-4o-mini": [1000000.0, 0.0]}')  # a dollar per input token
    rows = estimate("alfworld", tmp_path / "probe", server.base_url, "--prices", str(prices))
    memories_usd = float(rows["memories"]["usd_live"])

    # a budget below the first stage's estimate: nothing is sent at all
    work = tmp_path / "before"
    done = run_command("run", "alfworld", "--teacher", "openai", "--base-url", server.base_url,
                       "--work-dir", str(work), "--prices", str(prices),
                       "--max-cost", f"{memories_usd / 2:.0f}")
    assert done.returncode == 1 and "would pass --max-cost" in done.stderr, done.stderr
    assert server.stats.stage_requests == 0

    # a budget the estimate fits but the spend reaches: every first memory answer is invalid,
    # so each re-ask doubles what the estimate (which counts no re-asks) foresaw; with
    # concurrency 1 the stage checks the spend every 4 requests and stops after the first 4
    def reask_memories(body: dict) -> str:
        schema_name = body["response_format"]["json_schema"]["name"]
        first_ask = not any(m["role"] == "assistant" for m in body["messages"])
        if schema_name in MEMORY_ANSWERS and first_ask:
            return "not JSON"
        return stage_responder(body)

    flaky = server_factory(responder=reask_memories)
    work = tmp_path / "during"
    flags = ("--teacher", "openai", "--base-url", flaky.base_url, "--work-dir", str(work),
             "--prices", str(prices), "--concurrency", "1")
    done = run_command("run", "alfworld", *flags, "--max-cost", f"{1.5 * memories_usd:.0f}")
    assert done.returncode == 1 and "stopped at" in done.stderr, done.stderr
    assert "after 4 of 5 requests" in done.stderr
    assert not (work / "generated_memories.json").exists()
    assert flaky.stats.stage_requests == 8  # 4 first asks + 4 re-asks, then the budget stopped it

    done = run_command("run", "alfworld", *flags)  # no budget: finishes, pays nothing twice
    assert done.returncode == 0, done.stderr
    assert set(flaky.stats.paid_by_prompt.values()) == {1}
    assert usage(work)["memories"]["calls_from_journal"] == 4
