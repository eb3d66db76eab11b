"""Selection rules through the stage: labels, thresholds, quotas, ties, search balancing."""

from collections import Counter
from pathlib import Path, PurePosixPath

import pytest
from conftest import episode_of

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.parse import parse_rollouts
from skillsft.pipeline.selection import (
    SelectionOptions,
    SourceRange,
    balance_by_source,
    failures_allowed,
    label_env,
    resolve_source,
)

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
    default = parse_rollouts(get_env("alfworld"), tmp_path, workers=1)
    assert default.records == []
    assert default.counts["envs_skipped_mixed"] == 1
    kept = parse_rollouts(
        get_env("alfworld"), tmp_path, SelectionOptions(include_mixed=True), workers=1
    )
    assert [(r.env_id, r.type, len(r.trajectories)) for r in kept.records] == [
        ("env000", "mixed", 3)
    ]


def test_env_with_too_few_files_is_skipped(tmp_path: Path, write_env) -> None:
    write_env(tmp_path, "env000", {"a.txt": WIN, "b.txt": WIN})
    write_env(tmp_path, "env001", {"a.txt": WIN, "b.txt": WIN, "c.txt": WIN})
    result = parse_rollouts(get_env("alfworld"), tmp_path, workers=1)
    assert [r.env_id for r in result.records] == ["env001"]
    assert result.counts["envs_skipped_too_few_files"] == 1
    relaxed = parse_rollouts(
        get_env("alfworld"),
        tmp_path,
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
    record = parse_rollouts(get_env("alfworld"), tmp_path, workers=1).records[0]
    firsts = [t[1].action for t in record.trajectories]
    assert firsts == ["go to box 1"] * 3  # the long one (first action "a") is not kept
    options = SelectionOptions(n_trajs_per_env=4)
    record = parse_rollouts(get_env("alfworld"), tmp_path, options, workers=1).records[0]
    assert record.trajectories[-1][1].action == "a"


def test_all_fail_env_keeps_only_failures(tmp_path: Path, write_env) -> None:
    write_env(tmp_path, "env000", {"w.txt": WIN, "x.txt": LOSS, "y.txt": LOSS, "z.txt": LOSS})
    result = parse_rollouts(get_env("alfworld"), tmp_path, workers=1)
    (record,) = result.records
    assert record.type == "all_fail"
    assert all(not any(s.reward >= 10 for s in t) for t in record.trajectories)
    assert result.counts["trajectories_off_label"] == 1


def test_quotas_keep_the_first_envs_in_natural_folder_order(tmp_path: Path, write_env) -> None:
    for env in ("env10", "env9", "env2"):
        write_env(tmp_path, env, {"a.txt": WIN, "b.txt": WIN, "c.txt": WIN})
    write_env(tmp_path, "env1", {"a.txt": LOSS, "b.txt": LOSS, "c.txt": LOSS})
    options = SelectionOptions(n_success_envs=2, n_fail_envs=0)
    result = parse_rollouts(get_env("alfworld"), tmp_path, options, workers=1)
    assert [r.env_id for r in result.records] == ["env2", "env9"]
    assert result.counts["envs_over_quota_all_success"] == 1
    assert result.counts["envs_over_quota_all_fail"] == 1


def test_search_source_from_folder_then_ranges_then_unknown() -> None:
    options = SelectionOptions(
        search_source_ranges=(SourceRange(first=100, last=199, source="popqa"),)
    )
    sources = ("nq", "hotpotqa")
    assert resolve_source(PurePosixPath("runs/HotpotQA/q_7.txt"), sources, options) == "hotpotqa"
    assert resolve_source(PurePosixPath("batch/run_0150.txt"), sources, options) == "popqa"
    assert resolve_source(PurePosixPath("batch/run_0250.txt"), sources, options) == "unknown"
    assert resolve_source(PurePosixPath("q.txt"), sources, options) == "unknown"


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
