"""The fake server as a child process: for kill -9 tests and benchmarks, where the server must
outlive (or not share a GIL with) the process under test."""

import json
import subprocess
import sys
import urllib.request
from typing import Any


def start_server_process(*args: str) -> tuple[subprocess.Popen[str], str]:
    """Start `python -m skillsft.testing --port 0 ARGS...`; returns the process and its base URL.

    The caller owns the process (kill and wait it when done)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "skillsft.testing", "--port", "0", *args],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("PORT "):
        process.kill()
        process.wait()
        raise RuntimeError(f"fake OpenAI server did not start (said {line!r})")
    return process, f"http://127.0.0.1:{int(line.split()[1])}/v1"


def server_stats(base_url: str) -> dict[str, Any]:
    """The counters of a server running in another process (GET /stats)."""
    with urllib.request.urlopen(f"{base_url}/stats", timeout=5) as response:
        return json.loads(response.read())
