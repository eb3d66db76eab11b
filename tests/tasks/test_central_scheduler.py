"""`--scheduler-url`: the same run through a real central scheduler (luigid) instead of the
local one, with two workers."""

import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from skillsft.cli import main

LUIGID = Path(sys.executable).with_name("luigid")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def scheduler_url(tmp_path: Path):
    if not LUIGID.exists() and shutil.which("luigid") is None:
        pytest.skip("luigid is not installed")
    port = free_port()
    process = subprocess.Popen(
        [str(LUIGID if LUIGID.exists() else "luigid"), "--address", "127.0.0.1",
         "--port", str(port), "--state-path", str(tmp_path / "state.pickle"),
         "--logdir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url + "/api/task_list?data={}", timeout=1)
            break
        except OSError:
            assert time.monotonic() < deadline, "luigid did not start"
            time.sleep(0.1)
    yield url
    process.terminate()
    process.wait(timeout=10)


def test_run_through_a_central_scheduler_gives_the_same_corpus(tmp_path: Path, scheduler_url):
    local, central = tmp_path / "local", tmp_path / "central"
    assert main(["run", "webshop", "--teacher", "offline", "--work-dir", str(local)]) == 0
    assert main(["run", "webshop", "--teacher", "offline", "--work-dir", str(central),
                 "--scheduler-url", scheduler_url, "--workers", "2"]) == 0
    name = "webshop_sft_data.json"
    assert (central / name).read_bytes() == (local / name).read_bytes()
    tasks_url = scheduler_url + "/api/task_list?data={}"
    with urllib.request.urlopen(tasks_url, timeout=5) as answer:
        assert b"Flatten" in answer.read()  # the scheduler really saw the tasks
