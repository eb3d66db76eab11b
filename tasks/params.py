"""Parameter groups shared by the stage tasks.

Tasks inherit the groups they need; `Task.clone(Other)` then passes every shared value down
the graph, so the top-level run task and a single-stage call build the very same tasks.
Each stage fingerprints only the parameters that shape its own output (`shaping_params` on
the task): where or how fast to work (work dir, paths, concurrency) never invalidates paid work,
and input files count by content, not by path.
"""

from pathlib import Path
from typing import Any

import luigi

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.stages.outcome import DEFAULT_MAX_FAILURE_RATE

SELECTION = ("min_trajs_per_env", "n_trajs_per_env", "n_success_envs", "n_fail_envs",
             "include_mixed", "label_min_outcomes", "failure_ratio", "source_ranges")
RENDERING = ("history", "seed", "keep_information")
SKILL_SELECTION = ("skills", "top_k_skills", "skill_threshold", "max_block_chars",
                   "embedding_model")


class EnvParameter(luigi.Parameter):
    """An environment name, checked against the registry (pipeline/envs) when a task is built,
    not when this module is imported: an environment registered later is accepted, and a wrong
    name fails with the list of valid ones."""

    def normalize(self, x: Any) -> str:
        return get_env(str(x)).name


class EnvParams:
    env = EnvParameter()
    work_dir = luigi.Parameter()


class SelectionParams:
    rollout_dir = luigi.Parameter(default="")
    min_trajs_per_env = luigi.IntParameter(default=3)
    n_trajs_per_env = luigi.IntParameter(default=3)
    n_success_envs = luigi.IntParameter(default=70)
    n_fail_envs = luigi.IntParameter(default=30)
    include_mixed = luigi.BoolParameter(default=False)
    label_min_outcomes = luigi.IntParameter(default=3)
    failure_ratio = luigi.FloatParameter(default=0.5)
    # Search: file-number ranges mapped to QA sources, e.g. ("1-500=nq", "501-900=hotpotqa").
    source_ranges = luigi.ListParameter(default=())


class TeacherParams:
    """Which teacher answers. The API key is deliberately not a parameter: Luigi logs
    parameters and sends them to the scheduler, so the key is read from the environment
    inside the worker only."""

    teacher = luigi.ChoiceParameter(choices=["offline", "openai"], var_type=str, default="offline")
    base_url = luigi.Parameter(default="")  # redacted: credentials never reach Luigi
    # A hash of the full base URL when it carries credentials (endpoints.url_digest): changing
    # the credential changes the fingerprint, and the worker finds the full URL by it.
    base_url_digest = luigi.Parameter(default="")
    memory_model = luigi.Parameter(default="")
    aggregate_model = luigi.Parameter(default="")
    distill_model = luigi.Parameter(default="")
    max_output_tokens = luigi.IntParameter(default=4096)
    concurrency = luigi.IntParameter(default=16, significant=False)
    max_concurrency = luigi.IntParameter(default=64, significant=False)
    # How answers are constrained, not what is asked: the journal key does not depend on it.
    response_format = luigi.Parameter(default="auto", significant=False)
    timeout = luigi.FloatParameter(default=120.0, significant=False)
    request_deadline = luigi.FloatParameter(default=0.0, significant=False)  # 0: the default
    retry_failed = luigi.IntParameter(default=2, significant=False)
    # Pace and price knobs: they change how fast and what is reported, never the output.
    rpm = luigi.IntParameter(default=0, significant=False)
    tpm = luigi.IntParameter(default=0, significant=False)
    prices = luigi.Parameter(default="", significant=False)
    # The Batch API (--batch): which stages use it, and whether to wait for it. A batch answer
    # is journaled under the same key as a live one, so these never change the output either.
    batch_stages = luigi.ListParameter(default=(), significant=False)
    batch_wait = luigi.BoolParameter(default=False, significant=False)
    batch_poll = luigi.FloatParameter(default=30.0, significant=False)
    # --max-cost: the budget and this command's spend file; --dry-run / estimate: the work dir
    # whose journal counts as free (the teacher then only prices, in a scratch work dir).
    max_cost = luigi.OptionalFloatParameter(default=None, significant=False)
    spend_id = luigi.Parameter(default="", significant=False)
    estimate_for = luigi.Parameter(default="", significant=False)
    # How many shard tasks memories and distillation are each cut into (tasks/shards.py); the
    # merged output is the same whatever the number, so it never invalidates work.
    shards = luigi.IntParameter(default=1, significant=False)


class FailureParams:
    """The share of a stage's items that may fail before the stage fails (every stage)."""

    max_failure_rate = luigi.FloatParameter(default=DEFAULT_MAX_FAILURE_RATE)


class MemoryParams(FailureParams):
    all_trajectories = luigi.BoolParameter(default=False)


class AggregateParams:
    batch_size = luigi.IntParameter(default=40)
    # How many entries each skill-bank section ends with (`N` or `N-M`, see BankShape).
    general_skills = luigi.Parameter(default="5-7")
    category_skills = luigi.Parameter(default="5-6")
    common_mistakes = luigi.Parameter(default="5")


class DistillParams:
    history = luigi.IntParameter(default=5)
    # Which skills a record's block shows (pipeline/skill_selection.py); in the fingerprint only
    # when not the default, so a default run keeps the fingerprints of earlier runs.
    skills = luigi.ChoiceParameter(choices=["category", "retrieve"], var_type=str,
                                   default="category")
    top_k_skills = luigi.IntParameter(default=6)
    skill_threshold = luigi.FloatParameter(default=0.4)
    max_block_chars = luigi.IntParameter(default=6000)
    embedding_model = luigi.Parameter(default="")
    cutoff_len = luigi.IntParameter(default=8192)  # the report's instruction-length check
    seed = luigi.IntParameter(default=0)
    keep_information = luigi.BoolParameter(default=True)


    def selection_params(self) -> dict[str, str]:
        """The skill-selection parameters, for fingerprints: only with --skills retrieve, so a
        default run keeps the fingerprints of earlier runs."""
        if self.skills == "category":
            return {}
        chosen = self.to_str_params(only_significant=True)  # type: ignore[attr-defined]
        return {k: chosen[k] for k in SKILL_SELECTION if k in chosen}

    def skill_selection(self) -> Any:
        from skillsft.pipeline.skill_selection import SkillSelection

        return SkillSelection(mode=self.skills, top_k=self.top_k_skills,
                              threshold=self.skill_threshold,
                              max_block_chars=self.max_block_chars,
                              embedding_model=self.embedding_model)

    def scorer(self) -> Any:
        """Embeddings when --embedding-model is given (journaled in the work dir), else
        lexical. An estimate sends nothing, embeddings included: it ranks lexically."""
        from skillsft.pipeline.skill_selection import EmbeddingScorer, LexicalScorer
        from skillsft.pipeline.teacher.openai.embeddings import EmbeddingClient
        from skillsft.pipeline.teacher.settings import TeacherSettings

        task: Any = self
        if self.skills != "retrieve" or not self.embedding_model or task.estimate_for:
            return LexicalScorer()
        settings = TeacherSettings.resolve(teacher="openai", base_url=task.base_url or None)
        return EmbeddingScorer(EmbeddingClient(settings, self.embedding_model,
                                               Path(task.work_dir) / "journal"))

class CardParams:
    """What the published card says beyond the data (publish)."""

    license = luigi.Parameter(default="")
    pretty_name = luigi.Parameter(default="")
    citation = luigi.Parameter(default="")  # path of a BibTeX file
    tokenizer = luigi.Parameter(default="")
    cutoff_len = luigi.IntParameter(default=8192)
