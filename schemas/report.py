"""The run report (report.json): what each stage took in, produced, rejected and why."""

from pydantic import Field

from skillsft.schemas.base import StrictModel


class StageReport(StrictModel):
    stage: str
    inputs: int = 0
    outputs: int = 0
    rejected: int = 0
    counts: dict[str, int] = Field(default_factory=dict)
    wall_seconds: float | None = None


class UsageCounts(StrictModel):
    """Teacher calls, tokens and dollars: paid by this run, and reused from the journal (paid
    by an earlier run, priced with today's table). None: a price was unknown."""

    calls_new: int = 0
    calls_from_journal: int = 0
    calls_failed: int = 0
    # Of the failed calls, those the next run will try again (teacher/failures.py).
    retryable_failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    reused_prompt_tokens: int = 0
    reused_completion_tokens: int = 0
    reused_cost_usd: float | None = None
    # Of the prompt tokens above, those the provider served from its prompt cache (billed at
    # its cached-input rate); 0 in reports written before they were counted.
    cached_prompt_tokens: int = 0
    reused_cached_prompt_tokens: int = 0

    def add(self, other: "UsageCounts") -> None:
        """Sum another usage into this one; a cost stays known only while every part's is."""
        for name in _COUNTS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in ("cost_usd", "reused_cost_usd"):
            mine, theirs = getattr(self, name), getattr(other, name)
            setattr(self, name, None if mine is None or theirs is None else mine + theirs)


_COUNTS = ("calls_new", "calls_from_journal", "calls_failed", "retryable_failures",
           "prompt_tokens", "completion_tokens", "reused_prompt_tokens",
           "reused_completion_tokens", "cached_prompt_tokens", "reused_cached_prompt_tokens")


class TeacherUsage(UsageCounts):
    """One stage's teacher usage, as its manifest recorded it."""

    stage: str
    model: str
    failures: dict[str, int] = Field(default_factory=dict)  # reason -> failed calls


# Added for stage 5 (run report and dataset card). Every field has a default so report.json
# files written before these existed still validate.


class StageDetail(StrictModel):
    """What a stage manifest says beyond its counters: used by the dataset card."""

    stage: str
    output: str
    params: dict[str, str] = Field(default_factory=dict)
    versions: dict[str, str] = Field(default_factory=dict)
    rejects: dict[str, int] = Field(default_factory=dict)  # rejects.jsonl lines by reason
    rejects_file: str | None = None  # the rejects file (in the work dir) those lines are in
    written_at: str | None = None


class ModelUsage(UsageCounts):
    """Teacher usage summed over every stage that called one model."""

    model: str
    stages: list[str] = Field(default_factory=list)


class Distribution(StrictModel):
    """Nearest-rank percentiles of a list of numbers (all zero when the list is empty)."""

    count: int = 0
    mean: float = 0.0
    min: float = 0.0
    p50: float = 0.0
    p90: float = 0.0
    p99: float = 0.0
    max: float = 0.0


class CorpusStats(StrictModel):
    records: int = 0
    trajectories: int | None = None  # None when no provenance file says which is which
    records_per_category: dict[str, int] = Field(default_factory=dict)
    trajectories_per_category: dict[str, int] = Field(default_factory=dict)
    steps_per_trajectory: Distribution = Field(default_factory=Distribution)
    instruction_chars: Distribution = Field(default_factory=Distribution)
    instruction_tokens_approx: Distribution = Field(default_factory=Distribution)
    token_approximation: str = ""
    section_share: dict[str, float] = Field(default_factory=dict)  # heading -> share of records
    records_by_source: dict[str, int] = Field(default_factory=dict)


class ConsistencyCheck(StrictModel):
    """Two numbers the run must agree on (e.g. records out of stage 4 and rows published)."""

    name: str
    expected: int
    actual: int
    ok: bool


SMOKE_TEST_NOTE = (
    "Smoke-test corpus: written by the offline (rule-based) teacher, which proves the pipeline "
    "runs; it is not training data. Re-run with an LLM teacher (--teacher openai) for a corpus "
    "to train on.")


class SkillUseReport(StrictModel):
    """How the corpus uses its skills (pipeline/stages/corpus_metrics.py says how each is
    measured)."""

    selection: str = ""  # which skills a record shows (--skills and its parameters)
    thoughts: int = 0
    thoughts_with_skills_shown: int = 0
    share_naming_a_shown_skill: float = 0.0  # the thought contains a shown skill's title
    share_overlapping_a_shown_skill: float = 0.0  # >= 3 content words shared with one skill
    block_share_mean: float = 0.0  # experience block chars / instruction chars, per record
    block_share_max: float = 0.0
    cutoff_len: int = 8192
    instruction_tokens_max: int = 0  # word-piece tokens (pipeline/formats/token_lengths.py)
    records_over_cutoff: int = 0


class RunReportDetails(StrictModel):
    """Everything stage 5 adds to a `RunReport` (kept apart so the base model stays as is)."""

    generated_at: str = ""
    stage_details: list[StageDetail] = Field(default_factory=list)
    models: list[ModelUsage] = Field(default_factory=list)
    wall_seconds_total: float = 0.0
    corpus_stats: CorpusStats = Field(default_factory=CorpusStats)
    skill_bank_sha256: str | None = None
    published_rows: dict[str, int] = Field(default_factory=dict)  # split -> rows in hub/<env>/
    checks: list[ConsistencyCheck] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    # True when the offline (rule-based) teacher wrote any of the corpus: a smoke-test corpus.
    smoke_test: bool = False
    skill_use: SkillUseReport | None = None


class RunReport(StrictModel):
    env: str
    stages: list[StageReport] = Field(default_factory=list)
    teacher: list[TeacherUsage] = Field(default_factory=list)
    corpus: dict[str, object] = Field(default_factory=dict)
    # Stage 5 additions: manifests' details, usage by model, corpus statistics, checks.
    details: RunReportDetails = Field(default_factory=RunReportDetails)
