"""Project-level promises: the README's test command is what CI runs, the library never imports
luigi, the run scripts hand over to `skillsft run <env>`."""

import os
import re
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    text = (REPO_ROOT / "README.md").read_text()
    section = text.split("## Two commands for a fresh machine", 1)[1].split("\n## ", 1)[0]
    return [line.strip() for line in section.splitlines() if line.startswith("    ")]


def test_ci_runs_exactly_the_readme_test_command() -> None:
    install_and_run, test = readme_commands()
    assert "skillsft run alfworld" in install_and_run
    assert "pytest" in test
    ci = (REPO_ROOT / ".ci" / "run").read_text().splitlines()
    assert test in ci, "the README's test command and .ci/run differ"


def test_pipeline_and_schemas_do_not_import_luigi() -> None:
    code = (
        "import sys, pkgutil, importlib\n"
        "from skillsft import pipeline, schemas\n"
        "for pkg in (pipeline, schemas):\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        importlib.import_module(m.name)\n"
        "print('luigi' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == "False"


def test_every_package_folder_is_installed_under_skillsft() -> None:
    """A package folder missing from pyproject's list would be absent from the wheel."""
    import tomllib

    tool = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(tool["packages"])
    folders = {name: Path(path) for name, path in tool["package-dir"].items()}
    found = set()
    for name, folder in folders.items():
        for init in (REPO_ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(REPO_ROOT / folder).parts
            found.add(".".join((name, *relative)))
    assert found == listed, f"not listed: {sorted(found - listed)}, stale: {sorted(listed - found)}"


def test_stage_code_never_branches_on_an_environment_name() -> None:
    pattern = re.compile(r"""(==|!=|\bin\b)\s*\(?["'](alfworld|webshop|search)["']""")
    offenders = []
    for path in (REPO_ROOT / "pipeline").rglob("*.py"):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                offenders.append(f"{path.relative_to(REPO_ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_run_scripts_hand_over_to_skillsft_run(tmp_path: Path) -> None:
    for env in ("alfworld", "webshop", "search"):
        script = REPO_ROOT / f"run_{env}.sh"
        environ = {k: v for k, v in os.environ.items() if k not in ("ROLLOUT_DIR", "WORK_DIR")}
        done = subprocess.run([str(script), "--dry-run", "--work-dir", str(tmp_path / env)],
                              capture_output=True, text=True, env=environ)
        assert done.returncode == 0, done.stderr
        sample = REPO_ROOT / "examples" / "rollouts" / env
        assert f"using the bundled sample {sample}" in done.stdout
        assert "would run" in done.stdout


def test_every_flag_of_the_cli_contract_exists(cli_contract: Path) -> None:
    """../shared/docs/CLI.md is the public interface: each flag it names must be accepted."""
    from skillsft.cli import build_parser

    contract = cli_contract.read_text()
    flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", contract))
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command").choices
    accepted = {option for sub in subparsers.values() for action in sub._actions
                for option in action.option_strings}
    assert flags and flags <= accepted, sorted(flags - accepted)
    commands = set(re.findall(r"^    skillsft (\w+)", contract, re.MULTILINE))
    assert len(commands) == 7, commands  # parse memories aggregate distill flatten publish report
    assert commands <= set(subparsers), sorted(commands - set(subparsers))


def test_a_direct_luigi_call_from_the_repo_exits_non_zero_on_failure(tmp_path: Path) -> None:
    """luigi.cfg's [retcode] section: users who drive the tasks with `luigi` get exit codes."""
    luigi_bin = Path(sys.executable).with_name("luigi")
    done = subprocess.run(
        [str(luigi_bin), "--module", "skillsft.tasks.stages", "ParseRollouts", "--env", "alfworld",
         "--work-dir", str(tmp_path / "w"), "--rollout-dir", str(tmp_path / "missing"),
         "--local-scheduler"],
        cwd=REPO_ROOT, capture_output=True, text=True,
    )
    assert done.returncode == 30, done.stderr[-1000:]  # task_failed
