"""Parameter groups shared by the stage tasks.

Tasks inherit the groups they need; `Task.clone(Other)` then passes every shared value down
the graph, so the top-level run task and a single-stage call build the very same tasks.
Each stage fingerprints only the parameters that shape its own output (`shaping_params` on
the task): where or how fast to work (work dir, paths, concurrency) never invalidates paid work,
and input files count by content, not by path.
"""

import luigi

SELECTION = ("min_trajs_per_env", "n_trajs_per_env", "n_success_envs", "n_fail_envs",
             "include_mixed", "failure_ratio", "source_ranges")
RENDERING = ("history", "seed", "keep_information")


class EnvParams:
    env = luigi.ChoiceParameter(choices=["alfworld", "webshop", "search"], var_type=str)
    work_dir = luigi.Parameter()


class SelectionParams:
    rollout_dir = luigi.Parameter(default="")
    min_trajs_per_env = luigi.IntParameter(default=3)
    n_trajs_per_env = luigi.IntParameter(default=3)
    n_success_envs = luigi.IntParameter(default=70)
    n_fail_envs = luigi.IntParameter(default=30)
    include_mixed = luigi.BoolParameter(default=False)
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


class MemoryParams:
    all_trajectories = luigi.BoolParameter(default=False)
    max_failure_rate = luigi.FloatParameter(default=0.10)


class AggregateParams:
    batch_size = luigi.IntParameter(default=40)


class DistillParams:
    history = luigi.IntParameter(default=5)
    seed = luigi.IntParameter(default=0)
    keep_information = luigi.BoolParameter(default=True)
