"""Failed requests are not paid for again forever: transient failures are retried by at most
`--retry-failed` later runs, permanent ones by none, and a forced stage retries them all once."""

import json
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from skillsft.pipeline.teacher.openai.teacher import OpenAITeacher
from skillsft.pipeline.teacher.settings import TeacherSettings
from skillsft.testing.openai_server import is_probe, schema_answer
from skillsft.testing.toy import toy_requests
from tests.support.fixtures import TEST_API_KEY

TRANSIENT, PERMANENT = "Item number 1.", "Item number 2."  # a 503 and a 400, every time


@pytest.fixture
def picky_server() -> Iterator[tuple[str, Counter[str]]]:
    """Answers schema-valid JSON, except a 503 for item 1 and a context-length 400 for item 2;
    counts the calls per item."""
    calls: Counter[str] = Counter()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - stdlib name
            self.reply(404, {"error": {"message": "no route"}})

        def do_POST(self) -> None:  # noqa: N802 - stdlib name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            text = json.dumps(body["messages"])
            item = next((m for m in (TRANSIENT, PERMANENT) if m in text), "other")
            if not is_probe(body):
                calls[item] += 1
            if item == TRANSIENT:
                self.reply(503, {"error": {"message": "overloaded, try later"}})
            elif item == PERMANENT:
                self.reply(400, {"error": {"message": "This model's maximum context length is "
                                           "8192 tokens", "code": "context_length_exceeded"}})
            else:
                self.reply(200, {
                    "id": "x", "object": "chat.completion", "created": 0, "model": "m",
                    "choices": [{"index": 0, "finish_reason": "stop", "message": {
                        "role": "assistant", "content": schema_answer(body)}}],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}})

        def reply(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", calls
    server.shutdown()
    server.server_close()


def run(url: str, work_dir: Path, **overrides: Any):
    settings = TeacherSettings.resolve({}, **{
        "teacher": "openai", "api_key": TEST_API_KEY, "base_url": url, "model": "gpt-4o-mini",
        "concurrency": 2, "timeout": 5.0, "max_retries": 0, "show_progress": False,
        **overrides})
    return OpenAITeacher(settings, work_dir, "toy").run_batch(toy_requests(4), stage="toy")


def test_transient_failures_are_retried_by_at_most_n_runs_permanent_ones_by_none(
    picky_server, tmp_path: Path
) -> None:
    url, calls = picky_server
    retryable = []
    for _ in range(4):
        results, stats = run(url, tmp_path, retry_failed=2)
        by_id = {r.request_id: r for r in results}
        assert by_id["item0001"].error.startswith("server_error")
        assert by_id["item0002"].error.startswith("bad_request")
        assert by_id["item0000"].ok and by_id["item0003"].ok
        retryable.append(stats.retryable_failures)
        assert stats.calls_failed == 2 and stats.failures == {"server_error": 1,
                                                              "bad_request": 1}
    # the 503 was called in the first run and two more; the 400 only once
    assert calls[TRANSIENT] == 3 and calls[PERMANENT] == 1
    assert retryable == [1, 1, 0, 0]  # what the next run will retry, as the manifests say
    assert "--force" in by_id["item0002"].error and "--retry-failed 2" in by_id["item0001"].error

    run(url, tmp_path, retry_failed=2, retry_forced=True)  # the user forces the stage
    assert calls[TRANSIENT] == 4 and calls[PERMANENT] == 2
    assert calls["other"] == 2  # the answered requests came from the journal every time


def test_retry_failed_zero_never_retries(picky_server, tmp_path: Path) -> None:
    url, calls = picky_server
    run(url, tmp_path, retry_failed=0)
    _, stats = run(url, tmp_path, retry_failed=0)
    assert calls[TRANSIENT] == 1 and stats.retryable_failures == 0
