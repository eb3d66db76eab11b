"""Selection rules through the stage: labels, thresholds, quotas, ties, search balancing."""

from collections import Counter
from pathlib import Path, PurePosixPath

import pytest
from conftest import episode_of

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.formats.rollouts.selection import (
    SelectionOptions,
    SourceRange,
    balance_by_source,
    failures_allowed,
    label_env,
    resolve_source,
)
from skillsft.pipeline.stages.parse import parse_rollouts

WIN = episode_of("put a mug in box", ["go to box 1", "put mug 1 in box 1"], won=True)
LOSS = episode_of("put a mug in box", ["look", "go to box 1", "look"], won=False)


@pytest.mark.parametrize(
    ("wins", "losses", "label"),
    [
        pytest.param(3, 0, "all_success", id="3-wins"),
        pytest.param(2, 1, "mixed", id="2-1-mixed"),
        pytest.param(3, 1, "mixed", id="3-1-mixed"),
        pytest.param(0, 3, "all_fail", id="3-losses"),
        pytest.param(1, 3, "all_fail", id="1-win-3-losses"),
        pytest.param(1, 2, "unlabelled", id="1-2"),
    ],
)
def test_label_env(wins: int, losses: int, label: str) -> None:
    assert label_env(wins, losses, SelectionOptions()) == label


def test_mixed_env_is_skipped_by_default_and_labelled_when_included(
    tmp_path: Path, write_env
) -> None:
    write_env(tmp_path, "env000", {"a.txt": WIN, "b.txt": WIN, "c.txt": LOSS})
    default = parse_rollouts(tmp_path, get_env("alfworld"), workers=1)
    assert default.records == []
    assert default.counts["envs_skipped_mixed"] == 1
    kept = parse_rollouts(
        tmp_path, get_env("alfworld"), SelectionOptions(include_mixed=True), workers=1
    )
    assert [(r.env_id, r.type, len(r.trajectories)) for r in kept.records] == [
        ("env000", "mixed", 3)
    ]


def test_env_with_too_few_files_is_skipped(tmp_path: Path, write_env) -> None:
    write_env(tmp_path, "env000", {"a.txt": WIN, "b.txt": WIN})
    write_env(tmp_path, "env001", {"a.txt": WIN, "b.txt": WIN, "c.txt": WIN})
    result = parse_rollouts(tmp_path, get_env("alfworld"), workers=1)
    assert [r.env_id for r in result.records] == ["env001"]
    assert result.counts["envs_skipped_too_few_files"] == 1
    relaxed = parse_rollouts(
        tmp_path,
        get_env("alfworld"),
        SelectionOptions(min_trajs_per_env=2, label_min_outcomes=2),
        workers=1,
    )
    assert [r.env_id for r in relaxed.records] == ["env000", "env001"]


def test_shortest_trajectories_with_ties_by_natural_file_name(tmp_path: Path, write_env) -> None:
    long_win = episode_of("t", ["a", "b", "c", "d", "e"], won=True)
    write_env(
        tmp_path,
        "env000",
        {"test10.txt": WIN, "test2.txt": WIN, "test1.txt": long_win, "test3.txt": WIN},
    )
    record = parse_rollouts(tmp_path, get_env("alfworld"), workers=1).records[0]
    firsts = [t[1].action for t in record.trajectories]
    assert firsts == ["go to box 1"] * 3  # the long one (first action "a") is not kept
    options = SelectionOptions(n_trajs_per_env=4)
    record = parse_rollouts(tmp_path, get_env("alfworld"), options, workers=1).records[0]
    assert record.trajectories[-1][1].action == "a"


def test_all_fail_env_keeps_only_failures(tmp_path: Path, write_env) -> None:
    write_env(tmp_path, "env000", {"w.txt": WIN, "x.txt": LOSS, "y.txt": LOSS, "z.txt": LOSS})
    result = parse_rollouts(tmp_path, get_env("alfworld"), workers=1)
    (record,) = result.records
    assert record.type == "all_fail"
    assert all(not any(s.reward >= 10 for s in t) for t in record.trajectories)
    assert result.counts["trajectories_off_label"] == 1


def test_quotas_keep_the_first_envs_in_natural_folder_order(tmp_path: Path, write_env) -> None:
    for env in ("env10", "env9", "env2"):
        write_env(tmp_path, env, {"a.txt": WIN, "b.txt": WIN, "c.txt": WIN})
    write_env(tmp_path, "env1", {"a.txt": LOSS, "b.txt": LOSS, "c.txt": LOSS})
    options = SelectionOptions(n_success_envs=2, n_fail_envs=0)
    result = parse_rollouts(tmp_path, get_env("alfworld"), options, workers=1)
    assert [r.env_id for r in result.records] == ["env2", "env9"]
    assert result.counts["envs_over_quota_all_success"] == 1
    assert result.counts["envs_over_quota_all_fail"] == 1


def test_search_source_from_folder_then_ranges_then_unknown() -> None:
    options = SelectionOptions(
        search_source_ranges=(SourceRange(first=100, last=199, source="popqa"),)
    )
    sources = ("nq", "hotpotqa")
    assert resolve_source(PurePosixPath("runs/HotpotQA/q_7.txt"), sources, options) == (
        "hotpotqa", "folder")
    assert resolve_source(PurePosixPath("batch/run_0150.txt"), sources, options) == (
        "popqa", "range")
    # The user's mapping replaces the default ranges: 250 is outside it, so unknown.
    assert resolve_source(PurePosixPath("batch/run_0250.txt"), sources, options) == (
        "unknown", "unknown")
    assert resolve_source(PurePosixPath("q.txt"), sources, options) == ("unknown", "unknown")


@pytest.mark.parametrize(
    ("folder", "source"),
    [
        pytest.param("2wiki", "2wikimultihopqa", id="2wiki"),
        pytest.param("2Wiki-MultiHopQA", "2wikimultihopqa", id="2Wiki-MultiHopQA"),
        pytest.param("hotpot_qa", "hotpotqa", id="hotpot_qa"),
        pytest.param("TriviaQA", "triviaqa", id="TriviaQA"),
        pytest.param("pop_qa", "popqa", id="pop_qa"),
        pytest.param("natural_questions", "nq", id="natural_questions"),
        pytest.param("MuSiQue", "musique", id="MuSiQue"),
        pytest.param("Bamboogle", "bamboogle", id="Bamboogle"),
    ],
)
def test_search_source_folder_spellings(folder: str, source: str) -> None:
    from skillsft.pipeline.formats.rollouts.kinds import QA_SOURCES

    path = PurePosixPath(f"runs/{folder}/q_7.txt")
    assert resolve_source(path, QA_SOURCES, SelectionOptions()) == (source, "folder")


@pytest.mark.parametrize(
    ("name", "source"),
    [
        pytest.param("run_0.txt", "nq", id="first-nq"),
        pytest.param("run_3609.txt", "nq", id="last-nq"),
        pytest.param("run_3610.txt", "triviaqa", id="first-triviaqa"),
        pytest.param("q_36595.txt", "2wikimultihopqa", id="first-2wiki"),
        pytest.param("q_51712.txt", "bamboogle", id="last-bamboogle"),
    ],
)
def test_search_source_default_ranges_without_user_ranges(name: str, source: str) -> None:
    path = PurePosixPath("batch") / name
    assert resolve_source(path, ("nq",), SelectionOptions()) == (source, "default_range")


def test_search_source_past_the_default_ranges_is_unknown() -> None:
    path = PurePosixPath("batch/q_51713.txt")
    assert resolve_source(path, ("nq",), SelectionOptions()) == ("unknown", "unknown")


def test_search_rules_are_counted_per_rule(tmp_path: Path, repo_root: Path) -> None:
    """A `2wiki` folder (as public search-agent data names it) is 2wikimultihopqa, not unknown."""
    import shutil

    sample = repo_root / "examples" / "rollouts" / "search"
    shutil.copytree(sample / "nq", tmp_path / "2wiki")
    shutil.copytree(sample / "batch_b", tmp_path / "batch_b")
    result = parse_rollouts(tmp_path, get_env("search"), workers=1)
    assert {r.data_source for r in result.records} == {"2wikimultihopqa", "nq"}
    assert result.counts["source_rule_folder"] == 4
    assert result.counts["source_rule_default_range"] == 2  # run_0105, run_0106: nq items
    assert "source_rule_unknown" not in result.counts
    # Failures beyond the balance are listed, not just counted: one per source here.
    skipped = sorted(r.file for r in result.rejects if r.reason == "skipped_failure_balance")
    assert len(skipped) == result.counts["questions_dropped_failure_balance"] == 2


def test_selection_skips_are_listed_as_rejects(tmp_path: Path, write_env) -> None:
    write_env(tmp_path, "env1", {"a.txt": WIN, "b.txt": WIN})
    write_env(tmp_path, "env2", {"a.txt": WIN, "b.txt": WIN, "c.txt": WIN})
    write_env(tmp_path, "env3", {"a.txt": WIN, "b.txt": WIN, "c.txt": WIN})
    write_env(tmp_path, "env4", {"a.txt": WIN, "b.txt": LOSS, "c.txt": LOSS})
    write_env(tmp_path, "env5", {"a.txt": WIN, "b.txt": WIN, "c.txt": LOSS})
    options = SelectionOptions(n_success_envs=1)
    result = parse_rollouts(tmp_path, get_env("alfworld"), options, workers=1)
    assert [r.env_id for r in result.records] == ["env2"]
    listed = {(r.file, r.reason) for r in result.rejects}
    assert listed == {("env1", "skipped_too_few_files"), ("env3", "skipped_over_quota_all_success"),
                      ("env4", "skipped_unlabelled"), ("env5", "skipped_mixed")}


def test_label_min_outcomes_labels_envs_with_fewer_outcomes(tmp_path: Path, write_env) -> None:
    write_env(tmp_path, "env1", {"a.txt": LOSS, "b.txt": LOSS, "c.txt": WIN})
    default = parse_rollouts(tmp_path, get_env("alfworld"), workers=1)
    assert default.records == [] and default.counts["envs_skipped_unlabelled"] == 1
    lowered = parse_rollouts(tmp_path, get_env("alfworld"),
                             SelectionOptions(label_min_outcomes=2), workers=1)
    assert [(r.env_id, r.type) for r in lowered.records] == [("env1", "all_fail")]


def test_one_episode_per_env_folder_labels_each_env_by_its_episode(
    tmp_path: Path, write_env
) -> None:
    write_env(tmp_path, "env1", {"test1.txt": WIN})
    write_env(tmp_path, "env2", {"test1.txt": LOSS})
    write_env(tmp_path, "env3", {"test1.txt": WIN})
    result = parse_rollouts(tmp_path, get_env("alfworld"), workers=1)
    assert [(r.env_id, r.type) for r in result.records] == [
        ("env1", "all_success"), ("env2", "all_fail"), ("env3", "all_success")]
    assert result.counts["envs_labelled_by_only_episode"] == 3
    (notice,) = result.notices
    assert "each env is labelled by its only episode" in notice


def test_one_episode_rule_only_when_every_folder_has_one(tmp_path: Path, write_env) -> None:
    write_env(tmp_path, "env1", {"test1.txt": WIN})
    write_env(tmp_path, "env2", {"a.txt": LOSS, "b.txt": LOSS, "c.txt": LOSS})
    result = parse_rollouts(tmp_path, get_env("alfworld"), workers=1)
    assert [r.env_id for r in result.records] == ["env2"]
    assert result.notices == [] and "envs_labelled_by_only_episode" not in result.counts


def test_balance_keeps_all_successes_and_first_failures_by_natural_id() -> None:
    questions = [
        ("nq/q10", "nq", False, "f10"),
        ("nq/q2", "nq", False, "f2"),
        ("nq/q1", "nq", True, "s1"),
        ("nq/q3", "nq", True, "s3"),
        ("hp/q1", "hotpotqa", False, "hf"),
    ]
    counts: Counter[str] = Counter()
    kept = balance_by_source(questions, SelectionOptions(), counts)
    assert kept == ["s1", "f2", "s3"]
    assert counts["questions_dropped_failure_balance"] == 2


def test_failures_allowed_rounds_before_flooring() -> None:
    assert failures_allowed(100, 0.29) == 29
    assert failures_allowed(3, 0.5) == 1
