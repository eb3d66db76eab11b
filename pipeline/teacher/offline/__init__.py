"""The offline teacher: rule-based, deterministic, no network; a smoke-test teacher.

It answers every request kind (teacher/kinds.py) from the request's offline context with the
solver listed for that kind in `SOLVERS` (solvers.py), one explicit table, so what the offline
teacher can do is visible in one place. It imports no stage: the contexts it reads are types
of the teacher layer (teacher/contexts.py). Its corpus proves the pipeline runs; it is not
training data, and is labelled as a smoke-test corpus in the run summary, report.md and the
dataset card, and refused by `publish` without `--allow-offline`.
"""

from skillsft.pipeline.teacher.offline.solvers import SOLVERS, OfflineSolver
from skillsft.pipeline.teacher.offline.teacher import (
    OFFLINE_MODEL,
    OfflineTeacher,
    make_offline_teacher,
    solve,
)

__all__ = ["OFFLINE_MODEL", "OfflineSolver", "OfflineTeacher", "SOLVERS", "make_offline_teacher",
           "solve"]
