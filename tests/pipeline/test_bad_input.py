"""Bad files never stop a run: each becomes a reject with file, line, reason and hint."""

import os
from pathlib import Path

import pytest
from conftest import episode_of

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.errors import RolloutDirError
from skillsft.pipeline.stages.parse import parse_rollouts

WIN = episode_of("put a mug in box", ["go to box 1", "put mug 1 in box 1"], won=True)

BAD_FILES: dict[str, tuple[str | bytes, str, int | None]] = {
    "empty.txt": (b"", "empty", None),
    "blank.txt": (b"\n\n  \n", "empty", None),
    "binary.txt": (b"Step -1\n\x00\x01\x02", "binary", 2),
    "latin1.txt": (b"Step -1 | Action: None\nObs: caf\xe9\n", "not_utf8", 2),
    "notes.txt": ("meeting notes, not a rollout\n", "no_step_header", None),
    "cut.txt": (WIN[: WIN.index("Step 01")] + "Step 01 | Action: put", "bad_step_header", None),
    "garbled.txt": (WIN.replace("Obs: after go to box 1", "obs after"), "unparseable_step", None),
}


def test_each_bad_file_is_rejected_and_the_rest_is_processed(tmp_path: Path, write_env) -> None:
    files: dict[str, str | bytes] = {name: content for name, (content, _, _) in BAD_FILES.items()}
    files.update({"good1.txt": WIN, "good2.txt": WIN, "good3.txt": WIN})
    write_env(tmp_path, "env000", files)
    result = parse_rollouts(tmp_path, get_env("alfworld"), workers=1)
    by_file = {Path(r.file).name: r for r in result.rejects}
    assert set(by_file) == set(BAD_FILES)
    for name, (_, reason, line) in BAD_FILES.items():
        reject = by_file[name]
        assert reject.reason == reason, name
        assert reject.file == f"env000/{name}"
        assert reject.hint
        if line is not None:
            assert reject.line == line, name
    assert result.counts["files_seen"] == len(files)
    assert result.counts["files_parsed"] == 3
    assert sum(v for k, v in result.counts.items() if k.startswith("rejected_")) == len(BAD_FILES)
    assert len(result.records) == 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read any file")
def test_unreadable_file_is_rejected(tmp_path: Path, write_env) -> None:
    folder = write_env(tmp_path, "env000", {"a.txt": WIN, "b.txt": WIN, "c.txt": WIN, "d.txt": WIN})
    (folder / "d.txt").chmod(0)
    try:
        result = parse_rollouts(tmp_path, get_env("alfworld"), workers=1)
    finally:
        (folder / "d.txt").chmod(0o644)
    assert [(r.file, r.reason) for r in result.rejects] == [("env000/d.txt", "unreadable")]
    assert len(result.records) == 1


def test_missing_rollout_dir_says_what_was_expected(tmp_path: Path) -> None:
    with pytest.raises(RolloutDirError, match="does not exist"):
        parse_rollouts(tmp_path / "nope", get_env("webshop"))


@pytest.mark.parametrize("env", ["alfworld", "webshop", "search"])
def test_rollout_dir_without_rollouts_fails_at_once(tmp_path: Path, env: str) -> None:
    (tmp_path / "notes.md").write_text("hi")
    (tmp_path / "other").mkdir()
    with pytest.raises(RolloutDirError, match="no rollout files") as caught:
        parse_rollouts(tmp_path, get_env(env))
    assert str(tmp_path) in str(caught.value)


def test_ignored_entries_are_counted(tmp_path: Path, write_env) -> None:
    folder = write_env(tmp_path, "env000", {"a.txt": WIN, "b.txt": WIN, "c.txt": WIN})
    (folder / "notes.json").write_text("{}")
    (folder / "nested").mkdir()
    (tmp_path / "stray.txt").write_text(WIN)
    (tmp_path / "logs").mkdir()
    counts = parse_rollouts(tmp_path, get_env("alfworld"), workers=1).counts
    assert counts["ignored_non_txt"] == 1
    assert counts["ignored_other_dirs"] == 2
    assert counts["ignored_txt_outside_env_dir"] == 1
