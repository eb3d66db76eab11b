"""A rollout folder is read without trusting what is in it.

- A named pipe named like a rollout file is rejected from its stat, never opened: a writer
  blocked on the pipe's other end is still waiting after the parse.
- A symlink to /dev/zero is rejected the same way (a device), instead of being read until the
  memory runs out.
- A file larger than --max-file-mb (real sparse files: no disk used) is rejected before it is
  read; under a higher limit the same file is read (and rejected for its NUL bytes).
- Both land in rejects.jsonl with their reasons when the real `skillsft parse` runs, within a
  subprocess timeout (it would hang forever on the pipe).
- The new flag at its default leaves fingerprints and task ids as they were.
"""

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import episode_of

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.formats.rollouts.selection import SelectionOptions
from skillsft.pipeline.formats.rollouts.text import MIB
from skillsft.pipeline.options import shaping_values
from skillsft.pipeline.stages.parse import parse_rollouts
from skillsft.tasks.options_param import OptionsParameter

WIN = episode_of("put a mug in box", ["go to box 1", "put mug 1 in box 1"], won=True)
SEARCH_SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rollouts" / "search" / "nq"


def hostile_env(root: Path, write_env) -> Path:
    """env000 with three good episodes, a pipe, a link to /dev/zero and a 65 MiB sparse file."""
    folder = write_env(root, "env000", {"test0.txt": WIN, "test1.txt": WIN, "test2.txt": WIN})
    os.mkfifo(folder / "test9.txt")
    (folder / "test7.txt").symlink_to("/dev/zero")
    with open(folder / "test8.txt", "wb") as handle:
        handle.truncate(65 * MIB)
    return folder


class BlockedWriter:
    """Opens the pipe's write end, which blocks until some reader opens the other end."""

    def __init__(self, fifo: Path) -> None:
        self.fifo = fifo
        self.thread = threading.Thread(target=self._open, daemon=True)
        self.thread.start()

    def _open(self) -> None:
        with open(self.fifo, "wb"):
            pass

    def release(self) -> None:
        """Open the read end ourselves so the writer returns."""
        fd = os.open(self.fifo, os.O_RDONLY | os.O_NONBLOCK)
        self.thread.join(timeout=10)
        os.close(fd)


def test_pipes_devices_and_oversized_files_are_rejected_unread(tmp_path: Path,
                                                               write_env) -> None:
    folder = hostile_env(tmp_path, write_env)
    writer = BlockedWriter(folder / "test9.txt")
    try:
        result = parse_rollouts(tmp_path, get_env("alfworld"), workers=1)
        never_opened = writer.thread.is_alive()
    finally:
        writer.release()
    assert never_opened, "the pipe was opened for reading"
    by_file = {r.file: r for r in result.rejects}
    assert by_file["env000/test9.txt"].reason == "not_regular_file"
    assert "named pipe" in by_file["env000/test9.txt"].detail
    assert by_file["env000/test7.txt"].reason == "not_regular_file"
    assert "/dev/zero" in by_file["env000/test7.txt"].detail
    assert by_file["env000/test8.txt"].reason == "too_large"
    assert "--max-file-mb 64" in by_file["env000/test8.txt"].detail
    assert all(by_file[f"env000/test{i}.txt"].hint for i in (7, 8, 9))
    assert result.counts["rejected_not_regular_file"] == 2
    assert result.counts["rejected_too_large"] == 1
    assert result.counts["files_parsed"] == 3 and len(result.records) == 1


def test_the_size_limit_is_the_flag_s(tmp_path: Path, write_env) -> None:
    folder = write_env(tmp_path, "env000", {"test0.txt": WIN, "test1.txt": WIN,
                                            "test2.txt": WIN})
    with open(folder / "test3.txt", "wb") as handle:
        handle.truncate(2 * MIB)  # sparse: NUL bytes when read
    env = get_env("alfworld")
    tight = parse_rollouts(tmp_path, env, SelectionOptions(max_file_mb=1), workers=1)
    loose = parse_rollouts(tmp_path, env, SelectionOptions(), workers=1)
    assert [(r.file, r.reason) for r in tight.rejects] == [("env000/test3.txt", "too_large")]
    assert [(r.file, r.reason) for r in loose.rejects] == [("env000/test3.txt", "binary")]


def test_a_pipe_among_search_questions_is_rejected(tmp_path: Path) -> None:
    folder = tmp_path / "nq"
    folder.mkdir()
    samples = sorted(SEARCH_SAMPLE.glob("*.txt"))[:3]
    for sample in samples:
        (folder / sample.name).write_bytes(sample.read_bytes())
    os.mkfifo(folder / "zz_pipe.txt")
    result = parse_rollouts(tmp_path, get_env("search"), workers=1)
    failed = [(r.file, r.reason) for r in result.rejects if not r.reason.startswith("skipped_")]
    assert failed == [("nq/zz_pipe.txt", "not_regular_file")]
    assert result.counts["files_parsed"] == len(samples) == 3


def test_skillsft_parse_lists_them_in_rejects_jsonl_and_does_not_hang(
    tmp_path: Path, write_env
) -> None:
    rollouts = tmp_path / "rollouts"
    hostile_env(rollouts, write_env)
    output = tmp_path / "out" / "processed_trajectories.json"
    done = subprocess.run(
        [sys.executable, "-m", "skillsft", "parse", "alfworld", "--rollout-dir", str(rollouts),
         "--output", str(output), "--max-failure-rate", "0.9"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    rejects = (output.parent / "rejects.jsonl").read_text()
    lines = [json.loads(line) for line in rejects.splitlines()]
    reasons = {line["file"]: line["reason"] for line in lines}
    assert reasons == {"env000/test7.txt": "not_regular_file", "env000/test8.txt": "too_large",
                       "env000/test9.txt": "not_regular_file"}
    assert all(line["stage"] == "parse" and line["detail"] and line["hint"] for line in lines)


def test_the_default_limit_leaves_fingerprints_and_task_ids_alone() -> None:
    """Work dirs made before --max-file-mb existed must stay complete: at its default the field
    is in neither the fingerprint nor the task-id JSON; set to anything else, it is in both."""
    param = OptionsParameter(SelectionOptions)
    default = SelectionOptions()
    assert "max_file_mb" not in shaping_values(default)
    assert "max_file_mb" not in json.loads(param.serialize(default))
    assert param.parse(param.serialize(default)) == default
    tight = SelectionOptions(max_file_mb=8)
    assert shaping_values(tight)["max_file_mb"] == "8"
    assert json.loads(param.serialize(tight))["max_file_mb"] == 8
    assert param.parse(param.serialize(tight)) == tight


@pytest.mark.parametrize("value", ["0", "-3", "lots"])
def test_a_bad_limit_is_a_usage_error(tmp_path: Path, value: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "skillsft", "parse", "alfworld", "--rollout-dir", str(tmp_path),
         "--output", str(tmp_path / "o.json"), "--max-file-mb", value],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 2 and "--max-file-mb" in done.stderr
