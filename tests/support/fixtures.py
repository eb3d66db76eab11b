"""Pytest fixtures around the fake OpenAI-compatible server (skillsft.testing).

Use from a conftest: `from tests.support.fixtures import openai_server, server_factory`. The
server itself, its subprocess helpers and the toy requests live in the installed package
skillsft.testing, so bench/ and users can run them without the test tree.
"""

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from skillsft.pipeline.teacher.openai.runtime import close_runtimes
from skillsft.testing.openai_server import FakeOpenAIServer, ServerConfig

REPO_ROOT = Path(__file__).resolve().parents[2]
TEST_API_KEY = "sk-test-DO-NOT-LEAK-4f1c9e"  # tests grep the work dir for this exact string


@pytest.fixture(autouse=True)
def fresh_teacher_runtimes(tmp_path_factory: pytest.TempPathFactory,
                           monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test's teachers start as in a new process (openai/runtime.py), with a machine-local
    runtime folder of their own (so nothing is left in /tmp), and their clients and event
    loops are closed after it."""
    monkeypatch.setenv("SKILLSFT_RUNTIME_DIR", str(tmp_path_factory.mktemp("runtime")))
    yield
    close_runtimes()


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
