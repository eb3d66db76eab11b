"""The offline teacher: rule-based, deterministic, no network; a smoke-test teacher.

It answers every request kind from the request's `offline_context` with the solver listed in
`SOLVERS` below, registered explicitly here (not by the stage modules), so what the offline
teacher can do is visible in one table. Its corpus proves the pipeline runs; it is not training
data, and is labelled as a smoke-test corpus in the run summary, report.md and the dataset card,
and refused by `publish` without `--allow-offline`.
"""

from skillsft.pipeline.stages.aggregate import MISTAKES_KIND, SKILLS_KIND
from skillsft.pipeline.stages.distill import KIND as DISTILL_KIND
from skillsft.pipeline.stages.evolve.merge import MERGE_KIND
from skillsft.pipeline.stages.evolve.reflect import REFLECT_KIND
from skillsft.pipeline.stages.memories import MEMORY_KIND
from skillsft.pipeline.teacher.base import OFFLINE_SOLVERS, OfflineSolver
from skillsft.pipeline.teacher.offline.evolve import solve_merge, solve_reflect
from skillsft.pipeline.teacher.offline.memory import solve_memory
from skillsft.pipeline.teacher.offline.skills import solve_mistakes, solve_skills
from skillsft.pipeline.teacher.offline.teacher import (
    OFFLINE_MODEL,
    OfflineTeacher,
    make_offline_teacher,
    solve,
)
from skillsft.pipeline.teacher.offline.thoughts import solve_distill

SOLVERS: dict[str, OfflineSolver] = {
    MEMORY_KIND: solve_memory,
    SKILLS_KIND: solve_skills,
    MISTAKES_KIND: solve_mistakes,
    DISTILL_KIND: solve_distill,
    REFLECT_KIND: solve_reflect,  # skillsft evolve (pipeline/stages/evolve/)
    MERGE_KIND: solve_merge,
}
OFFLINE_SOLVERS.update(SOLVERS)

__all__ = ["OFFLINE_MODEL", "OfflineTeacher", "SOLVERS", "make_offline_teacher", "solve"]
