"""A stage given another stage's file says which kind it is and where it goes."""

import pytest

from skillsft.pipeline.errors import InputError
from skillsft.pipeline.formats.file_kinds import check_kind, identify

TRAJECTORIES = [{"env_id": "env0", "task": "t", "type": "all_success", "trajectories": []}]
CONVERSATIONS = [{"system": "s", "conversations": [], "extra_info": {}}]
MEMORIES = [{"memory_id": "m1", "contextual_description": "d", "tags": {}, "content": {}}]
BANK = {"general_skills": [], "task_specific_skills": {}}
ALPACA = [{"instruction": "i", "output": "o"}]


@pytest.mark.parametrize(
    ("data", "name"),
    [
        (TRAJECTORIES, "processed trajectories"),
        (CONVERSATIONS, "distilled conversations"),
        (MEMORIES, "skill memories"),
        (BANK, "a skill bank"),
        (ALPACA, "alpaca records"),
    ],
)
def test_each_kind_is_identified(data: object, name: str) -> None:
    kind = identify(data)
    assert kind is not None and kind.name == name


def test_trajectories_given_to_flatten_are_the_wrong_kind() -> None:
    with pytest.raises(InputError) as caught:
        check_kind("processed_trajectories.json", TRAJECTORIES, "distilled conversations")
    assert str(caught.value).startswith(
        "processed_trajectories.json is the wrong kind of file: it holds processed trajectories")


@pytest.mark.parametrize("data", [[], [1, 2], {"x": 1}, [{"system": "s"}]])
def test_unrecognised_documents_are_left_to_the_stage(data: object) -> None:
    check_kind("f.json", data, "distilled conversations")  # no error: records get rejects
