"""Endpoints that answer in ways the fault-injecting server does not: a proxy's HTML page with
status 200, a 400 about a parameter, an exhausted quota, an error that echoes the key. Each
costs one request, is recorded with its reason, and never stops the batch."""

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from skillsft.pipeline.teacher.openai.teacher import OpenAITeacher, is_reasoning_model
from skillsft.pipeline.teacher.settings import TeacherSettings
from skillsft.testing.openai_server import is_probe
from skillsft.testing.toy import toy_requests
from tests.support.fixtures import TEST_API_KEY

Reply = tuple[int, dict[str, str], bytes]


@pytest.fixture
def odd_server() -> Iterator[Callable[[Callable[[dict], Reply]], tuple[str, list[dict]]]]:
    servers: list[ThreadingHTTPServer] = []

    def start(reply: Callable[[dict], Reply]) -> tuple[str, list[dict]]:
        seen: list[dict] = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                seen.append(body)
                status, headers, payload = reply(body)
                self.send_response(status)
                for name, value in {"Content-Length": str(len(payload)), **headers}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/v1", seen

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def run(base_url: str, work_dir: Path, model: str = "gpt-4o-mini", count: int = 2):
    settings = TeacherSettings.resolve(
        {}, teacher="openai", api_key=TEST_API_KEY, base_url=base_url, model=model,
        concurrency=2, timeout=5.0, max_retries=0, show_progress=False,
    )
    return OpenAITeacher(settings, work_dir, "toy").run_batch(toy_requests(count), stage="toy")


def error(status: int, message: str, code: str | None = None) -> Reply:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": code}}
    return status, {"Content-Type": "application/json"}, json.dumps(body).encode()


def test_a_200_html_page_is_a_recorded_failure_not_a_crash(odd_server, tmp_path: Path) -> None:
    url, seen = odd_server(lambda body: (200, {"Content-Type": "text/html"}, b"<html>hi</html>"))
    results, stats = run(url, tmp_path)
    assert [r.ok for r in results] == [False, False]
    assert all(r.error.startswith("bad_response") for r in results)
    assert stats.failures == {"bad_response": 2}


def test_a_400_about_another_parameter_is_not_taken_for_a_format_refusal(
    odd_server, tmp_path: Path
) -> None:
    url, seen = odd_server(lambda body: error(400, "'temperature' does not support 0.3"))
    results, stats = run(url, tmp_path, count=1)
    assert results[0].error.startswith("bad_request")
    requests = [body for body in seen if not is_probe(body)]
    assert len(requests) == 1  # no json_object / text retries for a 400 that is not about format
    assert requests[0]["response_format"]["type"] == "json_schema"


def test_an_exhausted_quota_fails_at_once(odd_server, tmp_path: Path) -> None:
    url, seen = odd_server(lambda body: error(429, "You exceeded your quota", "insufficient_quota"))
    results, stats = run(url, tmp_path)
    assert all(r.error.startswith("quota_exhausted") for r in results)
    assert len([b for b in seen if not is_probe(b)]) == 2  # one call each, no rounds of waiting


def test_an_error_echoing_the_key_never_writes_it(odd_server, tmp_path: Path) -> None:
    url, _ = odd_server(lambda body: error(401, f"Incorrect API key provided: {TEST_API_KEY}"))
    results, _ = run(url, tmp_path)
    assert all(not r.ok for r in results)
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files, "the failures were journaled"
    for path in files:
        assert TEST_API_KEY.encode() not in path.read_bytes(), path
    assert all(TEST_API_KEY not in (r.error or "") for r in results)


@pytest.mark.parametrize(
    ("model", "reasoning"),
    [("o3-mini", True), ("gpt-5-mini", True), ("deepseek/deepseek-reasoner", True),
     ("gpt-4o-mini", False), ("deepseek-chat", False)],
)
def test_reasoning_models_are_recognised(model: str, reasoning: bool) -> None:
    assert is_reasoning_model(model) is reasoning
