"""The teacher a newcomer gets without an API key: rule-based, deterministic, no network.

Each request kind is answered by its solver in `SOLVERS` (solvers.py), from the request's
offline context (the trajectory data the prompt was rendered from), which is built here, by
calling the request's recipe: a live teacher never builds it. The answer is validated against
the request's answer model exactly like a model's reply, and a missing solver, a solver error,
a context of the wrong type or an invalid answer is a recorded failure, not a crash, so one odd
trajectory cannot stop a run. Nothing is paid, so nothing is journaled.
"""

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from skillsft.pipeline.teacher.base import (
    BatchStats,
    TeacherRequest,
    TeacherResult,
)
from skillsft.pipeline.teacher.kinds import KINDS
from skillsft.pipeline.teacher.offline.solvers import SOLVERS, OfflineSolver
from skillsft.pipeline.teacher.progress import BatchTracker

log = logging.getLogger("skillsft.teacher")

OFFLINE_MODEL = "offline"


class OfflineTeacher:
    name = "offline"

    def __init__(self, *, show_progress: bool = True,
                 solvers: Mapping[str, OfflineSolver] = SOLVERS) -> None:
        self.show_progress = show_progress
        self.solvers = solvers

    def run_batch(
        self, requests: Sequence[TeacherRequest[Any]], *, stage: str
    ) -> tuple[list[TeacherResult[Any]], BatchStats]:
        tracker = BatchTracker(
            stage, OFFLINE_MODEL, len(requests), show_progress=self.show_progress
        )
        results = []
        for request in requests:
            result = solve(request, self.solvers)
            if result.ok:
                tracker.paid(OFFLINE_MODEL, 0, 0)  # a new answer, at no cost
            else:
                log.warning(
                    "offline teacher: request %s failed: %s", request.request_id, result.error
                )
            tracker.finished(result)
            results.append(result)
        return results, tracker.close()


def solve(request: TeacherRequest[Any],
          solvers: Mapping[str, OfflineSolver] = SOLVERS) -> TeacherResult[Any]:
    """Answer one request with its kind's solver, validated against the answer model."""
    solver = solvers.get(request.kind)
    if solver is None:
        known = ", ".join(sorted(solvers)) or "none registered"
        return _failure(
            request,
            "unknown_kind",
            f"no offline solver for request kind {request.kind!r} (known: {known}); "
            "add it to SOLVERS in pipeline/teacher/offline/solvers.py",
        )
    try:
        context = request.offline_context() if request.offline_context else None
        kind = KINDS.get(request.kind)
        if kind is not None and not isinstance(context, kind.context_type):
            return _failure(request, "context_error",
                            f"a {request.kind} request needs a {kind.context_type.__name__} "
                            f"context, got {type(context).__name__}")
        produced = solver(context)
    except Exception as exc:  # a solver bug must cost one request, not the run
        return _failure(request, "solver_error", f"{type(exc).__name__}: {exc}")
    try:
        data = produced.model_dump(mode="json") if isinstance(produced, BaseModel) else produced
        answer = request.answer_model.model_validate(data)
    except ValidationError as exc:
        return _failure(request, "schema", f"offline answer does not fit the schema: {exc}")
    return TeacherResult(request_id=request.request_id, answer=answer, attempts=1)


def _failure(request: TeacherRequest[Any], kind: str, detail: str) -> TeacherResult[Any]:
    return TeacherResult(request_id=request.request_id, answer=None, error=f"{kind}: {detail}")


def make_offline_teacher(settings: Any, journal_dir: Path, stage: str) -> OfflineTeacher:
    del journal_dir, stage  # nothing is paid, so nothing needs journaling
    return OfflineTeacher(show_progress=settings.show_progress)
