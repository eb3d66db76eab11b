"""The default --shards of a command: one per worker when the scheduler is in the process (every
worker is known, and shards beyond them would run one after another, each ending in its batch's
tail), the corpus rule when a central scheduler may bring workers of other commands."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from skillsft.cli import build_parser
from skillsft.settings import shard_count

TRAJECTORIES = 2100  # the corpus rule gives 5 shards


@pytest.mark.parametrize(("flags", "expected"), [
    ([], 1),
    (["--workers", "3"], 3),
    (["--workers", "8"], 5),  # never more than the corpus rule
    (["--scheduler-url", "http://127.0.0.1:1"], 5),
    (["--scheduler-url", "http://127.0.0.1:1", "--workers", "2"], 5),
    (["--shards", "4"], 4),  # given: kept
])
def test_the_default_shard_count_follows_the_workers(flags: list[str], expected: int) -> None:
    args = build_parser().parse_args(["run", "alfworld", "--teacher", "offline", *flags])
    assert shard_count(args, TRAJECTORIES) == expected


@pytest.mark.parametrize(("config", "expected"), [
    ("[core]\nworkers = 2\n", 2),
    ("[core]\ndefault-scheduler-url = http://127.0.0.1:1\n", 5),
])
def test_the_luigi_config_counts_like_the_flags(tmp_path: Path, config: str,
                                                 expected: int) -> None:
    path = tmp_path / "luigi.cfg"
    path.write_text(config)
    code = ("from skillsft.cli import build_parser; from skillsft.settings import shard_count; "
            "print(shard_count(build_parser().parse_args(['run', 'alfworld']), "
            f"{TRAJECTORIES}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "LUIGI_CONFIG_PATH": str(path)}, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == str(expected)


def test_a_work_dir_sharded_before_is_current_for_one_worker(tmp_path: Path) -> None:
    """A finished run sharded by hand (or by the earlier default, one shard per 500
    trajectories) and re-run with one worker's default (no shards) recomputes nothing: the
    merges keep the unsharded fingerprints."""
    from skillsft.cli import main

    work = tmp_path / "w"
    flags = ["run", "alfworld", "--teacher", "offline", "--work-dir", str(work)]
    assert main([*flags, "--shards", "3"]) == 0
    assert len(list((work / "shards" / "distill").glob("part-*.json"))) == 3
    written = {path: path.stat().st_mtime_ns for path in work.rglob("*")
               if path.is_file() and "journal" not in path.parts and path.suffix != ".log"}
    assert main(flags) == 0
    after = {path: path.stat().st_mtime_ns for path in work.rglob("*")
             if path.is_file() and "journal" not in path.parts and path.suffix != ".log"}
    assert after == written
