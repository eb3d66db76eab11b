"""`--scheduler-url`: the same run through a real central scheduler (luigid) instead of the
local one, with two workers."""

import urllib.request
from pathlib import Path

from skillsft.cli import main


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
