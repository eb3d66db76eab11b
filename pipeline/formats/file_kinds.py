"""What kind of skillsft file a JSON document is, so a stage given the wrong one says so.

Every stage reads the output of the one before it; handing `skillsft flatten` the processed
trajectories (or `skillsft aggregate` a skill bank) is an easy slip that would otherwise end
as "every record rejected". The kinds are told apart by the keys their records carry.
"""

from dataclasses import dataclass
from typing import Any

from skillsft.pipeline.errors import InputError


@dataclass(frozen=True)
class FileKind:
    name: str  # what the file holds, as a user would say it
    made_by: str  # the command that writes it
    read_by: str  # what to do with it instead
    keys: frozenset[str]  # keys its records (or the document) all carry
    is_list: bool = True


KINDS: tuple[FileKind, ...] = (
    FileKind("processed trajectories", "skillsft parse",
             "skillsft memories or skillsft distill", frozenset({"env_id", "trajectories"})),
    FileKind("skill memories", "skillsft memories", "skillsft aggregate",
             frozenset({"memory_id", "contextual_description"})),
    FileKind("distilled conversations", "skillsft distill", "skillsft flatten",
             frozenset({"system", "conversations"})),
    FileKind("alpaca records", "skillsft flatten", "skillsft publish (it is the corpus)",
             frozenset({"instruction", "output"})),
    FileKind("a skill bank", "skillsft aggregate", "skillsft distill --skill-bank",
             frozenset({"general_skills"}), is_list=False),
)
KIND_BY_NAME = {kind.name: kind for kind in KINDS}


def identify(data: Any) -> FileKind | None:
    """The kind whose keys the document (or its first record) carries, if any."""
    first = data[0] if isinstance(data, list) and data else data
    if not isinstance(first, dict):
        return None
    for kind in KINDS:
        if kind.is_list == isinstance(data, list) and kind.keys <= first.keys():
            return kind
    return None


def check_kind(path: object, data: Any, expected: str) -> None:
    """Raise `InputError` when `data` is recognisably another kind of file than `expected`."""
    found = identify(data)
    if found is None or found.name == expected:
        return
    wanted = KIND_BY_NAME[expected]
    raise InputError(
        f"{path} is the wrong kind of file: it holds {found.name} (written by {found.made_by}), "
        f"not {expected} (written by {wanted.made_by}); give it to {found.read_by}"
    )
