"""Stage 2b: released memory files -> schema-valid banks; scale, call counts, determinism."""

import itertools
import json
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.errors import InputError
from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.stages.aggregate import (
    AggregateOptions,
    aggregate_memories,
    build_tracks,
    planned_calls,
)
from skillsft.pipeline.stages.skill_bank_io import load_memory_files, load_skill_bank
from skillsft.pipeline.teacher.base import TeacherRequest
from skillsft.pipeline.teacher.offline import OfflineTeacher
from skillsft.schemas.memory import Memory
from skillsft.schemas.skill_bank import SkillBank

ENVS = ["alfworld", "webshop", "search"]


def _memory_files(shared: Path, env: str) -> list[Path]:
    files = sorted((shared / "data" / "skillrl-memory" / env).glob("generated_memories*.json"))
    if not files:
        pytest.skip(f"no released {env} memories under {shared}")
    return files


class CountingTeacher:
    """The offline teacher, counting calls per track and the largest prompt it was sent."""

    name = "offline"

    def __init__(self) -> None:
        self.inner = OfflineTeacher(show_progress=False)
        self.calls: Counter[str] = Counter()
        self.largest_prompt = 0

    def run_batch(self, requests: Sequence[TeacherRequest[Any]], *, stage: str):
        for request in requests:
            self.calls[request.request_id.split("/")[0]] += 1
            size = sum(len(m["content"]) for m in request.messages)
            self.largest_prompt = max(self.largest_prompt, size)
        return self.inner.run_batch(requests, stage=stage)


@pytest.mark.parametrize("env", ENVS)
def test_released_memories_give_a_valid_bank_with_every_succeeded_category(shared_dir, env):
    spec = get_env(env)
    loaded = load_memory_files(_memory_files(shared_dir, env), spec)
    assert loaded.rejects == []
    result = aggregate_memories(loaded.records, spec, None, OfflineTeacher(show_progress=False))
    bank = SkillBank.model_validate(json.loads(jsonio.dumps(result.records[0])))
    # Category skills come from success patterns only; a failure's lesson is a common mistake.
    used = {c for c, v in bank.metadata["category_distribution"].items() if v["success"]}
    assert used, "the released file should cover some categories"
    per_category = getattr(bank, spec.bank_category_key)
    assert set(per_category) == set(spec.categories)
    for category, skills in per_category.items():
        assert bool(skills) == (category in used), category
        assert [s.skill_id for s in skills] == [f"{category[:3]}_{i:03d}"
                                                for i in range(1, len(skills) + 1)]
    assert [s.skill_id for s in bank.general_skills][:2] == ["gen_001", "gen_002"]
    assert bank.common_mistakes[0].mistake_id == "err_001"
    assert bank.metadata["source"] == "offline"
    assert bank.metadata["total_memories_analyzed"] == len(loaded.records)


def test_concatenated_webshop_files_and_duplicates(shared_dir):
    spec = get_env("webshop")
    files = _memory_files(shared_dir, "webshop")
    both = load_memory_files(files, spec)
    assert len(both.records) == sum(len(json.loads(f.read_text())) for f in files)
    twice = load_memory_files([files[0], files[0]], spec)
    assert twice.counts["duplicate_memory_id"] == len(twice.records)


@pytest.mark.parametrize("env", ENVS)
def test_released_skill_banks_load_and_wrong_env_is_refused(shared_dir, env):
    banks = sorted((shared_dir / "data" / "skillrl-memory" / env).glob("claude_style_skills*"))
    if not banks:
        pytest.skip("no released bank")
    bank = load_skill_bank(banks[0], get_env(env))
    assert bank.general_skills and bank.category_skills()
    other = "search" if env != "search" else "alfworld"
    with pytest.raises(InputError, match=str(banks[0].name)):
        load_skill_bank(banks[0], get_env(other))


def test_bad_records_are_rejected_by_file_and_record(tmp_path, shared_dir):
    spec = get_env("alfworld")
    records = json.loads(_memory_files(shared_dir, "alfworld")[0].read_text())[:20]
    records[5] = {"memory_id": "x", "tags": {}}
    path = tmp_path / "mems.json"
    path.write_text(json.dumps(records))
    loaded = load_memory_files([path], spec)
    (reject,) = loaded.rejects
    assert reject.file == str(path) and reject.detail.startswith("record 5")
    assert len(loaded.records) == 19
    for i in (6, 7):
        records[i] = {"nope": True}
    path.write_text(json.dumps(records))
    loaded = load_memory_files([path], spec)  # the failure rule is the task's, not the loader's
    assert [r.detail.split(" (")[0] for r in loaded.rejects] == ["record 5", "record 6",
                                                                  "record 7"]
    assert loaded.counts["rejected_invalid_memory"] == 3 and loaded.counts["records_read"] == 20


def _replicated(shared: Path, env: str, count: int) -> list[Memory]:
    """`count` memories cycling through the released ones, each goal made unique (so no two
    prompts are identical and a journal cannot answer one from another)."""
    released = load_memory_files(_memory_files(shared, env), get_env(env)).records
    copies = []
    for i in range(count):
        memory = released[i % len(released)].model_copy(deep=True)
        memory.memory_id = f"mem_{i}"
        memory.content.task_meta.original_goal += f" (copy {i})"
        copies.append(memory)
    return copies


def test_twenty_thousand_memories_bounded_prompts_and_predicted_calls(shared_dir):
    spec = get_env("alfworld")
    memories = _replicated(shared_dir, "alfworld", 20_000)
    options = AggregateOptions(batch_size=40, max_outputs_per_call=10, max_prompt_chars=20_000)
    teacher = CountingTeacher()
    result = aggregate_memories(memories, spec, options, teacher)
    tracks, _ = build_tracks(memories, spec)
    expected = {t.name: planned_calls(len(t.items), options) for t in tracks if t.items}
    assert dict(teacher.calls) == expected
    assert result.extras["calls_per_track"] == expected
    patterns = sum(1 for m in memories if m.content.strategic_guidelines.planning_pattern)
    level, by_hand = -(-patterns // 40), 0
    while True:  # 40 items per call, then 4 answers of <= 10 skills per merge call
        by_hand += level
        if level == 1:
            break
        level = -(-level // 4)
    assert expected["general"] == by_hand > 300
    assert teacher.largest_prompt <= options.max_prompt_chars
    # the same corpus with a smaller batch costs more calls but smaller prompts
    small = CountingTeacher()
    small_options = AggregateOptions(batch_size=20, max_prompt_chars=10_000,
                                     max_outputs_per_call=5)
    aggregate_memories(memories, spec, small_options, small)
    assert sum(small.calls.values()) > sum(teacher.calls.values())
    assert small.largest_prompt <= 10_000


def test_planned_calls_levels():
    options = AggregateOptions(batch_size=40, max_outputs_per_call=10)
    assert options.fan_in == 4
    assert planned_calls(0, options) == 0
    assert planned_calls(40, options) == 1
    assert planned_calls(41, options) == 2 + 1
    assert planned_calls(161 * 40, options) == 161 + 41 + 11 + 3 + 1


def test_determinism_and_empty_categories_cost_no_call(shared_dir):
    spec = get_env("alfworld")
    memories = load_memory_files(_memory_files(shared_dir, "alfworld"), spec).records
    first = aggregate_memories(memories, spec, None, OfflineTeacher(show_progress=False))
    second = aggregate_memories(memories, spec, None, OfflineTeacher(show_progress=False))
    assert jsonio.dumps(first.records[0]) == jsonio.dumps(second.records[0])
    only_clean = [m for m in memories if re.search(r"\bclean\b", m.content.task_meta.original_goal)]
    teacher = CountingTeacher()
    bank = aggregate_memories(only_clean, spec, None, teacher).records[0]
    assert bank.task_specific_skills["clean"] and not bank.task_specific_skills["heat"]
    clean_items = next(t.items for t in build_tracks(only_clean, spec)[0]
                       if t.name == "category:clean")
    assert "category:heat" not in teacher.calls
    assert teacher.calls["category:clean"] == planned_calls(len(clean_items), AggregateOptions())


@pytest.mark.slow
def test_twenty_thousand_memories_over_http(shared_dir, tmp_path):
    from skillsft.pipeline.teacher import settings as settings_module
    from skillsft.pipeline.teacher.openai import teacher as teacher_module
    from skillsft.testing import openai_server as server_module
    largest = [0]
    answer_numbers = itertools.count()

    def responder(body: dict[str, Any]) -> str:
        """Answers numbered so merge prompts differ too (the journal dedupes equal prompts)."""
        largest[0] = max(largest[0], sum(len(m["content"]) for m in body["messages"]))
        n = next(answer_numbers)
        if "common mistakes" in body["messages"][0]["content"]:
            return json.dumps({"mistakes": [{"description": f"d{n}", "why_it_happens": "w",
                                             "how_to_avoid": "h", "support": 1}]})
        return json.dumps({"skills": [{"title": f"t{n}", "principle": "p", "when_to_apply": "w",
                                       "support": 1}]})

    spec = get_env("alfworld")
    memories = _replicated(shared_dir, "alfworld", 20_000)
    options = AggregateOptions(max_prompt_chars=20_000)
    config = server_module.ServerConfig(responder=responder)
    with server_module.FakeOpenAIServer(config) as server:
        settings = settings_module.TeacherSettings(
            teacher="openai", base_url=server.base_url, api_key="sk-local-test", concurrency=16,
            show_progress=False)
        teacher = teacher_module.OpenAITeacher(settings, tmp_path, "aggregate")
        result = aggregate_memories(memories, spec, options, teacher)
        # the response-mode probes (negotiation.py) are not aggregation requests
        probes = [b for b in server.stats.bodies if server_module.is_probe(b)]
        received = server.stats.total - len(probes)
        distinct = len(server.stats.by_prompt) - len({server_module.prompt_hash(b) for b in probes})
    tracks, _ = build_tracks(memories, spec)
    expected = sum(planned_calls(len(t.items), options) for t in tracks)
    assert result.counts["teacher_calls"] == expected
    # identical prompts (replicated mistakes batches) are answered once: the teacher dedupes
    assert received == distinct and 0.5 * expected < received <= expected
    assert 0 < largest[0] <= options.max_prompt_chars
