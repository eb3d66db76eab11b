"""A fourth environment is one new module: registering it makes `skillsft run` work end to end.

tests/envs/lockroom.py describes a toy environment exactly as pipeline/envs/alfworld.py
describes ALFWorld (its own categories, action semantics, prompt profile, layout, post-checks,
dump signs, and a choice of rollout parser). Nothing in pipeline/stages, tasks or skillsft knows
its name; the only step is one entry in the registry. The run below is the real command line
(parse -> memories -> aggregate -> distill -> flatten -> report, Luigi with the local scheduler,
the offline teacher).
"""

import json
from pathlib import Path

import pytest

from skillsft.cli import main
from skillsft.pipeline.envs import ENVS, get_env
from tests.envs import lockroom


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(ENVS, lockroom.NAME, lockroom.SPEC)


def write_rollouts(root: Path) -> Path:
    """Four env folders of one episode each: three wins (key in two places), one loss."""
    for env in range(4):
        folder = root / f"env{env:03d}"
        folder.mkdir(parents=True)
        key_place = "kitchen 1" if env % 2 else "hall 1"
        (folder / "test0.txt").write_text(lockroom.rollout_text(env, key_place, win=env != 3))
    return root


def test_a_registered_environment_runs_from_rollouts_to_corpus(registered, tmp_path) -> None:
    rollouts = write_rollouts(tmp_path / "rollouts")
    work = tmp_path / "work"
    code = main(["run", lockroom.NAME, "--teacher", "offline", "--rollout-dir", str(rollouts),
                 "--work-dir", str(work)])
    assert code == 0

    processed = json.loads((work / "processed_trajectories.json").read_text())
    assert sorted(record["type"] for record in processed) == ["all_fail"] + ["all_success"] * 3
    bank = json.loads((work / "skill_bank.json").read_text())
    assert set(bank["task_specific_skills"]) <= set(lockroom.LABELS)

    corpus = json.loads((work / f"{lockroom.NAME}_sft_data.json").read_text())
    assert corpus, "no records"
    for record in corpus:  # rendered with the toy layout, never another environment's
        assert record["instruction"].startswith("You are an expert agent locked in a small house.\n"
                                                "Your task is to: unlock the door 1\n\n")
    actions = {record["output"].rsplit("<action>", 1)[1].removesuffix("</action>")
               for record in corpus}
    assert "unlock door 1 with key 1" in actions
    assert actions <= {"walk to hall 1", "walk to kitchen 1", "walk to door 1", "pick up key 1",
                       "unlock door 1 with key 1"}
    report = json.loads((work / "report.json").read_text())
    assert report["env"] == lockroom.NAME


def test_the_toy_rollouts_are_told_apart_from_the_other_environments(registered, tmp_path,
                                                                   capsys):
    """Its dump signs join the others': an ALFWorld command pointed at Lockroom files stops
    before any teacher call and names the command that fits."""
    rollouts = write_rollouts(tmp_path / "rollouts")
    code = main(["parse", "alfworld", "--rollout-dir", str(rollouts),
                 "--output", str(tmp_path / "p.json")])
    assert code == 2
    assert "looks like a Lockroom dump, not ALFWorld" in capsys.readouterr().err


def test_unregistered_names_are_still_refused() -> None:
    with pytest.raises(ValueError, match="expected one of"):
        get_env(lockroom.NAME)
