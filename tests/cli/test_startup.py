"""Start-up imports only what the command needs (behaviour, not timing: bench/startup.py times it).

- `skillsft --version` and `skillsft --help` load none of openai, datasets, pyarrow, Luigi,
  huggingface_hub (checked on `sys.modules` in a fresh interpreter, as a user's shell runs it).
- A re-run with nothing to do loads neither the openai client nor datasets/pyarrow: no stage
  runs, so no teacher is made and nothing is published.
- A command's help (`run --help`) loads none of them either: the options models' flags come
  from a table that the tasks' own parameters are checked against.
- The top-level help still lists every command; a command's own help and parse are whole.
"""

import subprocess
import sys
from pathlib import Path

import pytest

from skillsft.cli import build_parser, command_named

HEAVY = ("openai", "datasets", "pyarrow", "luigi", "huggingface_hub")
COMMANDS = ("run", "estimate", "check", "parse", "memories", "aggregate", "distill", "flatten",
            "preferences", "export-skills", "publish", "report")


def loaded_by(*argv: str, heavy: tuple[str, ...] = HEAVY) -> tuple[str, list[str]]:
    """(stdout, heavy modules loaded) of `skillsft ARGV` run in a fresh interpreter."""
    probe = (
        "import sys, runpy\n"
        f"sys.argv = ['skillsft', *{list(argv)!r}]\n"
        "try:\n    runpy.run_module('skillsft', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        f"print('LOADED', ','.join(m for m in {heavy!r} if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=300)
    out, _, loaded = done.stdout.rpartition("LOADED")
    return out, [m for m in loaded.strip().split(",") if m]


@pytest.mark.parametrize("flag", ["--version", "--help"])
def test_version_and_help_import_no_heavy_package(flag: str) -> None:
    out, loaded = loaded_by(flag)
    assert loaded == [], f"skillsft {flag} imported {loaded}"
    assert out.strip()


def test_a_command_s_help_imports_no_luigi_and_no_client() -> None:
    """`run --help` needs every options model's flags, not the tasks that read them."""
    out, loaded = loaded_by("run", "--help")
    assert loaded == [], f"skillsft run --help imported {loaded}"
    assert "--history" in out and "--n-success-envs" in out


def test_the_options_table_is_what_the_tasks_read() -> None:
    """skillsft/command_options.py states, without Luigi, what the tasks' parameters declare:
    the same models under the same names in the same order, for every command."""
    from skillsft import graph
    from skillsft.command_options import COMMAND_OPTIONS
    from skillsft.evolve_cli import EVOLVE_TASKS

    tasks = {**graph.COMMAND_TASKS, "evolve": EVOLVE_TASKS}
    assert {command: list(models.items()) for command, models in COMMAND_OPTIONS.items()} == \
        {command: list(graph.options_models(*read).items()) for command, read in tasks.items()}


def test_top_level_help_lists_every_command() -> None:
    out, _ = loaded_by("--help")
    for command in COMMANDS:
        assert command in out


def test_a_command_s_help_still_shows_its_flags() -> None:
    out, _ = loaded_by("parse", "--help")
    assert "--max-file-mb" in out and "--rollout-dir" in out


def test_a_re_run_with_nothing_to_do_loads_no_teacher_client(tmp_path: Path) -> None:
    rollouts = Path(__file__).resolve().parents[2] / "examples" / "rollouts" / "alfworld"
    work = tmp_path / "w"
    run = ["run", "alfworld", "--rollout-dir", str(rollouts), "--work-dir", str(work)]
    first, _ = loaded_by(*run, "--teacher", "offline")
    assert (work / "report.json").is_file(), first
    again, loaded = loaded_by(*run, "--teacher", "offline",
                              heavy=("openai", "datasets", "pyarrow"))
    assert "nothing was recomputed" in again
    assert loaded == []


def test_the_command_s_parser_parses_like_the_whole_one() -> None:
    argv = ["parse", "alfworld", "--rollout-dir", "r", "--output", "o.json",
            "--max-file-mb", "8", "--n-fail-envs", "2"]
    assert command_named(argv) == "parse"
    assert build_parser("parse").parse_args(argv) == build_parser().parse_args(argv)
    run = ["run", "search", "--teacher", "offline", "--history", "3"]
    assert build_parser("estimate").parse_args(["estimate", *run[1:]]) == \
        build_parser().parse_args(["estimate", *run[1:]])
