"""A whole run through Luigi in which one aggregation call fails for good: the run finishes,
the call's memories are listed in aggregate_rejects.jsonl, and the failure rule decides."""

import json
from pathlib import Path

from skillsft.pipeline.formats import jsonio
from skillsft.testing.openai_server import ServerFault
from skillsft.testing.stage_responder import stage_responder
from tests.tasks.test_e2e_server import finish, skillsft

MISTAKES_SCOPE = "Scope: common mistakes across all tasks"


def refusing_mistakes(body: dict) -> str:
    if any(MISTAKES_SCOPE in str(m.get("content", "")) for m in body.get("messages", [])):
        raise ServerFault(400, "This model's maximum context length is 8 tokens")
    return stage_responder(body)


def test_a_failed_aggregation_call_costs_its_batch_not_the_run(tmp_path: Path, server_factory):
    server = server_factory(responder=refusing_mistakes)
    work = tmp_path / "work"

    finish(skillsft("search", work, server.base_url, "--max-failure-rate", "1.0"))

    bank = jsonio.load(work / "skill_bank.json")
    assert bank["common_mistakes"] == [] and bank["general_skills"]
    rejects = [json.loads(line) for line in
               (work / "aggregate_rejects.jsonl").read_text().splitlines()]
    failures = [m for m in jsonio.load(work / "generated_memories.json")
                if m["tags"]["outcome"] == "Failure"]
    assert failures and len(rejects) == len(failures)
    assert {r["reason"] for r in rejects} == {"teacher_error"}
    assert {r["trajectory"] for r in rejects} == {m["memory_id"] for m in failures}
    assert all(r["step"].startswith("mistakes/L0/") and "generated_memories" in r["file"]
               and "--force aggregate" in r["hint"] for r in rejects)
    assert (work / "search_sft_data.json").exists()  # the later stages ran on the bank
