"""ctrl-C stops a run cleanly and a re-run finishes it; the user's Luigi config is obeyed."""

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from skillsft.testing.stage_responder import stage_responder
from tests.support.fixtures import TEST_API_KEY
from tests.tasks.conftest import scheduler_url  # noqa: F401 - a fixture


def start_run(work: Path, base_url: str, environ: dict[str, str] | None = None):
    return subprocess.Popen(
        [sys.executable, "-m", "skillsft", "run", "alfworld", "--teacher", "openai",
         "--base-url", base_url, "--work-dir", str(work), "--concurrency", "2"],
        env={**os.environ, "OPENAI_API_KEY": TEST_API_KEY, **(environ or {})},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )


def test_ctrl_c_exits_130_and_a_rerun_gives_the_same_corpus(tmp_path: Path, server_factory):
    reference_server = server_factory(responder=stage_responder)
    reference = tmp_path / "reference"
    assert start_run(reference, reference_server.base_url).wait(timeout=600) == 0

    server = server_factory(responder=stage_responder, latency=0.3)
    work = tmp_path / "interrupted"
    process = start_run(work, server.base_url)
    deadline = time.monotonic() + 300
    while sum(server.stats.paid_by_prompt.values()) < 4:
        assert process.poll() is None and time.monotonic() < deadline, "run ended too early"
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGINT)  # what ctrl-C in a terminal sends
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 130, out[-2000:]
    assert "interrupted; re-run the same command to continue" in out
    assert "Traceback" not in out
    assert not (work / "alfworld_sft_data.json").exists()

    rerun = start_run(work, server.base_url)
    out, _ = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, out[-2000:]
    name = "alfworld_sft_data.json"
    assert (work / name).read_bytes() == (reference / name).read_bytes()


def test_scheduler_url_from_the_luigi_config_is_used(tmp_path: Path, scheduler_url) -> None:  # noqa: F811
    config = tmp_path / "luigi.cfg"
    config.write_text(f"[core]\ndefault-scheduler-url = {scheduler_url}\n")
    done = subprocess.run(
        [sys.executable, "-m", "skillsft", "run", "webshop", "--teacher", "offline",
         "--work-dir", str(tmp_path / "w")],
        env={**os.environ, "LUIGI_CONFIG_PATH": str(config)}, capture_output=True, text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    with urllib.request.urlopen(scheduler_url + "/api/task_list?data={}", timeout=5) as answer:
        assert b"Flatten" in answer.read()  # the run went through that luigid


def test_a_scheduler_flag_wins_over_the_luigi_config(tmp_path: Path, scheduler_url) -> None:  # noqa: F811
    config = tmp_path / "luigi.cfg"
    config.write_text("[core]\ndefault-scheduler-url = http://127.0.0.1:9/\n")  # nobody there
    done = subprocess.run(
        [sys.executable, "-m", "skillsft", "run", "webshop", "--teacher", "offline",
         "--work-dir", str(tmp_path / "w"), "--scheduler-url", scheduler_url],
        env={**os.environ, "LUIGI_CONFIG_PATH": str(config)}, capture_output=True, text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
