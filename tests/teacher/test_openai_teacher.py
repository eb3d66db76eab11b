"""The openai teacher over real HTTP to the local test server."""

from pathlib import Path
from typing import Any

from skillsft.pipeline.teacher.openai.runtime import close_runtimes
from skillsft.pipeline.teacher.openai.teacher import OpenAITeacher, is_reasoning_model
from skillsft.pipeline.teacher.settings import TeacherSettings
from skillsft.testing.openai_server import FakeOpenAIServer, is_probe
from skillsft.testing.toy import ToyAnswer, toy_requests
from tests.support.fixtures import TEST_API_KEY


def make_teacher(server: FakeOpenAIServer, work_dir: Path, **overrides: Any) -> OpenAITeacher:
    close_runtimes()  # as in a new process: only the work dir remembers
    explicit: dict[str, Any] = {
        "api_key": TEST_API_KEY,
        "base_url": server.base_url,
        "model": "gpt-4o-mini",
        "concurrency": 8,
        "timeout": 2.0,
        "show_progress": False,
    }
    explicit.update(overrides)
    return OpenAITeacher(TeacherSettings.resolve({}, **explicit), work_dir, "toy")


def test_every_request_ends_valid_or_recorded_failed_under_faults(server_factory, tmp_path):
    server = server_factory(
        p_rate_limit=0.2, p_server_error=0.1, p_malformed=0.05, p_truncated=0.05, seed=7
    )
    requests = toy_requests(150)
    teacher = make_teacher(server, tmp_path)

    results, stats = teacher.run_batch(requests, stage="toy")

    assert [r.request_id for r in results] == [r.request_id for r in requests]
    for result in results:
        if result.ok:
            assert isinstance(result.answer, ToyAnswer)
        else:
            assert result.error and result.error.split(":")[0] in {
                "invalid_json",
                "truncated",
                "schema",
                "rate_limited",
                "server_error",
            }
    assert stats.calls_failed == sum(not r.ok for r in results)
    assert stats.calls_failed + sum(r.ok for r in results) == len(requests)
    # the faults really happened, and the retries/re-asks made most requests succeed anyway
    assert server.stats.faults["rate_limit"] > 10 and server.stats.faults["malformed"] > 0
    assert sum(r.ok for r in results) >= 140
    assert stats.calls_new == sum(server.stats.paid_by_prompt.values())


def test_rerun_answers_from_the_journal_without_calls(openai_server, tmp_path):
    requests = toy_requests(30)
    make_teacher(openai_server, tmp_path).run_batch(requests, stage="toy")
    calls_after_first_run = openai_server.stats.total

    results, stats = make_teacher(openai_server, tmp_path).run_batch(requests, stage="toy")

    assert openai_server.stats.total == calls_after_first_run
    assert all(r.ok and r.from_journal for r in results)
    assert stats.calls_from_journal == 30 and stats.calls_new == 0


def test_changed_prompt_version_recalls_exactly_the_affected_requests(openai_server, tmp_path):
    requests = toy_requests(20)
    make_teacher(openai_server, tmp_path).run_batch(requests, stage="toy")
    openai_server.reset()
    changed = {"item0003", "item0011", "item0017"}
    bumped = [
        r if r.request_id not in changed else type(r)(**{**r.__dict__, "prompt_version": "v2"})
        for r in requests
    ]

    results, stats = make_teacher(openai_server, tmp_path).run_batch(bumped, stage="toy")

    assert openai_server.stats.total == 3
    assert {r.request_id for r in results if not r.from_journal} == changed
    assert stats.calls_new == 3


def test_inflight_peak_never_exceeds_concurrency(server_factory, tmp_path):
    server = server_factory(latency=0.05, p_rate_limit=0.1, p_server_error=0.1)
    teacher = make_teacher(server, tmp_path, concurrency=5, max_concurrency=5)

    results, _ = teacher.run_batch(toy_requests(80), stage="toy")

    assert server.stats.peak_in_flight <= 5
    assert server.stats.peak_in_flight >= 2  # it did run concurrently
    assert teacher.peak_in_flight <= 5
    assert len(results) == 80


def test_reasoning_models_get_no_temperature_and_max_completion_tokens(openai_server, tmp_path):
    assert is_reasoning_model("o3-mini") and is_reasoning_model("deepseek-reasoner")
    assert not is_reasoning_model("gpt-4o") and not is_reasoning_model("omni-moderation")
    make_teacher(openai_server, tmp_path, model="o4-mini").run_batch(toy_requests(1), stage="toy")
    make_teacher(openai_server, tmp_path / "b", model="gpt-4.1").run_batch(
        toy_requests(1), stage="toy"
    )
    reasoning, chat = [body for body in openai_server.stats.bodies if not is_probe(body)]
    assert "temperature" not in reasoning and "max_tokens" not in reasoning
    assert reasoning["max_completion_tokens"] == 4096
    assert chat["temperature"] == 0.3 and chat["max_tokens"] == 4096


def test_invalid_answers_are_reasked_with_the_reason_then_recorded(server_factory, tmp_path):
    server = server_factory(responder=lambda body: '{"summary": "", "steps": []}')
    teacher = make_teacher(server, tmp_path, reask_limit=2)

    (result,), stats = teacher.run_batch(toy_requests(1), stage="toy")

    assert not result.ok and result.error.startswith("schema:")
    assert result.raw_text == '{"summary": "", "steps": []}'
    assert result.attempts == 3 and server.stats.total - server.stats.probes == 3
    last_user_message = server.stats.bodies[-1]["messages"][-1]["content"]
    assert "summary" in last_user_message and "score" in last_user_message
    assert stats.failures == {"schema": 1}


def test_a_schema_fix_revalidates_the_journal_without_calls(server_factory, tmp_path):
    server = server_factory(responder=lambda body: '{"summary": "s", "steps": ["a"], "score": 2.5}')
    (first,), _ = make_teacher(server, tmp_path, reask_limit=0).run_batch(
        toy_requests(1), stage="toy"
    )
    assert not first.ok  # 2.5 is not an int
    calls = server.stats.total
    # the lenient answer model stands for a parser/schema fix: same schema text, new validation
    lenient = [r for r in toy_requests(1)]
    lenient_model = type(
        "ToyAnswer", (ToyAnswer,), {"model_config": {"coerce_numbers_to_str": False}}
    )
    lenient_model.model_json_schema = ToyAnswer.model_json_schema  # type: ignore[method-assign]
    lenient_model.model_validate = classmethod(  # type: ignore[method-assign]
        lambda cls, data: ToyAnswer.model_validate({**data, "score": int(data["score"])})
    )
    fixed = [type(r)(**{**r.__dict__, "answer_model": lenient_model}) for r in lenient]

    (second,), stats = make_teacher(server, tmp_path, reask_limit=0).run_batch(fixed, stage="toy")

    assert second.ok and second.from_journal and server.stats.total == calls
    assert second.answer.score == 2


def test_no_file_under_the_work_dir_contains_the_api_key(server_factory, tmp_path):
    server = server_factory(p_rate_limit=0.2, p_server_error=0.2, p_malformed=0.1)
    make_teacher(server, tmp_path).run_batch(toy_requests(40), stage="toy")
    assert server.stats.authorization_seen == {f"Bearer {TEST_API_KEY}"}  # the key was used
    files = [path for path in tmp_path.rglob("*") if path.is_file()]
    assert any(path.suffix == ".jsonl" for path in files)
    for path in files:
        assert TEST_API_KEY.encode() not in path.read_bytes(), path


def test_hangs_and_dropped_connections_are_retried_or_recorded(server_factory, tmp_path):
    server = server_factory(p_hang=0.1, p_drop=0.1, hang_seconds=1.5, seed=3)
    teacher = make_teacher(server, tmp_path, timeout=0.5, max_retries=2)

    results, stats = teacher.run_batch(toy_requests(40), stage="toy")

    assert server.stats.faults["hang"] > 0 and server.stats.faults["drop"] > 0
    assert len(results) == 40
    assert all(r.ok or r.error.split(":")[0] in {"timeout", "connection"} for r in results)
    assert sum(r.ok for r in results) >= 36
