"""A weak answer never blocks a run for good: numbers the pipeline counts itself are not the
model's to get wrong, and an aggregation call that fails for good costs its batch, not the run.
Over real HTTP to the local test server."""

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.errors import TooManyFailures
from skillsft.pipeline.stages.aggregate import (
    AggregateOptions,
    aggregate_memories,
    memory_category,
)
from skillsft.pipeline.stages.outcome import check_outcome, outcome_of
from skillsft.pipeline.stages.skill_bank_io import load_memory_files
from skillsft.testing.openai_server import ServerFault, prompt_hash, schema_answer
from tests.teacher.test_openai_teacher import make_teacher

# Out of the schema's range (`support` >= 1), or not a count at all: what a grammar that
# ignores `minimum` (llama.cpp) or a server that enforces nothing lets through.
WILD_SUPPORT = (0, -7, 10**9, None, "many")
OPTIONS = AggregateOptions(batch_size=4, max_outputs_per_call=2)  # fan-in 2: several levels
_ITEM = re.compile(r"^\d+\. (\{.*\})$", re.M)


def search_memories(shared_dir: Path, count: int):
    spec = get_env("search")
    files = sorted((shared_dir / "data" / "skillrl-memory" / "search").glob(
        "generated_memories*.json"))
    if not files:
        pytest.skip(f"no released search memories under {shared_dir}")
    return spec, load_memory_files(files, spec).records[:count]


def wild_responder(body: dict) -> str:
    """Two drafts per answer, each with a support the schema forbids, chosen by the prompt."""
    answer = json.loads(schema_answer(body))
    (field,) = answer
    draft = answer[field][0]
    pick = int(prompt_hash(body), 16)
    answer[field] = [{**draft, **{key: f"{value} {n}" for key, value in draft.items()
                                  if isinstance(value, str)},
                      "support": WILD_SUPPORT[(pick + n) % len(WILD_SUPPORT)]}
                     for n in range(2)]
    return json.dumps(answer)


def shown_items(body: dict) -> list[dict]:
    user = body["messages"][1]["content"]
    return [json.loads(found) for found in _ITEM.findall(user)]


def test_out_of_range_supports_are_bounded_not_refused(server_factory, shared_dir, tmp_path):
    spec, memories = search_memories(shared_dir, 24)
    server = server_factory(responder=wild_responder)
    teacher = make_teacher(server, tmp_path, response_format="json_object_schema")

    result = aggregate_memories(memories, spec, OPTIONS, teacher)

    (stats,) = result.teacher
    assert stats.calls_failed == 0 and result.rejected == 0 and result.rejects == []
    # every call answered once: no answer was re-asked (paid again) for its support
    assert set(server.stats.paid_by_prompt.values()) == {1}
    assert stats.calls_new == server.stats.stage_requests > 6
    # later levels show the supports the pipeline counted: within 1..the items merged
    merges = [shown_items(b) for b in server.stats.bodies
              if any("support" in item for item in shown_items(b))]
    assert merges, "no merge level ran"
    for items in merges:
        for item in items:
            assert isinstance(item["support"], int) and 1 <= item["support"] <= len(memories)
    assert result.records[0].general_skills


def test_a_call_that_fails_for_good_costs_its_batch_not_the_run(
        server_factory, shared_dir, tmp_path):
    spec, memories = search_memories(shared_dir, 24)
    successes = Counter(memory_category(m, spec) for m in memories
                        if m.tags.outcome == "Success"
                        and m.content.strategic_guidelines.planning_pattern)
    doomed = max(successes, key=lambda c: successes[c])
    scope = f"Scope: skills for {spec.label(doomed)} tasks"

    def responder(body: dict) -> str:
        if scope in body["messages"][1]["content"]:
            raise ServerFault(400, "This model's maximum context length is 8 tokens")
        return schema_answer(body)

    server = server_factory(responder=responder)
    teacher = make_teacher(server, tmp_path, response_format="json_object_schema")

    result = aggregate_memories(memories, spec, OPTIONS, teacher)

    bank = result.records[0]
    per_category = bank.category_skills()
    assert per_category[doomed] == [] and bank.general_skills and bank.common_mistakes
    # the doomed track's memories are rejected, each with the call, the reason and what to do
    assert result.rejected == successes[doomed] and result.counts["failed_calls"] >= 1
    assert {r.reason for r in result.rejects} == {"teacher_error"}
    assert len({r.trajectory for r in result.rejects}) == successes[doomed]
    assert all(r.step and r.step.startswith(f"category:{doomed}/L0/") for r in result.rejects)
    assert all("bad_request" in r.detail and "--force aggregate" in r.hint
               for r in result.rejects)
    # the failure rule decides, as for every stage
    outcome = outcome_of(result, "aggregate", "generated_memories.json")
    check_outcome(outcome, 1.0, "aggregate_rejects.jsonl")
    with pytest.raises(TooManyFailures, match="aggregate_rejects.jsonl"):
        check_outcome(outcome, 0.0, "aggregate_rejects.jsonl")
