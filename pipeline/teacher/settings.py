"""Teacher configuration: one object, one precedence order.

Precedence, highest first, the same for every field:

1. explicit values (the CLI flags, passed as keyword arguments to `TeacherSettings.resolve`);
2. environment variables (table below);
3. defaults.

- `teacher`: `SKILLSFT_TEACHER`; default `openai` if a key is set, else `offline`.
- `api_key`: `OPENAI_API_KEY`, then `DEEPSEEK_API_KEY`; default none.
- `base_url`: `OPENAI_BASE_URL`, then `DEEPSEEK_BASE_URL`; default the DeepSeek API when the
  only endpoint information is DeepSeek's, else the OpenAI API. Several comma-separated URLs
  spread the requests over servers of the same model (endpoint_pool.py).
- `concurrency`: `SKILLSFT_CONCURRENCY`; default 16.
- `rate_window`: `SKILLSFT_RATE_WINDOW`; default 60 (seconds the --rpm/--tpm caps count over).
- model per stage: `MEMORY_MODEL`, `AGGREGATE_MODEL`, `DISTILL_MODEL`; default
  `deepseek-chat` on DeepSeek, else `gpt-4o-mini`.

A single `--model` flag (`model=`) overrides every stage's model. The key is a `SecretStr`:
it never appears in `repr`, logs, the announcement or any file we write.
"""

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from skillsft.pipeline.errors import ConfigError
from skillsft.pipeline.options import Opt
from skillsft.pipeline.teacher.openai.endpoints import redact_url, split_urls
from skillsft.schemas.stages import STAGES

TeacherKind = Literal["openai", "offline"]
TEACHER_CHOICES: tuple[str, ...] = get_args(TeacherKind)
# `auto` negotiates (negotiation.py); any other value forces that mode, refusals included.
ResponseFormatChoice = Literal["auto", "json_schema", "json_object_schema", "json_object", "text"]
RESPONSE_FORMAT_CHOICES: tuple[str, ...] = (
    "auto", "json_schema", "json_object_schema", "json_object", "text"
)

OPENAI_BASE_URL = "https://api.openai.com/v1"
DEEPSEEK_BASE_URL = "https://api.deepseek.com"

# Stage name -> the variable naming its model (`memory_model` -> MEMORY_MODEL), for each corpus
# stage that asks a teacher, under the name the teacher uses (`memory`) and the tasks' own.
STAGE_MODEL_VARIABLES: dict[str, str] = {
    name: stage.model.upper()
    for stage in STAGES if stage.teacher and stage.corpus
    for name in dict.fromkeys((stage.teacher, stage.name))
}

# Which environment variables feed which field, in the order they are tried.
FIELD_VARIABLES: dict[str, tuple[str, ...]] = {
    "teacher": ("SKILLSFT_TEACHER",),
    "api_key": ("OPENAI_API_KEY", "DEEPSEEK_API_KEY"),
    "base_url": ("OPENAI_BASE_URL", "DEEPSEEK_BASE_URL"),
    "concurrency": ("SKILLSFT_CONCURRENCY",),
    "rate_window": ("SKILLSFT_RATE_WINDOW",),
}


class TeacherSettings(BaseModel):
    """Everything a teacher needs; build it with `resolve` so the precedence is applied."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # A field with an `Opt` is a teacher flag (skillsft/cli.py builds them from these, as the
    # stage flags from the options models); its help says its default where it is not plain.
    teacher: Annotated[TeacherKind, Opt(
        "default: $SKILLSFT_TEACHER, else openai when an API key is set",
        choices=("offline", "openai"))] = "offline"
    base_url: Annotated[str | None, Opt(
        "default: $OPENAI_BASE_URL; repeat it (or comma-separate the variable) to spread "
        "requests over servers of the same model", kind="repeated")] = None
    api_key: SecretStr | None = None
    # One model for every stage: --model of the single-stage commands.
    model: Annotated[str | None, Opt("")] = None
    stage_models: dict[str, str] = Field(default_factory=dict)
    default_model: str = "gpt-4o-mini"
    concurrency: Annotated[int, Opt(
        "max requests in flight (default: $SKILLSFT_CONCURRENCY or 16)",
        kind="positive_int")] = Field(default=16, ge=1)  # requests in flight at the start
    max_concurrency: Annotated[int, Opt(
        "how far the in-flight limit may grow while the server keeps up (default 64; it halves "
        "on each 429)", kind="positive_int")] = Field(default=64, ge=1)
    timeout: Annotated[float, Opt(
        "per HTTP call to the teacher (default 120; a slow local server that keeps working on "
        "abandoned calls needs more)", metavar="SECONDS")] = Field(default=120.0, gt=0)
    # Retries of one call after a timeout, a dropped connection or a 5xx (429s get
    # RATE_LIMIT_ROUNDS more), made by the teacher's own loop: the client's are off.
    max_retries: int = Field(default=4, ge=0)
    reask_limit: int = Field(default=2, ge=0)
    rpm: Annotated[int | None, Opt(
        "cap on requests started per minute (by this run's processes on this machine "
        "together)", kind="positive_int")] = Field(default=None, ge=1)
    tpm: Annotated[int | None, Opt(
        "cap on tokens (prompt estimate + max output, corrected to the reported usage) per "
        "minute (by this run's processes on this machine together)",
        kind="positive_int")] = Field(default=None, ge=1)
    # The window --rpm/--tpm are counted over, in seconds; the caps are scaled to it (with 10,
    # --rpm 120 allows 20 starts in any 10 s), for providers that police bursts within a minute.
    rate_window: float = Field(default=60.0, gt=0, le=60.0)
    temperature: float = 0.3
    max_output_tokens: Annotated[int, Opt(
        "max tokens per teacher answer (default 4096)", kind="positive_int")] = Field(
        default=4096, ge=1)
    response_format: Annotated[ResponseFormatChoice, Opt(
        "how answers are constrained: auto (default) probes the server once per endpoint and "
        "model; any other value forces that mode", choices=RESPONSE_FORMAT_CHOICES)] = "auto"
    request_deadline: Annotated[float | None, Opt(
        "give a request up after this long, retries included (default: every attempt's "
        "timeout plus the backoffs; printed at the start)", metavar="SECONDS")] = Field(
        default=None, gt=0)  # None: see deadline()
    retry_failed: Annotated[int, Opt(
        "runs that call a request again after a transient failure (timeout, 5xx; default 2); "
        "--force STAGE retries every failure", kind="int", metavar="N")] = Field(
        default=2, ge=0)  # runs that retry a transient failure
    retry_forced: bool = False  # --force of the stage: retry every earlier failure once more
    price_file: Path | None = None
    price_overrides: dict[str, tuple[float, float]] = Field(default_factory=dict)
    show_progress: bool = True

    @classmethod
    def resolve(
        cls, environ: Mapping[str, str] | None = None, **explicit: object
    ) -> "TeacherSettings":
        """Apply flags > environment > defaults. `None` flags count as "not given"."""
        env = os.environ if environ is None else environ
        given = {name: value for name, value in explicit.items() if value is not None}
        values: dict[str, object] = {}
        for field_name, variables in FIELD_VARIABLES.items():
            if field_name in given:
                continue
            for variable in variables:
                if env.get(variable):
                    values[field_name] = env[variable]
                    break
        values.update(given)

        uses_deepseek = _uses_deepseek(env, values)
        if "base_url" not in values and uses_deepseek:
            values["base_url"] = DEEPSEEK_BASE_URL
        if "default_model" not in values:
            values["default_model"] = "deepseek-chat" if uses_deepseek else "gpt-4o-mini"
        if "teacher" not in values:
            values["teacher"] = "openai" if values.get("api_key") else "offline"
        stage_models = {
            stage: env[variable]
            for stage, variable in STAGE_MODEL_VARIABLES.items()
            if env.get(variable)
        }
        stage_models.update(dict(given.get("stage_models", {})))  # type: ignore[call-overload]
        values["stage_models"] = stage_models
        return cls.model_validate(values)

    def concurrency_ceiling(self) -> int:
        return max(self.concurrency, self.max_concurrency)

    def deadline(self) -> float:
        """How long one request may take, retries and waits included, before it is recorded
        as failed: every attempt's timeout plus the backoffs between them, at most."""
        if self.request_deadline is not None:
            return self.request_deadline
        return self.timeout * (self.max_retries + 1) + 30.0 * self.max_retries

    def model_for(self, stage: str) -> str:
        """The model a stage uses: --model, then the stage's variable, then the default."""
        return self.model or self.stage_models.get(stage) or self.default_model

    def endpoint(self) -> str:
        """The base URL, or several comma-separated (servers serving the same model)."""
        return self.base_url or OPENAI_BASE_URL

    def first_endpoint(self) -> str:
        """The one URL for what is not spread over servers (the Batch API, embeddings)."""
        return split_urls(self.endpoint())[0]


class MissingApiKey(ConfigError, ValueError):
    """The openai teacher was chosen without a key."""


def require_api_key(settings: TeacherSettings) -> SecretStr:
    """The key of a live teacher, or MissingApiKey saying how to give one (the one check, for
    the command line, the live teacher and the batch teacher alike)."""
    if settings.api_key is None:
        raise MissingApiKey(
            "the openai teacher needs an API key: set OPENAI_API_KEY (or DEEPSEEK_API_KEY; any "
            "non-empty value for a local server that ignores keys), or use --teacher offline")
    return settings.api_key


def _uses_deepseek(env: Mapping[str, str], values: Mapping[str, object]) -> bool:
    """True when the only endpoint information we have points at DeepSeek."""
    if values.get("base_url"):
        return "deepseek" in str(values["base_url"])
    return bool(env.get("DEEPSEEK_API_KEY") or env.get("DEEPSEEK_BASE_URL")) and not env.get(
        "OPENAI_API_KEY"
    )


def announce(
    settings: TeacherSettings, stage: str, models: Mapping[str, str] | None = None
) -> str:
    """One console line saying which teacher answers (never the key, nor credentials inside the
    base URL). `models` (stage -> model) names the models of several stages at once; without it
    the line names `stage`'s model."""
    if settings.teacher == "offline":
        why = "" if settings.api_key else " (no OPENAI_API_KEY / DEEPSEEK_API_KEY set)"
        return f"teacher for {stage}: offline, rule-based, no network{why}"
    if models and len(set(models.values())) > 1:
        named = "models " + ", ".join(f"{s} {m}" for s, m in models.items())
    else:
        named = f"model {next(iter(models.values())) if models else settings.model_for(stage)}"
    return (
        f"teacher for {stage}: openai-compatible, {named} at {redact_url(settings.endpoint())}, "
        f"concurrency {settings.concurrency} (up to {settings.concurrency_ceiling()} while the "
        f"server keeps up), each request given up after "
        f"{settings.deadline():.0f}s at most"
    )
