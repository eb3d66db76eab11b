"""Aggregation against a real LLM (Gemma-3-270M in llama-cpp-python's server): a weak model's
answers never stop the stage. llama.cpp's grammar does not enforce the schema's `minimum`, so
this model writes `support: 0` and the like; such numbers are the pipeline's to count, and a
call that fails for good anyway costs its batch (listed), not the stage."""

import json
import re
from pathlib import Path

import pytest

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.stages.aggregate import (
    AggregateOptions,
    aggregate_memories,
    memory_category,
)
from skillsft.pipeline.stages.outcome import check_outcome, outcome_of
from skillsft.pipeline.stages.skill_bank_io import load_memory_files
from skillsft.pipeline.teacher.openai.teacher import OpenAITeacher
from skillsft.pipeline.teacher.settings import TeacherSettings
from tests.support.llama_server import MODEL_ALIAS, LlamaServer

_SUPPORT = re.compile(r'"support"\s*:\s*(-?\d+)')


def memories(shared_dir: Path):
    """Two successes of one category and one failure: one call per track (general, that
    category, mistakes), each a few minutes on two busy cores."""
    spec = get_env("search")
    files = sorted((shared_dir / "data" / "skillrl-memory" / "search").glob(
        "generated_memories*.json"))
    if not files:
        pytest.skip(f"no released search memories under {shared_dir}")
    loaded = load_memory_files(files, spec).records
    success = [m for m in loaded if m.tags.outcome == "Success"
               and m.content.strategic_guidelines.planning_pattern]
    first = memory_category(success[0], spec)
    pair = [m for m in success if memory_category(m, spec) == first][:2]
    failure = next(m for m in loaded if m.tags.outcome == "Failure"
                   and m.content.strategic_guidelines.mistakes_to_avoid)
    return spec, [*pair, failure]


@pytest.mark.timeout(1500)
def test_aggregation_on_a_real_llm_is_never_blocked_by_a_weak_answer(
        llama_server: LlamaServer, shared_dir: Path, tmp_path: Path) -> None:
    spec, chosen = memories(shared_dir)
    settings = TeacherSettings.resolve(
        {}, teacher="openai", api_key="sk-local-llama", base_url=llama_server.base_url,
        model=MODEL_ALIAS, concurrency=1, max_concurrency=1, max_output_tokens=160,
        timeout=600.0, show_progress=False)
    teacher = OpenAITeacher(settings, tmp_path, "aggregate")
    options = AggregateOptions(batch_size=2, max_outputs_per_call=1)

    result = aggregate_memories(chosen, spec, options, teacher)  # never raises for an answer

    (stats,) = result.teacher
    records = [json.loads(line) for line in teacher.journal.path.read_text().splitlines()]
    answers = [r for r in records if r["kind"] == "response"
               and not r["request_id"].startswith("probe:")]
    failures = [r for r in records if r["kind"] == "failure"]
    # no answer is refused for its support, whatever the model wrote
    assert not [f for f in failures if "support" in (f.get("error") or "")], failures
    written = [int(n) for a in answers for n in _SUPPORT.findall(a.get("raw_text") or "")]
    # every call ended answered or listed: its memories rejected with the call and the reason
    assert stats.calls_failed == result.counts.get("failed_calls", 0) == len(failures)
    assert all(r.reason == "teacher_error" and r.step for r in result.rejects)
    check_outcome(outcome_of(result, "aggregate", "memories"), 1.0, "aggregate_rejects.jsonl")
    bank = result.records[0]
    print(f"\nreal-LLM aggregation: calls {len(answers)}, failed {stats.calls_failed}, "
          f"supports written {written}, out of range {sum(n < 1 for n in written)}, "
          f"general skills {len(bank.general_skills)}, mistakes {len(bank.common_mistakes)}")
