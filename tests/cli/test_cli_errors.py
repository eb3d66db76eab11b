"""What a user sees when a command cannot work: one or two lines, the right exit status, a hint.

Every case runs the real `skillsft` command in a subprocess, as a user's shell would.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from skillsft import __version__
from skillsft.testing.stage_responder import stage_responder
from tests.support.fixtures import TEST_API_KEY


def skillsft(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None):
    environ = {k: v for k, v in os.environ.items()
               if k not in {"ROLLOUT_DIR", "WORK_DIR", "OPENAI_API_KEY", "SKILLSFT_TEACHER"}}
    return subprocess.run([sys.executable, "-m", "skillsft", *args], capture_output=True,
                          text=True, env={**environ, **(env or {})}, cwd=cwd, timeout=600)


def error_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["run", "alfworld", "--conc", "4"], "did you mean --concurrency?"),
        (["run", "alfworld", "--hisotry", "3"], "did you mean --history?"),
        (["rn", "alfworld"], "did you mean run?"),
        (["run", "alfwrld"], "did you mean alfworld?"),
        (["run", "alfworld", "--concurrency", "0"], "--concurrency: must be at least 1, got 0"),
        (["run", "alfworld", "--concurrency", "many"], "--concurrency: must be a whole number"),
        (["run", "alfworld", "--max-failure-rate", "2"], "must be between 0 and 1, got 2"),
        (["run", "alfworld", "--validation-fraction", "1.5"], "must be at least 0 and below 1"),
        (["publish", "--work-dir", "w", "--validation-fraction", "1"], "below 1, got 1"),
        (["run", "alfworld", "--workers", "0"], "--workers: must be at least 1"),
        (["run", "search", "--failure-ratio", "-1"], "--failure-ratio: must be 0 or more"),
    ],
    ids=["prefix", "typo-flag", "typo-command", "typo-env", "zero", "not-a-number",
         "rate-above-1", "fraction-above-1", "fraction-1", "workers-0", "negative-ratio"],
)
def test_bad_flags_are_usage_errors_with_a_hint(args: list[str], expected: str) -> None:
    done = skillsft(*args)
    assert done.returncode == 2
    lines = error_lines(done)
    assert len(lines) <= 2, lines
    assert expected in lines[0]


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({"SKILLSFT_CONCURRENCY": "abc"}, "SKILLSFT_CONCURRENCY=abc: must be a valid integer"),
        ({"SKILLSFT_CONCURRENCY": "0"}, "SKILLSFT_CONCURRENCY=0: must be greater than or equal"),
        ({"SKILLSFT_TEACHER": "opneai"}, "(did you mean openai?)"),
    ],
    ids=["concurrency-text", "concurrency-zero", "teacher-typo"],
)
def test_bad_variables_are_usage_errors(tmp_path: Path, variables: dict[str, str],
                                        expected: str) -> None:
    done = skillsft("run", "alfworld", "--dry-run", "--work-dir", str(tmp_path), env=variables)
    assert done.returncode == 2
    assert expected in done.stderr
    assert "Traceback" not in done.stderr and "validation error" not in done.stderr


def test_version() -> None:
    done = skillsft("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"skillsft {__version__}"


def test_a_second_run_says_it_is_up_to_date(tmp_path: Path) -> None:
    first = skillsft("run", "webshop", "--work-dir", str(tmp_path))
    assert first.returncode == 0, first.stderr
    assert "up to date" not in first.stdout
    second = skillsft("run", "webshop", "--work-dir", str(tmp_path))
    assert second.returncode == 0
    assert "everything was up to date; nothing was recomputed" in second.stdout


def test_a_failing_stage_is_one_line_and_its_traceback_is_in_the_log(tmp_path: Path,
                                                                      server_factory) -> None:
    def broken(body):
        if "step_index in" in str(body.get("messages")):
            return "this is not JSON"
        return stage_responder(body)

    server = server_factory(responder=broken)
    args = ("run", "alfworld", "--teacher", "openai", "--base-url", server.base_url,
            "--work-dir", str(tmp_path))
    done = skillsft(*args, env={"OPENAI_API_KEY": TEST_API_KEY})
    assert done.returncode == 1
    assert "Traceback" not in done.stderr + done.stdout
    failed = [line for line in error_lines(done) if line.startswith("skillsft: distill failed:")]
    assert len(failed) == 1 and "trajectories" in failed[0], done.stderr
    logs = list((tmp_path / ".skillsft" / "logs").glob("*-run.log"))
    assert len(logs) == 1 and "Traceback" in logs[0].read_text()

    verbose = skillsft(*args, "--verbose", env={"OPENAI_API_KEY": TEST_API_KEY})
    assert verbose.returncode == 1 and "Traceback" in verbose.stderr


def test_configuration_is_checked_before_any_stage_runs(tmp_path: Path) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text('{"gpt-4o-mini": 1}')
    for args, env, expected in (
        (["--teacher", "openai"], {}, "the openai teacher needs an API key"),
        (["--teacher", "openai", "--prices", str(prices)], {"OPENAI_API_KEY": TEST_API_KEY},
         f"--prices {prices}: the price of 'gpt-4o-mini' is 1; give [input, output]"),
    ):
        done = skillsft("run", "alfworld", "--work-dir", str(tmp_path / "w"), *args, env=env)
        assert done.returncode == 2 and expected in done.stderr, done.stderr
        assert not (tmp_path / "w" / "processed_trajectories.json").exists()


def test_an_unreadable_skill_bank_fails_the_run_in_one_line(tmp_path: Path) -> None:
    bank = tmp_path / "bank.json"
    bank.write_text("not json at all")
    done = skillsft("run", "alfworld", "--work-dir", str(tmp_path / "w"), "--skill-bank", str(bank))
    assert done.returncode == 1
    assert f"skillsft: distill failed: {bank}: not valid JSON" in done.stderr
    assert "unexpected error" not in done.stderr and "Traceback" not in done.stderr


def test_only_aggregate_takes_several_inputs(tmp_path: Path) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text("[]")
    second.write_text("[]")
    done = skillsft("flatten", "alfworld", "--input", str(first), "--input", str(second),
                    "--output", str(tmp_path / "out.json"))
    assert done.returncode == 2
    assert "flatten reads one --input file, got 2" in done.stderr
