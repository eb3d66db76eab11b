"""Every file a run writes follows the umask, as `open` and `mkdir` do: a group sharing a work
dir (umask 002) can read and update it, everyone can read it under umask 022. The run is the
real command against the local OpenAI-compatible server (so the teacher journal is written),
then a publish dry run (the local Hub mirror), each in a subprocess started with that umask."""

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from skillsft.testing.stage_responder import stage_responder
from tests.support.fixtures import TEST_API_KEY

REPO_ROOT = Path(__file__).resolve().parents[2]


def run(args: list[str], umask: int) -> None:
    done = subprocess.run([sys.executable, "-m", "skillsft", *args], cwd=REPO_ROOT, umask=umask,
                          env={**os.environ, "OPENAI_API_KEY": TEST_API_KEY},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


@pytest.mark.parametrize(("umask", "file_mode", "folder_mode"),
                         [(0o002, 0o664, 0o775), (0o022, 0o644, 0o755)])
def test_every_file_of_a_run_and_its_export_follows_the_umask(
        tmp_path: Path, server_factory, umask: int, file_mode: int, folder_mode: int) -> None:
    server = server_factory(responder=stage_responder)
    work = tmp_path / "w"
    run(["run", "alfworld", "--teacher", "openai", "--base-url", server.base_url,
         "--work-dir", str(work), "--preferences"], umask)
    run(["publish", "--work-dir", str(work), "--dry-run"], umask)

    modes = {path.relative_to(work).as_posix(): stat.S_IMODE(path.stat().st_mode)
             for path in [work, *work.rglob("*")] if not path.is_symlink()}
    # the journal, stage outputs, manifests and the Hub mirror are all among them
    names = set(modes)
    assert any(name.startswith("journal/") for name in names), sorted(names)
    assert "alfworld_sft_data.json" in names and "report.json" in names
    assert any(name.endswith(".manifest.json") for name in names)
    assert "hub/README.md" in names and "hub/alfworld/train-00000-of-00001.parquet" in names
    wrong = {name: oct(mode) for name, mode in modes.items()
             if mode != (folder_mode if (work / name).is_dir() else file_mode)}
    assert not wrong, f"umask {umask:03o}: {wrong}"
