"""Response-format negotiation against the local server configured as different real servers
behave: OpenAI (strict json_schema), llama-cpp-python (a 500 for json_schema, grammar for
`json_object` + `schema`), servers that take only `json_object` or nothing, and servers that
accept a format but ignore it."""

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from skillsft.pipeline.stages.aggregate import MistakesAnswer, SkillsAnswer
from skillsft.pipeline.stages.memories import MEMORY_ANSWER_BY_OUTCOME
from skillsft.pipeline.teacher.openai.negotiation import ModeStore
from skillsft.pipeline.teacher.openai.runtime import close_runtimes
from skillsft.pipeline.teacher.openai.structured import openai_strict_schema
from skillsft.pipeline.teacher.openai.teacher import OpenAITeacher
from skillsft.pipeline.teacher.settings import TeacherSettings
from skillsft.schemas.distill_answers import thoughts_answer_model
from skillsft.testing.openai_server import (
    FakeOpenAIServer,
    is_probe,
    schema_answer,
    strict_mode_problem,
)
from skillsft.testing.toy import toy_requests
from tests.support.fixtures import TEST_API_KEY


def teacher_for(server: FakeOpenAIServer, work_dir: Path, **overrides: Any) -> OpenAITeacher:
    close_runtimes()  # as in a new process: only the work dir remembers
    explicit: dict[str, Any] = {
        "teacher": "openai", "api_key": TEST_API_KEY, "base_url": server.base_url,
        "model": "gpt-4o-mini", "concurrency": 4, "timeout": 5.0, "max_retries": 0,
        "show_progress": False,
    }
    settings = TeacherSettings.resolve({}, **{**explicit, **overrides})
    return OpenAITeacher(settings, work_dir, "toy")


def formats_sent(server: FakeOpenAIServer, *, probes: bool) -> list[str | None]:
    """The response format of each request: json_schema, json_object_schema, json_object, None."""
    kinds = []
    for body in server.stats.bodies:
        if is_probe(body) != probes:
            continue
        requested = body.get("response_format") or {}
        kind = requested.get("type")
        kinds.append("json_object_schema" if "schema" in requested else kind)
    return kinds


def schema_in_prompt(body: dict[str, Any]) -> bool:
    return any("JSON schema:" in m["content"] for m in body["messages"])


@pytest.mark.parametrize(
    ("server_config", "expected_mode"),
    [
        ({}, "json_schema"),
        ({"refuse_json_schema": True, "refusal_status": 500}, "json_object_schema"),
        ({"refuse_json_schema": True, "refuse_json_object_schema": True}, "json_object"),
        ({"refuse_json_schema": True, "refuse_json_object": True, "refusal_status": 422}, "text"),
    ],
    ids=["openai", "llama-cpp-500", "json-object-only", "nothing"],
)
def test_the_probe_settles_on_the_best_mode_the_server_accepts(
    server_factory, tmp_path: Path, server_config: dict[str, Any], expected_mode: str
) -> None:
    server = server_factory(**server_config)
    results, stats = teacher_for(server, tmp_path).run_batch(toy_requests(6), stage="toy")

    assert all(r.ok for r in results)
    probes = formats_sent(server, probes=True)
    order = ["json_schema", "json_object_schema", "json_object", None]
    wanted = "text" if expected_mode == "text" else expected_mode
    assert probes == order[: order.index(None if wanted == "text" else wanted) + 1]
    sent = formats_sent(server, probes=False)
    assert sent == [None if wanted == "text" else wanted] * 6  # no request was refused
    enforced = expected_mode in ("json_schema", "json_object_schema")
    bodies = [b for b in server.stats.bodies if not is_probe(b)]
    assert all(schema_in_prompt(b) != enforced for b in bodies)
    assert ModeStore(tmp_path / "response_modes.json").get(server.base_url, "gpt-4o-mini") == (
        expected_mode
    )
    assert server.stats.faults.get("invalid_strict_schema", 0) == 0
    assert stats.calls_new == len(server.stats.bodies) - (len(probes) - 1)  # refusals unpaid


def test_a_server_that_ignores_the_format_gets_the_schema_in_the_prompt(
    server_factory, tmp_path: Path
) -> None:
    """It answers 200 to every format but writes prose unless the prompt carries the schema:
    the probe must not take an accepted format for an enforced one."""

    def chatty(body: dict[str, Any]) -> str:
        return schema_answer(body) if schema_in_prompt(body) else "Hello! How can I help?"

    server = server_factory(responder=chatty)
    results, _ = teacher_for(server, tmp_path).run_batch(toy_requests(4), stage="toy")

    assert all(r.ok and r.attempts == 1 for r in results)
    assert formats_sent(server, probes=True) == ["json_schema", "json_object_schema",
                                                 "json_object"]
    assert formats_sent(server, probes=False) == ["json_object"] * 4


def test_the_learned_mode_is_kept_per_endpoint_and_model_for_later_runs(
    server_factory, tmp_path: Path
) -> None:
    server = server_factory(refuse_json_schema=True, refusal_status=500)
    teacher_for(server, tmp_path).run_batch(toy_requests(3), stage="toy")
    probes_first_run = server.stats.probes
    assert probes_first_run == 2

    teacher_for(server, tmp_path).run_batch(toy_requests(6), stage="toy")  # 3 new requests
    assert server.stats.probes == probes_first_run  # no probe: the work dir knew the mode
    assert formats_sent(server, probes=False)[-3:] == ["json_object_schema"] * 3

    teacher_for(server, tmp_path, model="other-model").run_batch(toy_requests(1), stage="toy")
    assert server.stats.probes == probes_first_run + 2  # another model is probed afresh

    stored = orjson.loads((tmp_path / "response_modes.json").read_bytes())
    assert sorted(entry["model"] for entry in stored.values()) == ["gpt-4o-mini", "other-model"]
    journal = (tmp_path / "teacher_toy.jsonl").read_text()
    assert journal.count('"request_id":"probe:') == 4  # the probes are journaled


def test_a_refusal_with_any_status_met_mid_run_steps_down_and_is_kept(
    server_factory, tmp_path: Path
) -> None:
    server = server_factory(refuse_json_schema=True, refusal_status=500)
    ModeStore(tmp_path / "response_modes.json").put(server.base_url, "gpt-4o-mini", "json_schema")
    results, stats = teacher_for(server, tmp_path, concurrency=1).run_batch(
        toy_requests(4), stage="toy"
    )
    assert all(r.ok for r in results) and stats.calls_failed == 0
    assert server.stats.probes == 0
    assert formats_sent(server, probes=False) == ["json_schema", *["json_object_schema"] * 4]
    store = ModeStore(tmp_path / "response_modes.json")
    assert store.get(server.base_url, "gpt-4o-mini") == "json_object_schema"


def test_a_forced_mode_is_used_without_probing_and_a_refusal_is_a_failure(
    server_factory, tmp_path: Path
) -> None:
    server = server_factory(refuse_json_schema=True)
    results, _ = teacher_for(server, tmp_path, response_format="json_object").run_batch(
        toy_requests(2), stage="toy"
    )
    assert all(r.ok for r in results) and server.stats.probes == 0
    assert formats_sent(server, probes=False) == ["json_object"] * 2

    (forced,), stats = teacher_for(server, tmp_path / "b", response_format="json_schema") \
        .run_batch(toy_requests(1), stage="toy")
    assert not forced.ok and forced.error.startswith("format_refused")
    assert formats_sent(server, probes=False)[-1] == "json_schema"


@pytest.mark.parametrize(
    "answer_model",
    [*MEMORY_ANSWER_BY_OUTCOME.values(), SkillsAnswer, MistakesAnswer,
     thoughts_answer_model((0, 2, 5))],
    ids=lambda m: m.__name__,
)
def test_every_stage_schema_is_within_openai_strict_mode(answer_model) -> None:
    assert strict_mode_problem(openai_strict_schema(answer_model)) is None


def test_the_distill_schema_admits_exactly_the_asked_steps() -> None:
    model = thoughts_answer_model((0, 2, 5))
    thoughts = openai_strict_schema(model)["properties"]["thoughts"]
    assert thoughts["required"] == ["step_0", "step_2", "step_5"]
    assert thoughts["additionalProperties"] is False
    answer = model.model_validate(json.loads(
        '{"thoughts": {"step_0": "look", "step_2": "take", "step_5": "done"}}'))
    assert answer.by_index() == {0: "look", 2: "take", 5: "done"}
    with pytest.raises(ValueError, match="missing step_index"):
        model.model_validate({"thoughts": {"step_0": "a", "step_2": "b"}})
    with pytest.raises(ValueError, match="step_<index>"):
        model.model_validate({"thoughts": {"step_0": "a", "step_2": "b", "zzz": "c"}})
