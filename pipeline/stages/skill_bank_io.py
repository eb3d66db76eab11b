"""Reading stage-2 inputs users bring: memory files (ours or released) and skill banks.

Memory files are JSON lists in either nesting (schemas/memory.py unwraps the released one),
read by the one record loader (record_files.py); several files are concatenated in the order
given. A record that does not validate, or belongs to another environment, is a `Reject` naming
the file and record and why, and the rest is used; whether too many were rejected is decided
once for every stage (stages/outcome.py).
"""

from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from skillsft.pipeline.envs import EnvSpec
from skillsft.pipeline.errors import InputError
from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.formats.record_files import (
    MEMORIES,
    LoadedRecords,
    first_error,
    load_records,
)
from skillsft.schemas.memory import Memory
from skillsft.schemas.skill_bank import SkillBank

STAGE = "aggregate"


def load_memory_files(paths: Sequence[str | Path], spec: EnvSpec) -> LoadedRecords[Memory]:
    """Validated memories of `spec`'s environment from every file, duplicates (same id) once."""
    expected = spec.memory_environment_tag

    def same_environment(memory: Memory) -> tuple[str, str] | None:
        if memory.tags.environment.lower() == expected.lower():
            return None
        return "other_environment", f"tagged {memory.tags.environment!r}, expected {expected!r}"

    return load_records(paths, MEMORIES, STAGE, accept=same_environment)


def load_skill_bank(path: str | Path, spec: EnvSpec) -> SkillBank:
    """A user's skill bank (e.g. a released claude_style_skills.json), checked against the
    environment: right category key, known categories. Raises InputError naming the file."""
    data = jsonio.load(path)
    try:
        bank = SkillBank.model_validate(data)
    except ValidationError as exc:
        raise InputError(f"{path}: not a skill bank ({first_error(exc)}); see docs/formats.md, "
                         "'Skill bank'") from None
    other = ({"task_specific_skills", "query_type_skills"} - {spec.bank_category_key}).pop()
    if getattr(bank, other) is not None:
        raise InputError(f"{path}: has {other!r} but {spec.name} banks use "
                         f"{spec.bank_category_key!r}; is this the bank of another environment?")
    unknown = sorted(set(bank.category_skills()) - set(spec.categories))
    if unknown:
        raise InputError(f"{path}: unknown {spec.name} categories {unknown}; expected some of "
                         f"{list(spec.categories)}")
    return bank
