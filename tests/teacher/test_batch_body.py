"""Batch = live: a batch line carries the body a live call of the same request sends, byte for
byte, in the response mode negotiated for the endpoint; the server's answers depend on that
whole body, so any difference would show in the answers."""

import json
from typing import Any

import pytest

from skillsft.pipeline.teacher.batch.teacher import BatchOptions, BatchTeacher
from skillsft.pipeline.teacher.journal import Journal
from skillsft.pipeline.teacher.openai.teacher import OpenAITeacher
from skillsft.pipeline.teacher.settings import TeacherSettings
from skillsft.testing.openai_server import FakeOpenAIServer, is_probe, schema_answer
from skillsft.testing.toy import toy_requests
from tests.support.fixtures import TEST_API_KEY

BODY_FIELD = b'"body":'


def settings_for(server: FakeOpenAIServer, response_format: str) -> TeacherSettings:
    return TeacherSettings.resolve({}, api_key=TEST_API_KEY, base_url=server.base_url,
                                   model="gpt-4o-mini", timeout=5.0, show_progress=False,
                                   response_format=response_format)


def live_stage_bodies(server: FakeOpenAIServer) -> list[bytes]:
    """Every live chat body the server received, as received, minus the mode probes."""
    return [raw for raw, body in zip(server.stats.raw_bodies, server.stats.bodies, strict=True)
            if not is_probe(body)]


def batch_line_bodies(server: FakeOpenAIServer) -> list[bytes]:
    """The `body` of every line of every uploaded batch input file, cut out of the line's
    bytes (the last field of the line, up to its closing brace)."""
    bodies = []
    for batch in server.batches.batches.values():
        for line in server.batches.files[batch["input_file_id"]].data.splitlines():
            start = line.index(BODY_FIELD) + len(BODY_FIELD)
            assert line.endswith(b"}")
            bodies.append(line[start:-1])
    return bodies


def answers(results: list[Any]) -> list[Any]:
    return [r.answer.model_dump() if r.ok else r.error for r in results]


@pytest.mark.parametrize(("server_config", "response_format", "mode"), [
    ({}, "auto", "json_schema"),
    ({"refuse_json_schema": True}, "auto", "json_object_schema"),
    ({"refuse_json_schema": True, "refuse_json_object_schema": True}, "auto", "json_object"),
    ({}, "text", "text"),
], ids=["negotiated-json_schema", "negotiated-json_object_schema", "negotiated-json_object",
        "forced-text"])
def test_a_batch_line_carries_the_live_body_byte_for_byte_in_the_negotiated_mode(
        server_factory, tmp_path, server_config, response_format, mode) -> None:
    requests = toy_requests(6)
    live_server = server_factory(**server_config)
    live_results, _ = OpenAITeacher(settings_for(live_server, response_format),
                                    tmp_path / "live", "toy").run_batch(requests, stage="toy")
    batch_server = server_factory(**server_config)
    batch = BatchTeacher(settings_for(batch_server, response_format), tmp_path / "batch", "toy",
                         BatchOptions(wait=True, poll_seconds=0.01))

    results, _ = batch.run_batch(requests, stage="toy")

    live = live_stage_bodies(live_server)
    assert len(live) == len(requests) and batch_server.stats.stage_requests == 0
    assert sorted(batch_line_bodies(batch_server)) == sorted(live)
    sent = [json.loads(body) for body in live]
    if mode == "json_schema":
        assert all(body["response_format"]["json_schema"]["strict"] is True for body in sent)
    if mode in ("json_object", "text"):  # the schema travels in the prompt
        assert all("JSON schema:" in body["messages"][-1]["content"] for body in sent)
    assert batch.mode == mode
    # The answers depend on the whole body, so equal answers say the bodies are equal too.
    assert answers(results) == answers(live_results)
    assert all(r.ok for r in results)
    journal = Journal(tmp_path / "batch" / "teacher_toy.jsonl")
    modes = {journal.latest_response(batch.key_for(r.messages, r)).response_mode
             for r in requests}
    assert modes == {mode}


def test_the_test_server_answers_by_the_whole_body_not_by_its_key_order() -> None:
    schema = {"type": "object", "properties": {"summary": {"type": "string"}},
              "required": ["summary"], "additionalProperties": False}
    strict = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
              "temperature": 0.0, "max_tokens": 100,
              "response_format": {"type": "json_schema", "json_schema": {
                  "name": "A", "strict": True, "schema": schema}}}
    not_strict = json.loads(json.dumps(strict))
    del not_strict["response_format"]["json_schema"]["strict"]
    warmer = {**strict, "temperature": 0.7}
    reordered = dict(reversed(list(strict.items())))

    answer = schema_answer(strict)
    assert schema_answer(not_strict) != answer
    assert schema_answer(warmer) != answer
    assert schema_answer(reordered) == answer
    # a re-ask (the bad reply quoted, then the correction) gets the clean first ask's answer
    reask = {**strict, "messages": [*strict["messages"],
                                    {"role": "assistant", "content": "oops"},
                                    {"role": "user", "content": "Your previous reply could "
                                     "not be used: no JSON. Reply again."}]}
    assert schema_answer(reask) == answer
