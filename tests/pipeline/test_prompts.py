"""What the teacher is asked, per environment: golden renderings and the rules a server receives.

Each golden file under tests/golden/<env>/ is one real request rendered from the bundled
samples (system and user message), so any prompt change is a visible diff in review. After a
deliberate change, regenerate with `SKILLSFT_UPDATE_GOLDEN=1 pytest tests/pipeline/test_prompts.py`
and bump the prompt version of the changed prompt.
"""

import os
from pathlib import Path
from typing import Any

import pytest

from skillsft.pipeline.envs import ENVS, get_env
from skillsft.pipeline.formats.render import render_block
from skillsft.pipeline.formats.rollouts.selection import SelectionOptions
from skillsft.pipeline.stages.aggregate import (
    MISTAKES_KIND,
    SKILLS_KIND,
    AggregateOptions,
    aggregate_memories,
    build_request,
    build_tracks,
)
from skillsft.pipeline.stages.distill import DistillOptions, plan_requests
from skillsft.pipeline.stages.memories import (
    MemoryOptions,
    build_context,
    build_memory_request,
    generate_memories,
)
from skillsft.pipeline.stages.parse import parse_rollouts
from skillsft.pipeline.teacher.base import TeacherRequest
from skillsft.pipeline.teacher.offline import OfflineTeacher
from skillsft.pipeline.teacher.openai.teacher import OpenAITeacher
from skillsft.pipeline.teacher.settings import TeacherSettings
from skillsft.testing.openai_server import is_probe
from tests.support.fixtures import TEST_API_KEY

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "rollouts"
GOLDEN = Path(__file__).resolve().parents[1] / "golden"
UPDATE = os.environ.get("SKILLSFT_UPDATE_GOLDEN") == "1"


def _records(env: str) -> list[Any]:
    return parse_rollouts(EXAMPLES / env, get_env(env), SelectionOptions(include_mixed=True),
                          workers=1).records


def _first_context(env: str, outcome: str):
    spec = get_env(env)
    for record in _records(env):
        for index in range(len(record.trajectories)):
            ctx = build_context(record, index, spec)
            if ctx.outcome == outcome:
                return ctx
    raise AssertionError(f"the {env} sample has no {outcome} trajectory")


def sample_requests(env: str) -> dict[str, TeacherRequest[Any]]:
    """One request per prompt, rendered from the bundled sample of `env`."""
    spec = get_env(env)
    requests: dict[str, TeacherRequest[Any]] = {
        f"memory_{o.lower()}": build_memory_request(_first_context(env, o), MemoryOptions())
        for o in ("Success", "Failure")
    }
    offline = OfflineTeacher(show_progress=False)
    records = _records(env)
    memories = generate_memories(records, spec, MemoryOptions(), offline).records
    tracks, _ = build_tracks(memories, spec)
    options = AggregateOptions()
    general = next(t for t in tracks if t.name == "general")
    category = next(t for t in tracks if t.kind == SKILLS_KIND and t.name != "general"
                    and t.items)
    mistakes = next(t for t in tracks if t.kind == MISTAKES_KIND)
    for name, track in (("aggregate_general", general), ("aggregate_category", category),
                        ("aggregate_mistakes", mistakes)):
        requests[name] = build_request(track, 0, 0, track.items, spec.memory_environment_tag,
                                       options, final=True, profile=spec.prompts)
    bank = aggregate_memories(memories, spec, None, offline).records[0]
    record = next(r for r in records if spec.turn_layout().succeeded(r, r.trajectories[0]))
    category_name = spec.classify_task(record.task, getattr(record, "data_source", None))
    block = render_block(bank, spec, category_name)
    drafts = spec.turn_layout().build_turns(record.task, block, record.trajectories[0],
                                            f"{record.env_id}/0", DistillOptions().render, {})
    requests["distill"] = plan_requests(f"{record.env_id}/0", record.task, block, drafts,
                                        DistillOptions())[0]
    return requests


def rendered(request: TeacherRequest[Any]) -> str:
    parts = [f"# {request.kind} / {request.prompt_version} / {request.request_id}"]
    parts += [f"=== {m['role']} ===\n{m['content']}" for m in request.messages]
    return "\n\n".join(parts) + "\n"


@pytest.mark.parametrize("env", sorted(ENVS))
def test_every_prompt_matches_its_golden_rendering(env: str) -> None:
    requests = sample_requests(env)
    assert set(requests) == {"memory_success", "memory_failure", "aggregate_general",
                             "aggregate_category", "aggregate_mistakes", "distill"}
    stale = []
    for name, request in requests.items():
        path = GOLDEN / env / f"{name}.txt"
        text = rendered(request)
        if UPDATE:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        elif not path.is_file() or path.read_text() != text:
            stale.append(str(path.relative_to(GOLDEN.parent.parent)))
    assert not stale, ("prompt renderings changed: " + ", ".join(stale) + ". If intended, bump "
                       "the prompt version and regenerate with SKILLSFT_UPDATE_GOLDEN=1")


# What each environment's memory prompt must say (TEACHER-PROMPTS.md), and what it must not
# borrow from another environment.
OWN_RULES = {
    "alfworld": ("AlfWorld task classified as", "Search [Location] where possibly having",
                 "[Target_Location]", "Acquire", "instance numbers"),
    "webshop": ("WebShop task to <verb> a <broad item category>", "[Price_Constraint]",
                "click[[Size_Constraint]]", "Search -> Filter -> Select -> Verify -> Buy"),
    "search": ("multi-hop reasoning or direct retrieval", "Decompose Question",
               "[Time_Period]", "bridge entity", "found career dates"),
}


def test_each_environment_memory_prompt_reaches_the_server_with_its_own_rules(
    openai_server, tmp_path
) -> None:
    settings = TeacherSettings.resolve({}, teacher="openai", api_key=TEST_API_KEY,
                                       base_url=openai_server.base_url, model="gpt-4o-mini",
                                       concurrency=2, timeout=5.0, show_progress=False)
    for env in sorted(ENVS):
        request = build_memory_request(_first_context(env, "Success"), MemoryOptions())
        OpenAITeacher(settings, tmp_path / env, "memory").run_batch([request], stage="memories")
    bodies = [body for body in openai_server.stats.bodies if not is_probe(body)]
    assert len(bodies) == 3
    received = {}
    for body in bodies:
        text = "\n".join(m["content"] for m in body["messages"])
        env = next(e for e in ENVS if f"Environment: {get_env(e).memory_environment_tag}\n"
                   in text)
        received[env] = text
    for env, rules in OWN_RULES.items():
        for rule in rules:
            assert rule in received[env], (env, rule)
        for other, other_rules in OWN_RULES.items():
            if other != env:
                assert other_rules[0] not in received[env], (env, other)


def test_search_evidence_reaches_the_memory_prompt_whole_when_it_fits() -> None:
    """A bridge entity 1,000 characters into a passage was cut by the old 300-char clip."""
    from skillsft.schemas.trajectory import SearchTrajectorySet

    passage = "filler text. " * 80 + "The director was Jane Bridgewater, born in Oslo."
    record = SearchTrajectorySet.model_validate({
        "env_id": "q1", "task": "Where was the director of Film X born?", "outcome": "Success",
        "data_source": "hotpotqa", "type": "all_success", "reward": 1.0,
        "trajectories": [[
            {"step_id": "0", "action": "<search>Film X director</search>", "observation":
             passage},
            {"step_id": "1", "action": "<answer>Oslo</answer>", "observation": "",
             "done": True, "reward": 1.0},
        ]],
    })
    spec = get_env("search")
    text = build_memory_request(build_context(record, 0, spec), MemoryOptions()).messages[1][
        "content"]
    assert "Jane Bridgewater, born in Oslo" in text
    tight = MemoryOptions(context_budget_tokens=900)
    clipped = build_memory_request(build_context(record, 0, spec), tight).messages
    assert sum(len(m["content"]) for m in clipped) <= 900 * 4 + 40
    assert "Jane Bridgewater" not in clipped[1]["content"]
