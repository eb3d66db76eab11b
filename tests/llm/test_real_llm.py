"""The whole pipeline against a real LLM (Gemma-3-270M in llama-cpp-python's server).

A 270M model writes poor text; what is checked is plumbing and honesty: the negotiation lands on
a mode the server accepts (llama-cpp-python refuses `json_schema` with a 500 and enforces
`json_object` + `schema` with a grammar), every answer used passed validation, each trajectory
is in the corpus or listed with its reason, and nothing ends in a traceback. Prompts are short
(two one-step Search questions) and answers capped, because on two cores the model
writes about 15 tokens a second.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from skillsft.pipeline.formats import jsonio
from skillsft.tasks.targets import iter_manifests
from tests.support.llama_server import MODEL_ALIAS, LlamaServer

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE = REPO_ROOT / "examples" / "rollouts" / "search" / "nq"
QUESTIONS = ("q0003.txt", "q0004.txt")  # one success (one step), one failure


def journal_records(work: Path) -> list[dict]:
    records = []
    for path in sorted((work / "journal").glob("teacher_*.jsonl")):
        records += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return records


def journal_summary(records: list[dict], failed: int) -> dict[str, object]:
    """Requests, modes, first-try validity and re-asks, read back from the journal."""
    answers = Counter(
        (r["stage"], r["request_id"]) for r in records
        if r["kind"] == "response" and not r["request_id"].startswith("probe:")
    )
    first_try = sum(1 for n in answers.values() if n == 1)
    return {
        "requests": len(answers),
        "http_calls": sum(1 for r in records),
        "probes": sorted({r["request_id"] for r in records
                          if r["request_id"].startswith("probe:")}),
        "modes": dict(Counter(r.get("response_mode") for r in records if r["kind"] == "response")),
        "first_try_valid": max(0, first_try - failed),
        "reasks": sum(n - 1 for n in answers.values()),
        "failed": failed,
    }


@pytest.mark.timeout(1800)
def test_the_whole_pipeline_on_a_real_llm(llama_server: LlamaServer, tmp_path: Path) -> None:
    rollouts = tmp_path / "rollouts" / "nq"
    rollouts.mkdir(parents=True)
    for name in QUESTIONS:
        shutil.copy(SAMPLE / name, rollouts / name)
    work = tmp_path / "work"
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "skillsft", "run", "search", "--teacher", "openai",
         "--base-url", llama_server.base_url, "--rollout-dir", str(rollouts.parent),
         "--work-dir", str(work), "--memory-model", MODEL_ALIAS, "--aggregate-model",
         MODEL_ALIAS, "--distill-model", MODEL_ALIAS, "--concurrency", "1",
         "--max-output-tokens", "200", "--timeout", "1200", "--max-failure-rate", "1.0",
         "--failure-ratio", "1.0"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=1700,
        env={**os.environ, "OPENAI_API_KEY": "sk-local-llama"},
    )
    wall = time.monotonic() - started
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output[-4000:]
    assert result.returncode == 0, output[-4000:]

    # the negotiation: json_schema refused (a 500 about response_format), llama.cpp's form used
    modes = json.loads((work / "journal" / "response_modes.json").read_text())
    assert {entry["mode"] for entry in modes.values()} == {"json_object_schema"}
    records = journal_records(work)
    refusals = [r for r in records if r["request_id"] == "probe:json_schema"]
    assert refusals and all(r["kind"] == "error" and "format_refused" in r["error"]
                            for r in refusals)
    stage_records = [r for r in records if not r["request_id"].startswith("probe:")]
    assert stage_records and {r.get("response_mode") for r in stage_records
                              if r["kind"] == "response"} == {"json_object_schema"}

    # every answer used passed validation: each stage's outputs are the validated answers, and
    # the next stage re-reads them with its own validators without rejecting any
    manifests = dict(iter_manifests(work))
    usage = [u for m in manifests.values() for u in m.get("teacher", [])]
    failed = sum(u["calls_failed"] for u in usage)
    memories = manifests["generated_memories.json"]["counts"]
    assert memories["outputs"] + memories["rejected"] == memories["inputs"]
    assert (work / "aggregate_rejects.jsonl").read_text() == ""  # every memory re-validated

    # each trajectory is in the corpus or listed with its reason
    kept = [record["env_id"] for record in jsonio.load(work / "processed_trajectories.json")]
    provenance = [json.loads(line) for line in
                  (work / "search_sft_provenance.jsonl").read_text().splitlines()]
    in_corpus = {p["trajectory_id"].rsplit("/", 1)[0] for p in provenance}
    rejects = "".join((work / name).read_text() for name in
                      ("rejects.jsonl", "distill_rejects.jsonl", "flatten_rejects.jsonl"))
    outcomes = {r["env_id"]: r["outcome"] for r in jsonio.load(work /
                                                              "processed_trajectories.json")}
    for env_id in kept:
        assert env_id in in_corpus or env_id in rejects or outcomes[env_id] == "Failure", env_id
    assert in_corpus, "no trajectory reached the corpus"

    summary = journal_summary(records, failed)
    summary["wall_s"] = round(wall, 1)
    print(f"\nreal-LLM run: {json.dumps(summary)}")
