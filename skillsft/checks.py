"""Pre-flight checks of the teacher endpoint, before Luigi runs any stage.

For each model a stage that is about to run will ask (once per model): the endpoint answers,
accepts the key, serves the model (preflight.check_endpoint), and the response mode it accepts
is settled (one tiny probe, journaled and kept in the work dir, skipped when already known).
`skillsft check <env>` runs only this; `run` and the single-stage commands run it first. A run
that will publish (`--repo-id`) also checks the Hub token's write access first.
"""

from collections.abc import Iterable
from pathlib import Path

import luigi

from skillsft.pipeline.workdir import WorkDir
from skillsft.tasks.teacher import TEACHER_STAGES, TeacherPlan

CHECKED_STAGES = ("memories", "aggregate", "distill")


def check_teacher(tasks: Iterable[luigi.Task]) -> list[str]:
    """Check every (endpoint, model) these tasks' teacher stages use; one line per model.
    Raises preflight.EndpointError (a ConfigError) with a one-line message on the first
    problem."""
    lines: list[str] = []
    seen: set[tuple[str, str]] = set()
    for task in tasks:
        stage = getattr(task, "stage", "")
        plan = getattr(task, "teacher", None)
        live = isinstance(plan, TeacherPlan) and plan.kind == "openai"
        if stage not in CHECKED_STAGES or not live:
            continue
        teacher_stage, _ = TEACHER_STAGES[stage]
        # Imported only when a live stage is about to run: it brings the openai client.
        from skillsft.pipeline.teacher.openai.endpoint_pool import check_endpoints
        from skillsft.pipeline.teacher.openai.teacher import OpenAITeacher

        # The live teacher, whatever layers (--batch, --max-cost) the stage adds around it:
        # they all talk to this endpoint and model.
        teacher = OpenAITeacher(plan.settings_for(stage), WorkDir(Path(task.work_dir)).journal,
                                teacher_stage)
        if (teacher.endpoint, teacher.model) in seen:
            continue
        seen.add((teacher.endpoint, teacher.model))
        key = teacher.settings.api_key
        found, taken_out = check_endpoints(teacher.endpoint,
                                           key.get_secret_value() if key else "", teacher.model)
        lines.extend(taken_out)
        batched = task.stage_name() in plan.batch_stages
        # Batch items are always asked in json_schema mode; probing would be a live request.
        mode = "json_schema (batch)" if batched else teacher.negotiate()
        listed = "listed" if found.listed else "no /models route"
        lines.append(f"{found.url} model {teacher.model}: {listed}, response mode {mode}")
    return lines


def check_publishing(tasks: Iterable[luigi.Task]) -> list[str]:
    """The Hub token and write access of a publish that is about to run (`--repo-id`), checked
    before any teacher stage pays; one line, or a ConfigError with a one-line message."""
    repos = {task.hub.repo_id for task in tasks if getattr(task, "stage", "") == "publish"
             and task.hub.repo_id}
    if not repos:
        return []
    from skillsft.pipeline.hub_access import check_hub_access  # huggingface_hub: 0.4 s

    return [check_hub_access(repo_id) for repo_id in sorted(repos)]
