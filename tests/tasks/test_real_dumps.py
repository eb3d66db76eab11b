"""Real dumps and honest failures through the CLI and Luigi (issue 10, stage side): a one-episode
WebShop dump gives a corpus, a dump of another environment or the wrong file stops before any
teacher call, an empty or over-threshold stage fails after listing what it dropped."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from conftest import episode_of

from skillsft.cli import main
from tests.support.fixtures import TEST_API_KEY
from tests.tasks.conftest import REPO_ROOT, SAMPLES


def skillsft(*args: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess[str]:
    """The installed command in its own process: what a user sees on the terminal."""
    env = {**os.environ, "OPENAI_API_KEY": TEST_API_KEY}
    env.pop("ROLLOUT_DIR", None)
    return subprocess.run([sys.executable, "-m", "skillsft", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def lines(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_the_bundled_webshop_sample_is_real_and_gives_a_corpus(tmp_path: Path) -> None:
    work = tmp_path / "w"
    assert main(["run", "webshop", "--teacher", "offline", "--work-dir", str(work)]) == 0
    assert orjson.loads((work / "webshop_sft_data.json").read_bytes())
    parsed = orjson.loads((work / "processed_trajectories.json").read_bytes())
    assert len(parsed) == 20  # one env per folder, each labelled by its only episode
    assert sum(r["type"] == "all_success" for r in parsed) == 6


def test_run_webshop_script_on_a_one_episode_dump_gives_a_corpus(
    tmp_path: Path, shared_rollouts: Path
) -> None:
    dump = tmp_path / "dump"
    shutil.copytree(shared_rollouts / "webshop-react-sample", dump)
    work = tmp_path / "w"
    env = {**os.environ, "SKILLSFT_TEACHER": "offline", "ROLLOUT_DIR": str(dump)}
    env.pop("OPENAI_API_KEY", None)
    done = subprocess.run([str(REPO_ROOT / "run_webshop.sh"), "--work-dir", str(work)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "each env is labelled by its only episode" in done.stderr
    assert orjson.loads((work / "webshop_sft_data.json").read_bytes())
    parsed = orjson.loads((work / "processed_trajectories.json").read_bytes())
    assert len(parsed) == 40
    # env406, env416, env425 stopped at the action limit: failures, not rejected files.
    assert {"env406", "env416", "env425"} <= {r["env_id"] for r in parsed
                                              if r["type"] == "all_fail"}
    assert not (work / "rejects.jsonl").read_bytes()


@pytest.mark.parametrize(
    ("env", "folder", "expected"),
    [
        pytest.param("search", "alfworld", "looks like an ALFWorld dump, not Search-QA",
                     id="search-on-alfworld"),
        pytest.param("alfworld", "webshop", "looks like a WebShop dump, not ALFWorld",
                     id="alfworld-on-webshop"),
    ],
)
def test_a_dump_of_another_environment_stops_before_any_teacher_call(
    tmp_path: Path, openai_server, env: str, folder: str, expected: str
) -> None:
    done = skillsft("run", env, "--rollout-dir", str(SAMPLES / folder), "--work-dir",
                    str(tmp_path / "w"), "--teacher", "openai", "--base-url",
                    openai_server.base_url)
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert expected in output
    assert f"run run_{folder}.sh (or skillsft run {folder})" in output
    assert openai_server.stats.total == 0
    assert not (tmp_path / "w" / "processed_trajectories.json").exists()


def test_flatten_given_processed_trajectories_says_it_is_the_wrong_file(tmp_path: Path) -> None:
    trajectories = tmp_path / "processed_trajectories.json"
    assert main(["parse", "alfworld", "--rollout-dir", str(SAMPLES / "alfworld"),
                 "--output", str(trajectories)]) == 0
    done = skillsft("flatten", "alfworld", "--input", str(trajectories), "--output",
                    str(tmp_path / "out" / "alfworld_sft_data.json"))
    assert done.returncode != 0
    assert (f"{trajectories} is the wrong kind of file: it holds processed trajectories"
            in done.stdout + done.stderr)
    assert not (tmp_path / "out" / "alfworld_sft_data.json").exists()


def test_flatten_drops_are_listed_in_flatten_rejects(tmp_path: Path) -> None:
    work = tmp_path / "w"
    assert main(["run", "alfworld", "--teacher", "offline", "--work-dir", str(work)]) == 0
    from skillsft.tasks.targets import iter_manifests

    counts = {name: m["counts"] for name, m in iter_manifests(work)}["alfworld_sft_data.json"]
    dropped = lines(work / "flatten_rejects.jsonl")
    assert counts["dropped_action_not_admissible"] == len(dropped) > 0
    # A dropped turn is listed, but is the post-checks' job, not a failed conversation.
    assert counts["rejected"] == 0 and counts["inputs"] == counts["conversations_in"]
    for reject in dropped:
        assert reject["stage"] == "flatten" and reject["reason"] == "action_not_admissible"
        assert reject["trajectory"] and reject["step"].startswith("turn ") and reject["action"]
    report = (work / "report.md").read_text()
    assert "[flatten_rejects.jsonl](flatten_rejects.jsonl)" in report


def test_a_stage_failing_its_threshold_leaves_its_rejects_file(tmp_path: Path) -> None:
    records = orjson.loads(
        subprocess_free_parse(tmp_path, SAMPLES / "alfworld").read_bytes())
    records[0].pop("trajectories")  # 1 of 5 records unusable: 20 % > the default 10 %
    broken = tmp_path / "processed.json"
    broken.write_bytes(orjson.dumps(records))
    out = tmp_path / "out" / "generated_memories.json"
    code = main(["memories", "alfworld", "--teacher", "offline", "--input", str(broken),
                 "--output", str(out)])
    assert code == 1 and not out.exists()
    (reject,) = lines(out.parent / "memories_rejects.jsonl")
    assert reject["reason"] == "invalid_record" and reject["stage"] == "memories"
    # The same input passes when the user tolerates the loss; the rejects file stays honest.
    assert main(["memories", "alfworld", "--teacher", "offline", "--input", str(broken),
                 "--output", str(out), "--max-failure-rate", "0.25"]) == 0
    assert len(lines(out.parent / "memories_rejects.jsonl")) == 1


def subprocess_free_parse(tmp_path: Path, rollouts: Path) -> Path:
    out = tmp_path / "parsed" / "processed_trajectories.json"
    assert main(["parse", "alfworld", "--rollout-dir", str(rollouts), "--output", str(out)]) == 0
    return out


def test_parse_fails_when_every_file_is_rejected(tmp_path: Path) -> None:
    dump = tmp_path / "dump" / "env000"
    dump.mkdir(parents=True)
    for i in range(3):
        (dump / f"t{i}.txt").write_text("garbage\n")
    out = tmp_path / "out" / "processed_trajectories.json"
    done = skillsft("parse", "alfworld", "--rollout-dir", str(dump.parent), "--output", str(out))
    assert done.returncode == 1
    assert ("parse: " + str(dump.parent) + ": produced no record from 3 rollout files "
            "(most common reasons: no_step_header x3") in done.stdout + done.stderr
    assert not out.exists()
    assert [r["reason"] for r in lines(out.parent / "rejects.jsonl")][:3] == ["no_step_header"] * 3


def test_parse_fails_over_its_failure_rate(tmp_path: Path) -> None:
    rollouts = tmp_path / "rollouts"
    shutil.copytree(SAMPLES / "alfworld", rollouts)
    (rollouts / "env000" / "test0.txt").write_text("garbage\n")  # 1 of 24 files: 4 %
    out = tmp_path / "out" / "processed_trajectories.json"
    argv = ["parse", "alfworld", "--rollout-dir", str(rollouts), "--output", str(out)]
    assert main([*argv, "--max-failure-rate", "0.01"]) == 1 and not out.exists()
    assert main(argv) == 0 and out.exists()


def test_label_min_outcomes_flag_reaches_stage_one(tmp_path: Path) -> None:
    rollouts = tmp_path / "rollouts" / "env001"
    rollouts.mkdir(parents=True)
    win = episode_of("put a mug in box", ["go to box 1", "put mug 1 in box 1"], won=True)
    loss = episode_of("put a mug in box", ["look", "go to box 1", "look"], won=False)
    for name, text in (("a.txt", loss), ("b.txt", loss), ("c.txt", win)):
        (rollouts / name).write_text(text)
    out = tmp_path / "out" / "processed_trajectories.json"
    argv = ["parse", "alfworld", "--rollout-dir", str(rollouts.parent), "--output", str(out)]
    assert main(argv) == 1  # unlabelled under the default 3 outcomes: nothing selected
    assert [r["reason"] for r in lines(out.parent / "rejects.jsonl")] == ["skipped_unlabelled"]
    assert main([*argv, "--label-min-outcomes", "2"]) == 0
    assert [r["type"] for r in orjson.loads(out.read_bytes())] == ["all_fail"]


def test_failed_aggregation_calls_are_listed_in_aggregate_rejects(
    tmp_path: Path, server_factory, monkeypatch
) -> None:
    """A teacher failure fails aggregation (the bank would miss a subtree), and each failed
    call is a line of aggregate_rejects.jsonl, written although the stage failed."""
    work = tmp_path / "w"
    assert main(["run", "alfworld", "--teacher", "offline", "--work-dir", str(work)]) == 0
    broken = server_factory(p_malformed=1.0)  # every answer is not JSON, re-asks included
    monkeypatch.setenv("OPENAI_API_KEY", TEST_API_KEY)
    out = tmp_path / "agg" / "skill_bank.json"
    code = main(["aggregate", "alfworld", "--teacher", "openai", "--base-url", broken.base_url,
                 "--input", str(work / "generated_memories.json"), "--output", str(out)])
    assert code == 1 and not out.exists()
    failed = lines(out.parent / "aggregate_rejects.jsonl")
    assert failed and {r["reason"] for r in failed} == {"teacher_error"}
    assert all(r["stage"] == "aggregate" and r["step"] for r in failed)
    assert broken.stats.faults["malformed"] > 0
