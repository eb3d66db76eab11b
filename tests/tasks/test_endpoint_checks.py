"""Pre-flight checks (`skillsft check`, and `run` before any stage) and credentials inside the
base URL, end to end through the `skillsft` command, Luigi and local HTTP servers."""

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from skillsft import settings
from skillsft.cli import build_parser
from skillsft.pipeline.teacher.openai.endpoints import HANDOFF_VARIABLE
from skillsft.tasks.base import walk_graph
from skillsft.testing.stage_responder import stage_responder
from tests.support.fixtures import TEST_API_KEY

REPO_ROOT = Path(__file__).resolve().parents[2]
PASSWORD, QUERY_SECRET = "pw-SECRET-7731", "q-SECRET-5519"


def skillsft(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "skillsft", *args], cwd=REPO_ROOT, capture_output=True,
        text=True, timeout=timeout,
        env={**os.environ, "OPENAI_API_KEY": TEST_API_KEY, "CI": ""},
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def raw_server() -> Iterator[Callable[[int, str, bytes], str]]:
    """A server answering every request with one fixed status, content type and body."""
    servers: list[ThreadingHTTPServer] = []

    def start(status: int, content_type: str, body: bytes) -> str:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def answer(self) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = answer  # noqa: N815 - stdlib names

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/v1"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def silent_url() -> Iterator[str]:
    """Accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    listener.close()


def assert_one_line_config_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "Traceback" not in result.stderr + result.stdout
    last = result.stderr.strip().splitlines()[-1]
    for needle in needles:
        assert needle in last, last


def test_check_connection_refused_and_unknown_host(tmp_path: Path) -> None:
    refused = f"http://127.0.0.1:{free_port()}/v1"
    result = skillsft("check", "search", "--teacher", "openai", "--base-url", refused,
                      "--work-dir", str(tmp_path))
    assert_one_line_config_error(result, refused, "connection refused", "--base-url")

    unknown = "http://no-such-host.invalid/v1"
    result = skillsft("check", "search", "--teacher", "openai", "--base-url", unknown,
                      "--work-dir", str(tmp_path))
    assert_one_line_config_error(result, unknown, "unknown host")


@pytest.mark.parametrize(
    ("status", "content_type", "body", "needles"),
    [
        (401, "application/json", b'{"error": {"message": "Invalid API key"}}',
         ("rejected the API key", "OPENAI_API_KEY")),
        (200, "text/html", b"<html><body>Welcome to nginx</body></html>",
         ("not an OpenAI-compatible API", "/v1")),
    ],
    ids=["401", "html-page"],
)
def test_check_a_bad_key_and_a_non_openai_page(
    raw_server, tmp_path: Path, status: int, content_type: str, body: bytes,
    needles: tuple[str, ...],
) -> None:
    url = raw_server(status, content_type, body)
    result = skillsft("check", "search", "--teacher", "openai", "--base-url", url,
                      "--work-dir", str(tmp_path))
    assert_one_line_config_error(result, url, *needles)


def test_check_a_server_that_never_answers(silent_url: str, tmp_path: Path) -> None:
    result = skillsft("check", "search", "--teacher", "openai", "--base-url", silent_url,
                      "--work-dir", str(tmp_path))
    assert_one_line_config_error(result, silent_url, "did not answer within")


def test_check_an_unknown_model_then_a_good_one(server_factory, tmp_path: Path) -> None:
    server = server_factory(models=("served-model",))
    result = skillsft("check", "search", "--teacher", "openai", "--base-url", server.base_url,
                      "--memory-model", "missing-model", "--work-dir", str(tmp_path))
    assert_one_line_config_error(result, "missing-model", "served-model", "MEMORY_MODEL")
    assert server.stats.total == 0  # nothing paid before the model was known to exist

    good = ("--memory-model", "served-model", "--aggregate-model", "served-model",
            "--distill-model", "served-model")
    result = skillsft("check", "search", "--teacher", "openai", "--base-url", server.base_url,
                      *good, "--work-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "served-model: listed, response mode json_schema" in result.stdout
    assert server.stats.probes == 1 and server.stats.total == 1  # one model, one probe
    assert not (tmp_path / "processed_trajectories.json").exists()  # only the checks ran


def test_a_run_fails_before_any_stage_when_the_endpoint_is_down(tmp_path: Path) -> None:
    refused = f"http://127.0.0.1:{free_port()}/v1"
    result = skillsft("run", "search", "--teacher", "openai", "--base-url", refused,
                      "--work-dir", str(tmp_path))
    assert_one_line_config_error(result, refused, "connection refused")
    assert not (tmp_path / "processed_trajectories.json").exists()


def credential_url(base_url: str) -> str:
    return base_url.replace("http://", f"http://alice:{PASSWORD}@") + f"?api-key={QUERY_SECRET}"


def assert_no_secret_in(text: bytes | str, where: object) -> None:
    data = text.encode() if isinstance(text, str) else text
    for secret in (PASSWORD, QUERY_SECRET, TEST_API_KEY):
        assert secret.encode() not in data, f"{secret} in {where}"


def test_credentials_in_the_base_url_never_reach_files_output_or_luigi_params(
    server_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = server_factory(responder=stage_responder)
    url = credential_url(server.base_url)
    work = tmp_path / "work"
    result = skillsft("run", "search", "--teacher", "openai", "--base-url", url,
                      "--work-dir", str(work))
    assert result.returncode == 0, result.stderr[-3000:]
    assert server.stats.total > 3  # the run really talked to the server through that URL
    assert_no_secret_in(result.stdout + result.stderr, "the console")
    assert "http://***@127.0.0.1" in result.stdout  # the banner shows the redacted URL
    files = [path for path in work.rglob("*") if path.is_file()]
    assert any(path.name == "report.json" for path in files)
    for path in files:
        assert_no_secret_in(path.read_bytes(), path)

    # The Luigi parameters of every task (what luigid and the logs see): redacted URL and a
    # hash of the full one, which changes with the credential.
    def graph_params(base_url: str) -> list[dict[str, str]]:
        args = build_parser().parse_args(["run", "search", "--teacher", "openai", "--base-url",
                                          base_url, "--work-dir", str(work)])
        root = settings.build_root_task(args, {"OPENAI_API_KEY": TEST_API_KEY})
        return [task.to_str_params() for task in walk_graph(root)]

    monkeypatch.delenv(HANDOFF_VARIABLE, raising=False)
    params = graph_params(url)
    assert_no_secret_in(json.dumps(params), "the Luigi parameters")
    digests = {p["base_url_digest"] for p in params if p.get("base_url_digest")}
    other = graph_params(url.replace(PASSWORD, "another-password"))
    assert len(digests) == 1 and digests.isdisjoint(
        {p["base_url_digest"] for p in other if p.get("base_url_digest")})
    monkeypatch.delenv(HANDOFF_VARIABLE, raising=False)
