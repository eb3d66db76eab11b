"""Stage 1 tells a dump of another environment before parsing it (pipeline/envs/dump_kind.py)."""

from pathlib import Path

import pytest
from conftest import episode_of

from skillsft.pipeline.envs import ENVS, get_env
from skillsft.pipeline.envs.dump_kind import WrongEnvironment, check_environment
from skillsft.pipeline.stages.parse import parse_rollouts

SAMPLES = Path(__file__).resolve().parents[2] / "examples" / "rollouts"
SPECS = list(ENVS.values())


@pytest.mark.parametrize(
    ("asked", "folder", "expected"),
    [
        pytest.param("search", "alfworld", "like an ALFWorld dump, not Search-QA",
                     id="search-on-alf"),
        pytest.param("alfworld", "webshop", "like a WebShop dump, not ALFWorld",
                     id="alf-on-webshop"),
        pytest.param("webshop", "search", "like a Search-QA dump, not WebShop",
                     id="webshop-on-search"),
    ],
)
def test_a_dump_of_another_environment_is_named_with_its_command(
    asked: str, folder: str, expected: str
) -> None:
    with pytest.raises(WrongEnvironment) as caught:
        parse_rollouts(SAMPLES / folder, get_env(asked), workers=1)
    message = str(caught.value)
    assert expected in message and "\n" not in message
    assert f"run run_{folder}.sh (or skillsft run {folder})" in message


@pytest.mark.parametrize("env", sorted(ENVS))
def test_each_bundled_sample_is_recognised_as_its_own(env: str) -> None:
    check_environment(SAMPLES / env, get_env(env), SPECS)  # no error


def test_files_of_no_known_environment_are_left_to_the_parser(tmp_path: Path) -> None:
    (tmp_path / "env0").mkdir()
    (tmp_path / "env0" / "notes.txt").write_text("just some notes\n")
    check_environment(tmp_path, get_env("search"), SPECS)  # no verdict, no error
    result = parse_rollouts(tmp_path, get_env("alfworld"), workers=1)
    assert result.rejects[0].reason == "no_step_header"


def test_a_few_foreign_files_among_own_ones_are_not_a_wrong_environment(tmp_path: Path) -> None:
    (tmp_path / "env0").mkdir()
    (tmp_path / "env0" / "a.txt").write_text(episode_of("put a mug in box", ["go to box 1"],
                                                        won=True))
    (tmp_path / "env0" / "b.txt").write_text("Your question: q\n<answer>x</answer>\nReward: 1.0\n")
    check_environment(tmp_path, get_env("alfworld"), SPECS)  # its own signs are there
