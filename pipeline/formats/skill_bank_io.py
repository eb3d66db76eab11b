"""Reading stage-2 inputs users bring: memory files (ours or released) and skill banks.

Memory files are JSON lists in either nesting (schemas/memory.py unwraps the released one);
several files are concatenated in the order given. A record that does not validate, or belongs
to another environment, is a `Reject` naming the file and record and why, and the rest is used;
more than `failure_threshold` of rejects stops the stage with a message saying what to fix.
"""

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from skillsft.pipeline.envs import EnvSpec
from skillsft.pipeline.errors import InputError
from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.formats.file_kinds import check_kind
from skillsft.pipeline.stages.memories import check_failure_threshold
from skillsft.schemas.memory import Memory
from skillsft.schemas.reject import Reject
from skillsft.schemas.skill_bank import SkillBank

STAGE = "aggregate"


@dataclass
class LoadedMemories:
    memories: list[Memory]
    rejects: list[Reject] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    return f"{'.'.join(map(str, error['loc'])) or 'record'}: {error['msg']}"


def _reject(loaded: LoadedMemories, counts: Counter[str], path: str | Path, reason: str,
            detail: str) -> None:
    loaded.rejects.append(Reject(stage=STAGE, file=str(path), reason=reason, detail=detail))
    counts[f"rejected_{reason}"] += 1


def load_memory_files(
    paths: Sequence[str | Path], spec: EnvSpec, failure_threshold: float = 0.10
) -> LoadedMemories:
    """Validated memories of `spec`'s environment from every file, duplicates (same id) once."""
    loaded = LoadedMemories([])
    counts: Counter[str] = Counter()
    seen: set[str] = set()
    for path in paths:
        data = jsonio.load(path)
        check_kind(path, data, "skill memories")
        if not isinstance(data, list):
            raise InputError(f"{path}: expected a JSON list of memories, got "
                             f"{type(data).__name__}; pass a generated_memories*.json file")
        for position, raw in enumerate(data):
            counts["records"] += 1
            label = raw.get("origin_env_id", "?") if isinstance(raw, dict) else "?"
            where = f"record {position} (env {label})"
            try:
                memory = Memory.model_validate(raw)
            except ValidationError as exc:
                _reject(loaded, counts, path, "invalid_memory", f"{where}: {_first_error(exc)}")
                continue
            if memory.tags.environment.lower() != spec.memory_environment_tag.lower():
                _reject(loaded, counts, path, "other_environment",
                        f"{where}: tagged {memory.tags.environment!r}, expected "
                        f"{spec.memory_environment_tag!r}")
                continue
            if memory.memory_id in seen:
                counts["duplicate_memory_id"] += 1
                continue
            seen.add(memory.memory_id)
            loaded.memories.append(memory)
    counts["memories"] = len(loaded.memories)
    loaded.counts = dict(sorted(counts.items()))
    if loaded.rejects:
        check_failure_threshold(len(loaded.rejects), counts["records"], failure_threshold,
                                f"memory records in {', '.join(map(str, paths))}")
    return loaded


def load_skill_bank(path: str | Path, spec: EnvSpec) -> SkillBank:
    """A user's skill bank (e.g. a released claude_style_skills.json), checked against the
    environment: right category key, known categories. Raises InputError naming the file."""
    data = jsonio.load(path)
    try:
        bank = SkillBank.model_validate(data)
    except ValidationError as exc:
        raise InputError(f"{path}: not a skill bank ({_first_error(exc)}); see docs/formats.md, "
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
