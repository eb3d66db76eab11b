"""Pytest fixtures around the local OpenAI-compatible server, plus subprocess helpers.

Use from a conftest: `from tests.support.fixtures import openai_server, server_factory`.
"""

import json
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from tests.support.openai_server import FakeOpenAIServer, ServerConfig

REPO_ROOT = Path(__file__).resolve().parents[2]
TEST_API_KEY = "sk-test-DO-NOT-LEAK-4f1c9e"  # tests grep the work dir for this exact string


class ToyAnswer(BaseModel):
    """A small answer model with nesting and constraints, for teacher tests."""

    summary: str = Field(min_length=1)
    steps: list[str] = Field(min_length=1)
    score: int


@pytest.fixture
def server_factory() -> Iterator[Callable[..., FakeOpenAIServer]]:
    """Start servers with a given configuration; all are stopped after the test."""
    started: list[FakeOpenAIServer] = []

    def start(**config: Any) -> FakeOpenAIServer:
        server = FakeOpenAIServer(ServerConfig(**config)).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def openai_server(server_factory: Callable[..., FakeOpenAIServer]) -> FakeOpenAIServer:
    """A fault-free server answering schema-valid JSON."""
    return server_factory()


def start_server_process(*args: str) -> tuple[subprocess.Popen[str], str]:
    """Run the server as a subprocess (for kill -9 tests and the benchmark); returns its URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.openai_server", "--port", "0", *args],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("PORT "):
        process.kill()
        raise RuntimeError(f"test server did not start (said {line!r})")
    return process, f"http://127.0.0.1:{int(line.split()[1])}/v1"


def server_stats(base_url: str) -> dict[str, Any]:
    """The counters of a server running in another process."""
    with urllib.request.urlopen(f"{base_url}/stats", timeout=5) as response:
        return json.loads(response.read())
