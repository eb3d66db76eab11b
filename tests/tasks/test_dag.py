"""The DAG run for real through Luigi: resume, parameter-aware targets, --force, --dry-run,
exit codes, single-stage commands chaining to the same corpus as `run`."""

import shutil
import time
from pathlib import Path

import pytest

from skillsft.cli import main
from skillsft.tasks.targets import iter_manifests
from tests.tasks.conftest import SAMPLES, manifest_times

OUTPUTS = [
    "processed_trajectories.json",
    "generated_memories.json",
    "skill_bank.json",
    "distilled_trajectories.json",
    "alfworld_sft_data.json",
    "report.json",
]


def run(*args: str) -> int:
    return main(["run", "alfworld", "--teacher", "offline", *args])


def stamps(work_dir: Path) -> dict[str, int]:
    return {name: (work_dir / name).stat().st_mtime_ns for name in OUTPUTS}


def test_run_writes_every_stage_and_a_rerun_does_nothing(tmp_path: Path) -> None:
    work = tmp_path / "w"
    assert run("--work-dir", str(work)) == 0
    for name in OUTPUTS:
        assert (work / name).is_file(), name
    assert (work / "alfworld_sft_data.jsonl").is_file()
    assert (work / "rejects.jsonl").is_file()
    before, manifests = stamps(work), manifest_times(work)
    time.sleep(0.01)
    assert run("--work-dir", str(work)) == 0
    assert stamps(work) == before
    assert manifest_times(work) == manifests


def test_changed_parameter_reruns_the_stage_and_its_dependants_only(tmp_path: Path) -> None:
    work = tmp_path / "w"
    assert run("--work-dir", str(work)) == 0
    before = stamps(work)
    assert run("--work-dir", str(work), "--history", "3") == 0
    after = stamps(work)
    unchanged = ["processed_trajectories.json", "generated_memories.json", "skill_bank.json"]
    for name in unchanged:
        assert after[name] == before[name], f"{name} was recomputed"
    for name in ["distilled_trajectories.json", "alfworld_sft_data.json", "report.json"]:
        assert after[name] != before[name], f"{name} was not recomputed"
    # and the history window really changed the corpus
    text = (work / "alfworld_sft_data.json").read_text()
    assert "Below are the most recent 4 observations" not in text
    assert "Below are the most recent 3 observations" in text


def test_selection_parameter_invalidates_from_stage_one(tmp_path: Path) -> None:
    work = tmp_path / "w"
    assert run("--work-dir", str(work)) == 0
    before = stamps(work)
    assert run("--work-dir", str(work), "--include-mixed") == 0
    after = stamps(work)
    assert all(after[name] != before[name] for name in OUTPUTS)


def test_edited_rollout_file_reruns_parsing(tmp_path: Path, sample_copy) -> None:
    rollouts = sample_copy("alfworld")
    work = tmp_path / "w"
    assert run("--work-dir", str(work), "--rollout-dir", str(rollouts)) == 0
    before = stamps(work)
    (rollouts / "env000" / "test0.txt").unlink()
    assert run("--work-dir", str(work), "--rollout-dir", str(rollouts)) == 0
    assert stamps(work)["processed_trajectories.json"] != before["processed_trajectories.json"]


def test_moving_the_work_dir_or_concurrency_is_not_a_change(tmp_path: Path) -> None:
    work = tmp_path / "w"
    assert run("--work-dir", str(work)) == 0
    moved = tmp_path / "moved"
    shutil.move(work, moved)
    before = stamps(moved)
    assert run("--work-dir", str(moved), "--concurrency", "3") == 0
    assert stamps(moved) == before


def test_knobs_that_cannot_change_the_output_invalidate_nothing(tmp_path: Path, capsys) -> None:
    """The offline teacher has no model, and a failure threshold only decides pass or fail."""
    work = tmp_path / "w"
    assert run("--work-dir", str(work)) == 0
    capsys.readouterr()
    assert run("--work-dir", str(work), "--dry-run", "--distill-model", "other",
               "--max-failure-rate", "0.3") == 0
    assert "would run" not in capsys.readouterr().out


def test_history_below_one_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exited:
        run("--work-dir", str(tmp_path / "w"), "--history", "0")
    assert exited.value.code == 2


def test_dry_run_with_force_changes_nothing_on_disk(tmp_path: Path, capsys) -> None:
    work = tmp_path / "w"
    assert run("--work-dir", str(work)) == 0
    manifests = manifest_times(work)
    capsys.readouterr()
    assert run("--work-dir", str(work), "--dry-run", "--force", "memories") == 0
    # memories, aggregate, distill, flatten, the skill document, report, RunEnv
    assert capsys.readouterr().out.count("would run") == 7
    assert manifest_times(work) == manifests
    assert run("--work-dir", str(work), "--dry-run") == 0
    assert "would run" not in capsys.readouterr().out


def test_a_second_run_on_the_same_work_dir_is_refused(tmp_path: Path, capsys) -> None:
    import fcntl

    work = tmp_path / "w"
    (work / ".skillsft").mkdir(parents=True)
    with open(work / ".skillsft" / "run.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert run("--work-dir", str(work)) == 2
    assert "another skillsft run is using" in capsys.readouterr().err
    assert run("--work-dir", str(work)) == 0


def test_flatten_with_nothing_left_fails_instead_of_writing_an_empty_corpus(
    tmp_path: Path,
) -> None:
    from skillsft.pipeline.formats import jsonio

    work = tmp_path / "w"
    assert run("--work-dir", str(work)) == 0
    conversations = jsonio.load(work / "distilled_trajectories.json")
    for conversation in conversations:  # break every turn's layout
        for turn in conversation["conversations"][::2]:
            turn["value"] = "something else"
    conversations.append({"system": "x"})  # and one that is not a conversation at all
    broken = tmp_path / "broken.json"
    broken.write_bytes(jsonio.dumps(conversations))
    out = tmp_path / "out" / "alfworld_sft_data.json"
    code = main(["flatten", "alfworld", "--input", str(broken), "--output", str(out)])
    assert code == 1 and not out.exists()
    # Its rejects are listed; no corpus .jsonl or provenance of nothing is left behind.
    assert sorted(p.name for p in out.parent.iterdir() if p.is_file()) == ["flatten_rejects.jsonl"]

    from skillsft.pipeline.formats.record_files import CONVERSATIONS, load_records

    loaded = load_records(broken, CONVERSATIONS, "flatten")
    assert len(loaded.records) == len(conversations) - 1
    assert [r.reason for r in loaded.rejects] == ["invalid_conversation"]
    assert f"record {len(conversations) - 1}" in loaded.rejects[0].detail


def test_force_recomputes_the_stage_and_dependants(tmp_path: Path) -> None:
    work = tmp_path / "w"
    assert run("--work-dir", str(work)) == 0
    before = stamps(work)
    assert run("--work-dir", str(work), "--force", "aggregate") == 0
    after = stamps(work)
    assert after["processed_trajectories.json"] == before["processed_trajectories.json"]
    assert after["generated_memories.json"] == before["generated_memories.json"]
    for name in OUTPUTS[2:]:
        assert after[name] != before[name], name


def test_dry_run_lists_what_would_run_and_runs_nothing(tmp_path: Path, capsys) -> None:
    work = tmp_path / "w"
    assert run("--work-dir", str(work), "--dry-run") == 0
    out = capsys.readouterr().out
    assert out.count("would run") == 8  # six stages, the skill document and the wrapper
    assert not work.exists() or not any(work.iterdir())
    assert run("--work-dir", str(work)) == 0
    capsys.readouterr()
    assert run("--work-dir", str(work), "--dry-run", "--history", "2") == 0
    lines = capsys.readouterr().out.splitlines()
    would = {line.split()[2] for line in lines if "would run" in line}
    assert would == {"Distill", "Flatten", "BuildReport", "RunEnv"}


def test_missing_rollout_dir_fails_at_once_with_a_message(tmp_path: Path, capsys) -> None:
    code = run("--work-dir", str(tmp_path / "w"), "--rollout-dir", str(tmp_path / "nope"))
    assert code == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "ROLLOUT_DIR" in err


def test_rollout_dir_without_rollouts_fails_at_once(tmp_path: Path, capsys) -> None:
    empty = tmp_path / "empty"
    (empty / "env000").mkdir(parents=True)
    (empty / "env000" / "notes.md").write_text("x")
    assert run("--work-dir", str(tmp_path / "w"), "--rollout-dir", str(empty)) == 2
    assert "no .txt rollout files" in capsys.readouterr().err


def test_failed_stage_gives_nonzero_exit_and_writes_no_output(tmp_path: Path) -> None:
    bad = tmp_path / "processed.json"
    bad.write_text('[{"env_id": "env1", "task": "x", "type": "all_success"}]')  # no trajectories
    code = main(["memories", "alfworld", "--teacher", "offline", "--input", str(bad),
                 "--output", str(tmp_path / "out" / "generated_memories.json")])
    assert code == 1
    assert not (tmp_path / "out" / "generated_memories.json").exists()


def test_single_stage_commands_chain_to_the_same_corpus_as_run(tmp_path: Path) -> None:
    work = tmp_path / "run"
    assert run("--work-dir", str(work)) == 0
    by_hand = tmp_path / "hand"
    steps = [
        ["parse", "alfworld", "--rollout-dir", str(SAMPLES / "alfworld"),
         "--output", str(by_hand / "processed_trajectories.json")],
        ["memories", "alfworld", "--teacher", "offline",
         "--input", str(by_hand / "processed_trajectories.json"),
         "--output", str(by_hand / "generated_memories.json")],
        ["aggregate", "alfworld", "--teacher", "offline",
         "--input", str(by_hand / "generated_memories.json"),
         "--output", str(by_hand / "skill_bank.json")],
        ["distill", "alfworld", "--teacher", "offline",
         "--input", str(by_hand / "processed_trajectories.json"),
         "--skill-bank", str(by_hand / "skill_bank.json"),
         "--output", str(by_hand / "distilled_trajectories.json")],
        ["flatten", "alfworld", "--input", str(by_hand / "distilled_trajectories.json"),
         "--output", str(by_hand / "alfworld_sft_data.json")],
    ]
    for argv in steps:
        assert main(argv) == 0, argv
    for name in OUTPUTS[:-1]:
        assert (by_hand / name).read_bytes() == (work / name).read_bytes(), name


def test_bring_your_own_skill_bank_skips_stage_two(tmp_path: Path, shared_dir: Path) -> None:
    bank = shared_dir / "data" / "skillrl-memory" / "alfworld" / "claude_style_skills.json"
    work = tmp_path / "w"
    assert run("--work-dir", str(work), "--skill-bank", str(bank)) == 0
    assert not (work / "generated_memories.json").exists()
    assert not (work / "skill_bank.json").exists()
    corpus = (work / "alfworld_sft_data.json").read_text()
    assert "Systematic Exploration" in corpus  # the released bank's first general skill


@pytest.mark.parametrize("env", ["alfworld", "webshop", "search"])
def test_every_environment_runs_offline_and_reports_consistent_counts(
    tmp_path: Path, env: str
) -> None:
    from skillsft.pipeline.formats import jsonio

    work = tmp_path / env
    assert main(["run", env, "--teacher", "offline", "--work-dir", str(work)]) == 0
    records = jsonio.load(work / f"{env}_sft_data.json")
    assert records and all(set(r) == {"instruction", "output"} for r in records)
    lines = (work / f"{env}_sft_data.jsonl").read_text().splitlines()
    assert len(lines) == len(records)
    flatten = dict(iter_manifests(work))[f"{env}_sft_data.json"]
    assert flatten["counts"]["records"] == len(records)


def test_report_and_publish_dry_run_commands_on_a_finished_run(tmp_path: Path, capsys) -> None:
    from skillsft.pipeline.formats import jsonio

    work = tmp_path / "w"
    assert run("--work-dir", str(work)) == 0
    (work / "report.json").unlink()
    assert main(["report", "--work-dir", str(work)]) == 0
    report = jsonio.load(work / "report.json")
    assert report["env"] == "alfworld"
    capsys.readouterr()
    assert main(["publish", "--work-dir", str(work), "--repo-id", "me/x", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would upload to me/x@main" in out
    assert "alfworld/train-00000-of-00001.parquet" in out and "README.md" in out
    assert main(["publish", "--work-dir", str(work)]) == 2  # neither a repo id nor --dry-run


@pytest.mark.parametrize(
    ("command", "foreign_flag"),
    # (--max-failure-rate belongs to every stage now: flatten fails over unreadable conversations)
    [("memories", "--batch-size"), ("aggregate", "--history"), ("flatten", "--seed"),
     ("distill", "--batch-size")],
)
def test_a_single_stage_refuses_flags_of_other_stages(
    tmp_path: Path, command: str, foreign_flag: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "alfworld", "--input", "x.json", "--output", str(tmp_path / "o.json"),
              foreign_flag, "3"])
    assert exited.value.code == 2


def test_outputs_do_not_depend_on_the_hash_seed(tmp_path: Path) -> None:
    """Two processes with different PYTHONHASHSEED (set and dict orders that could leak into
    offline answers or aggregation) write byte-identical files."""
    import os
    import subprocess
    import sys

    released = SAMPLES.parents[1].parent / "shared" / "data" / "skillrl-memory" / "webshop"
    outputs = {}
    for seed in ("1", "2"):
        work = tmp_path / seed
        env = {**os.environ, "PYTHONHASHSEED": seed}
        commands = [["run", "alfworld", "--teacher", "offline", "--work-dir", str(work)]]
        if released.is_dir():
            inputs = [arg for path in sorted(released.glob("generated_memories_*.json"))
                      for arg in ("--input", str(path))]
            commands.append(["aggregate", "webshop", "--teacher", "offline", *inputs,
                             "--output", str(work / "released_bank.json")])
        for command in commands:
            done = subprocess.run([sys.executable, "-m", "skillsft", *command], env=env,
                                  capture_output=True, cwd=SAMPLES.parents[1])
            assert done.returncode == 0, done.stderr[-2000:]
        outputs[seed] = {p.name: p.read_bytes() for p in sorted(work.glob("*.json"))
                         if p.name != "report.json"}  # the report carries times
    assert len(outputs["1"]) >= 5
    assert outputs["1"] == outputs["2"]
