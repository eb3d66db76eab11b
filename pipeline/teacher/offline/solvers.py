"""What the offline teacher can answer: one solver per request kind (teacher/kinds.py), listed
here and nowhere else. A kind missing from this table is a recorded `unknown_kind` failure,
and tests/teacher/test_teacher_layer.py checks that every kind has its solver."""

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from skillsft.pipeline.teacher.kinds import (
    AGGREGATE_MISTAKES,
    AGGREGATE_SKILLS,
    DISTILL,
    EVOLVE_MERGE,
    EVOLVE_REFLECT,
    MEMORY,
)
from skillsft.pipeline.teacher.offline.evolve import solve_merge, solve_reflect
from skillsft.pipeline.teacher.offline.memory import solve_memory
from skillsft.pipeline.teacher.offline.skills import solve_mistakes, solve_skills
from skillsft.pipeline.teacher.offline.thoughts import solve_distill

OfflineSolver = Callable[[Any], BaseModel | dict[str, Any]]

SOLVERS: dict[str, OfflineSolver] = {
    MEMORY.name: solve_memory,
    AGGREGATE_SKILLS.name: solve_skills,
    AGGREGATE_MISTAKES.name: solve_mistakes,
    DISTILL.name: solve_distill,
    EVOLVE_REFLECT.name: solve_reflect,
    EVOLVE_MERGE.name: solve_merge,
}
