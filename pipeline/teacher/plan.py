"""The teacher of a command: one resolved plan, and the teacher each stage builds from it.

The command line resolves `TeacherSettings` once (flags > environment > defaults) and hands the
stage tasks a `TeacherPlan`: those settings without the API key and with the base URL's
credentials redacted, the models per stage, and how this command runs its teacher (--batch,
--max-cost, an estimate). The plan is one Luigi parameter; the key never is (parameters are
logged and sent to the scheduler): the worker reads it from OPENAI_API_KEY / DEEPSEEK_API_KEY,
and finds a credential-bearing URL again by its digest (endpoints.hand_over).

`build_teacher` composes a stage's teacher: estimating, batched, live, offline, under a budget.
A live teacher is kept per (settings, journal, stage) for the process, so the shards a worker
runs one after another build its journal index once; whatever talks to the endpoint (clients,
pool, limits, pace, response mode) is the process's runtime (openai/runtime.py), shared by
every stage and by the pre-flight (`preflight_teacher`).
"""

import os
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from skillsft.pipeline.teacher.base import Teacher
from skillsft.pipeline.teacher.openai.endpoints import full_base_url, hand_over, redact_url
from skillsft.pipeline.teacher.settings import FIELD_VARIABLES, TeacherSettings
from skillsft.pipeline.workdir import WorkDir
from skillsft.schemas.stages import STAGES

# The teachers themselves (the openai client and its type tree, ~1 s to import) are imported
# by `build_teacher` and `preflight_teacher`, in the process that runs a teacher stage: building
# the graph, a re-run with nothing to do and `--help` never load them.
if TYPE_CHECKING:
    from skillsft.pipeline.teacher.openai.embeddings import EmbeddingClient
    from skillsft.pipeline.teacher.openai.teacher import OpenAITeacher

CHUNK_WINDOWS = 4  # with --max-cost, a live stage checks the spend every 4 x concurrency calls
# A task's stage -> (the teacher's stage name, the fingerprint name of its model).
TEACHER_STAGES: dict[str, tuple[str, str]] = {
    stage.name: (stage.teacher, stage.model) for stage in STAGES if stage.teacher}

# What identifies a teacher: the settings that decide what answers a request gets (the rest is
# pace, budget, retries). The task id holds them as settings (`TeacherPlan.identity`), the
# fingerprint as one stage sees them (`TeacherPlan.shaping`: the stage's model for the three
# model fields); both are read from this one set.
IDENTITY_SETTINGS = ("teacher", "base_url", "model", "stage_models", "default_model",
                     "temperature", "max_output_tokens")
MODEL_SETTINGS = {"model", "stage_models", "default_model"}
# Fingerprints name these only when they differ from the default (no flag sets them, and the
# fingerprints written before they counted must keep their bytes).
SHAPING_WHEN_CHANGED = {"temperature"}


class TeacherPlan(BaseModel):
    """Everything a stage's teacher needs except the secrets; the `teacher` Luigi parameter."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    settings: TeacherSettings = Field(default_factory=TeacherSettings)  # key-less, URL redacted
    # A hash of the full base URL when it carries credentials: changing the credential changes
    # the fingerprint, and the worker finds the full URL by it.
    base_url_digest: str = ""
    # The model per fingerprint name (`memory_model`, ...; openai only).
    models: dict[str, str] = Field(default_factory=dict)
    # How this command runs its teacher; never what is asked, so never in a fingerprint.
    batch_stages: tuple[str, ...] = ()
    # The stages the command was told to --force: they retry every earlier teacher failure
    # once more.
    forced_stages: tuple[str, ...] = ()
    batch_wait: bool = False
    batch_poll: float = 30.0
    max_cost: float | None = None
    spend_id: str = ""  # this command's spend file (--max-cost)
    estimate_for: str = ""  # a dry run: the work dir whose journal counts as free

    @classmethod
    def public(cls, resolved: TeacherSettings, models: Mapping[str, str],
               environ: MutableMapping[str, str], **run: Any) -> "TeacherPlan":
        """The plan of fully resolved settings, with the secrets taken out."""
        live = resolved.teacher == "openai"
        settings = resolved.model_copy(update={
            "api_key": None,
            "base_url": redact_url(resolved.endpoint()) if live else None,
        })
        return cls(settings=settings,
                   base_url_digest=hand_over(resolved.endpoint(), environ) if live else "",
                   models=dict(models) if live else {}, **run)

    def identity(self) -> dict[str, Any]:
        """What the task id holds of the plan: who answers (teacher, endpoint, models, answer
        length), not how fast or under which budget. Two processes sharing a `luigid` then
        name the same stage the same whatever their --concurrency or --max-cost, and one
        runs it (as before, when those knobs were insignificant Luigi parameters)."""
        settings = self.settings.model_dump(mode="json", include=set(IDENTITY_SETTINGS))
        return {"settings": settings, "base_url_digest": self.base_url_digest,
                "models": self.models}

    @property
    def kind(self) -> str:
        return self.settings.teacher

    def model_for(self, stage: str) -> str:
        _, model_name = TEACHER_STAGES[stage]
        return self.models.get(model_name, "")

    def shaping(self, stage: str) -> dict[str, str]:
        """What of the teacher shapes `stage`'s output, as the fingerprint spells it: the
        identity settings, with the stage's model for the model fields."""
        _, model_name = TEACHER_STAGES[stage]
        defaults = TeacherSettings()
        values = {"base_url_digest": self.base_url_digest, model_name: self.model_for(stage)}
        for name in IDENTITY_SETTINGS:
            value = getattr(self.settings, name)
            if name in MODEL_SETTINGS or (
                    name in SHAPING_WHEN_CHANGED and value == getattr(defaults, name)):
                continue
            values[name] = "" if value is None else str(value)
        return values

    def settings_for(self, stage: str, environ: Mapping[str, str] | None = None
                     ) -> TeacherSettings:
        """The full settings inside the worker: the key and the URL's credentials added back."""
        env = os.environ if environ is None else environ
        key = next((env[v] for v in FIELD_VARIABLES["api_key"] if env.get(v)), None)
        url = full_base_url(self.settings.base_url or "", self.base_url_digest, env) or None
        return self.settings.model_copy(update={
            "api_key": SecretStr(key) if key else None, "base_url": url,
            "model": self.model_for(stage) or None, "retry_forced": stage in self.forced_stages,
        })


def build_teacher(plan: TeacherPlan, stage: str, work_dir: Path) -> Teacher:
    """The teacher `stage` of the work dir asks, as the plan says (see the module doc)."""
    from skillsft.pipeline.teacher.batch.teacher import BatchOptions, BatchTeacher
    from skillsft.pipeline.teacher.budget import BudgetedTeacher, SpendFile
    from skillsft.pipeline.teacher.estimate import EstimatingTeacher
    from skillsft.pipeline.teacher.factory import batch_options_for, teacher_for
    from skillsft.pipeline.teacher.openai.teacher import OpenAITeacher

    teacher_stage, _ = TEACHER_STAGES[stage]
    settings = plan.settings_for(stage)
    if plan.estimate_for and settings.teacher == "openai":
        return EstimatingTeacher(settings, WorkDir(Path(plan.estimate_for)).journal, teacher_stage,
                                 work_dir / "estimate")
    waiting = BatchOptions(wait=plan.batch_wait, poll_seconds=plan.batch_poll)
    journal_dir = WorkDir(work_dir).journal
    batch = batch_options_for(settings, journal_dir, teacher_stage,
                              waiting if stage in plan.batch_stages else None,
                              open_batches=waiting)
    # A stage going through the Batch API (asked, or batches of an earlier run still open)
    # never reuses a live teacher.
    reused = None if batch is not None else _LIVE_TEACHERS.get(
        live_key(settings, journal_dir, teacher_stage))
    teacher = reused or teacher_for(settings, journal_dir, teacher_stage, batch)
    if isinstance(teacher, OpenAITeacher):
        _LIVE_TEACHERS[live_key(settings, journal_dir, teacher_stage)] = teacher
    if plan.max_cost is None or settings.teacher != "openai":
        return teacher
    chunk = 1 << 30 if isinstance(teacher, BatchTeacher) else CHUNK_WINDOWS * settings.concurrency
    spend = SpendFile(WorkDir(work_dir).spend_file(plan.spend_id))
    return BudgetedTeacher(teacher, budget_usd=plan.max_cost, spend=spend, chunk=chunk)


def preflight_teacher(plan: TeacherPlan, stage: str, work_dir: Path) -> "OpenAITeacher":
    """The live teacher `stage` will use, whatever layers (--batch, --max-cost) the stage adds
    around it: the pre-flight checks its endpoints and settles its response mode in the same
    runtime the stage then runs in."""
    from skillsft.pipeline.teacher.openai.teacher import OpenAITeacher

    teacher_stage, _ = TEACHER_STAGES[stage]
    settings = plan.settings_for(stage)
    journal_dir = WorkDir(work_dir).journal
    key = live_key(settings, journal_dir, teacher_stage)
    if key not in _LIVE_TEACHERS:
        _LIVE_TEACHERS[key] = OpenAITeacher(settings, journal_dir, teacher_stage)
    return _LIVE_TEACHERS[key]


# The live teachers this process made, by settings, journal and stage: the shards of one stage
# that a worker runs one after another reuse one teacher, so its journal index is built once
# and only the lines appended since are read (Luigi runs a task in the worker's own process
# when it has one worker; with several, each task has a process of its own).
_LIVE_TEACHERS: dict[tuple[str, str, str], "OpenAITeacher"] = {}


def live_key(settings: TeacherSettings, journal_dir: Path, stage: str) -> tuple[str, str, str]:
    return settings.model_dump_json(), str(journal_dir.resolve()), stage


def embedding_client(skills: Any, plan: TeacherPlan, work_dir: Path) -> "EmbeddingClient | None":
    """The embeddings a stage ranks skills by (`--skills retrieve --embedding-model M`,
    journaled in the work dir), or None: lexical ranking. An estimate sends nothing,
    embeddings included: it ranks lexically."""
    if skills.mode != "retrieve" or not skills.embedding_model or plan.estimate_for:
        return None
    from skillsft.pipeline.teacher.openai.embeddings import EmbeddingClient

    url = full_base_url(plan.settings.base_url or "", plan.base_url_digest)
    settings = TeacherSettings.resolve(teacher="openai", base_url=url or None)
    return EmbeddingClient(settings, skills.embedding_model, WorkDir(work_dir).journal)
