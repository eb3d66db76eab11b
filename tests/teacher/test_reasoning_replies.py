"""Replies of reasoning models: the answer is what follows the <think> block, never the JSON the
model wrote while thinking, and never a server's separate `reasoning_content`."""

from pathlib import Path

import orjson
import pytest

from skillsft.pipeline.teacher.openai.structured import AnswerProblem, extract_json, parse_answer
from skillsft.testing.toy import ToyAnswer, toy_requests
from tests.teacher.test_openai_teacher import make_teacher


def test_the_answer_follows_the_reasoning_block():
    reply = '<think>I consider the {"x": 1} form</think>\n{"steps": [1, 2]}'
    assert extract_json(reply) == {"steps": [1, 2]}
    # the template opened the block, so the reply only closes it
    assert extract_json('I consider {"x": 1}\n</think>\n\n{"steps": [3]}') == {"steps": [3]}
    # two blocks, prose and fences after the last one
    assert extract_json('<THINK>{"a": 1}</THINK><think>{"b": 2}</think>Here:\n```json\n'
                        '{"steps": [4]}\n```') == {"steps": [4]}
    # a reply that is JSON as a whole is the answer, even if a string mentions the tag
    assert extract_json('{"note": "</think> is a tag", "n": 1}') == {
        "note": "</think> is a tag", "n": 1}


def test_an_unfinished_reasoning_block_is_no_answer():
    with pytest.raises(AnswerProblem) as problem:
        extract_json('<think>Let me weigh {"summary": "s", "steps": ["a"], "score": 1} first')
    assert problem.value.kind == "unfinished_reasoning"
    # with nothing after the block, the reply has no JSON: a re-ask, not the thought's fragment
    with pytest.raises(AnswerProblem, match="invalid_json"):
        parse_answer('<think>{"summary": "s", "steps": ["a"], "score": 1}</think>', "stop",
                     ToyAnswer)


@pytest.mark.parametrize("shape", ["think", "unopened", "field"])
@pytest.mark.parametrize("mode", ["text", "json_object"])
def test_reasoning_replies_over_http_are_answered_first_time(server_factory, tmp_path: Path,
                                                             shape: str, mode: str):
    server = server_factory(reasoning=shape)
    requests = toy_requests(6)
    teacher = make_teacher(server, tmp_path, response_format=mode)

    results, stats = teacher.run_batch(requests, stage="toy")

    assert all(r.ok and r.attempts == 1 for r in results), [r.error for r in results]
    assert stats.calls_new == len(requests) == sum(server.stats.paid_by_prompt.values())
    # the journal keeps the reply as the server sent it (the content, thinking included)
    lines = [orjson.loads(line) for line in teacher.journal.path.read_bytes().splitlines()]
    replies = [r["raw_text"] for r in lines if r["kind"] == "response"]
    assert len(replies) == len(requests)
    if shape == "field":  # the thinking travelled beside the content, which is the answer
        assert all("</think>" not in text and orjson.loads(text) for text in replies)
    else:
        assert all('{"x": 1}' in text and "</think>" in text for text in replies)
        assert all(text.startswith("<think>") == (shape == "think") for text in replies)


def test_reasoning_content_is_never_taken_for_the_answer(server_factory, tmp_path: Path):
    """A model that never stopped thinking: the drafted answer is only in `reasoning_content`,
    valid as it is, and the content is empty. That is no answer: re-asked, then a failure."""
    server = server_factory(reasoning="field_only")
    teacher = make_teacher(server, tmp_path, response_format="json_schema")

    results, stats = teacher.run_batch(toy_requests(2), stage="toy")

    assert not any(r.ok for r in results)
    assert all(r.error and r.error.startswith("empty:") for r in results)
    assert stats.failures == {"empty": 2}
