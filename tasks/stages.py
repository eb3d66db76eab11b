"""One thin Luigi task per stage; each reads its inputs, calls one pipeline function, returns bytes.

Graph (run): ParseRollouts -> GenerateMemories -> AggregateSkillBank -> Distill -> Flatten
-> BuildReport (-> PublishCorpus when a repo id is given), wrapped by RunEnv. With
`--skill-bank FILE` stage 2 is left out and Distill reads that file. Single-stage commands
build the same tasks with `input_paths` pointing at user files instead of upstream tasks.
"""

import sys
from pathlib import Path
from typing import Any

import luigi

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.errors import InputError
from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.formats.file_kinds import check_kind
from skillsft.pipeline.formats.records import load_trajectory_records
from skillsft.pipeline.stages.outcome import StageOutcome
from skillsft.schemas import Reject
from skillsft.tasks.base import StageOutput, StageTask, hash_file, signature_of_tree
from skillsft.tasks.params import (
    RENDERING,
    SELECTION,
    AggregateParams,
    CardParams,
    DistillParams,
    FailureParams,
    MemoryParams,
    SelectionParams,
    TeacherParams,
)
from skillsft.tasks.teacher import build_teacher, stats_to_dict


class InputFile(luigi.ExternalTask):
    """A file made outside the graph (a user's memories, skill bank, trajectories)."""

    path = luigi.Parameter()

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(self.path)


class FromInputs:
    """Mixin: read `input_paths` when given, else the output of the upstream stage task."""

    input_paths = luigi.ListParameter(default=(), significant=False)

    def upstream(self) -> luigi.Task:
        raise NotImplementedError

    def requires(self) -> Any:
        if self.input_paths:
            return [InputFile(path=p) for p in self.input_paths]
        return [self.upstream()]

    def input_files(self) -> list[Path]:
        return [Path(target.path) for target in luigi.task.flatten(self.input())]

    def external_signatures(self) -> dict[str, str]:
        return {Path(p).name + f"#{i}": hash_file(Path(p)) for i, p in enumerate(self.input_paths)}


# Rejects lines for items a stage chose not to use (selection): listed, but not failures.
SKIP_PREFIX = "skipped_"


def rejects_lines(rejects: list[Reject]) -> bytes:
    return jsonio.dumps_lines(rejects)


def memory_rejects(stage: str, source: str, failures: list[Any]) -> list[Reject]:
    """Stage 2's failures (MemoryFailure) as rejects lines naming the input file."""
    return [
        Reject(stage=stage, file=source, reason=f.reason,
               trajectory=f.env_id if f.trajectory_index < 0 else
               f"{f.env_id}/{f.trajectory_index}",
               detail=f"env {f.env_id}, trajectory {f.trajectory_index}: {f.detail}")
        for f in failures
    ]


class ShardedStage:
    """A teacher stage that, with `--shards N` > 1, merges N shard tasks (tasks/shards.py)
    instead of calling the teacher itself. Its fingerprint stays the unsharded one."""

    def requires(self) -> Any:
        from skillsft.tasks.shards import shard_tasks  # the shard tasks subclass the stages

        return shard_tasks(self) or super().requires()  # type: ignore[misc]

    def upstream_tasks(self) -> list[StageTask]:
        return [dep for dep in luigi.task.flatten(self.unsharded_requires())
                if isinstance(dep, StageTask)]

    def unsharded_requires(self) -> Any:
        return super().requires()  # type: ignore[misc]

    def sharded(self) -> bool:
        return bool(getattr(self, "shards", 1) > 1 and not hasattr(self, "shard"))


class ParseRollouts(SelectionParams, FailureParams, StageTask):
    stage = "parse"
    output_name = "processed_trajectories.json"
    shaping_params = SELECTION

    def requires(self) -> list[luigi.Task]:
        return []

    def external_signatures(self) -> dict[str, str]:
        return {"rollout_dir": signature_of_tree(Path(self.rollout_dir))}

    def compute(self) -> StageOutput:
        from skillsft.pipeline.selection import SelectionOptions, SourceRange
        from skillsft.pipeline.stages.parse import parse_rollouts

        options = SelectionOptions(
            search_source_ranges=tuple(SourceRange.parse(r) for r in self.source_ranges),
            **{name: getattr(self, name) for name in SELECTION if name != "source_ranges"},
        )
        result = parse_rollouts(get_env(self.env), Path(self.rollout_dir), options, progress=True)
        for notice in result.notices:
            print(f"skillsft: parse: {notice}", file=sys.stderr)
        files = result.counts.get("files_seen", 0)
        failed = sum(1 for r in result.rejects if not r.reason.startswith(SKIP_PREFIX))
        return StageOutput(
            payload=jsonio.dumps(result.records),
            counts={**result.counts, "inputs": files,
                    "outputs": len(result.records), "rejected": failed},
            side_files={"rejects.jsonl": rejects_lines(result.rejects)},
            outcome=StageOutcome(self.stage, self.rollout_dir, "rollout files", files, failed,
                                 len(result.records), result.rejects),
            rejects_name="rejects.jsonl",
        )


class GenerateMemories(ShardedStage, FromInputs, SelectionParams, TeacherParams, MemoryParams,
                       StageTask):
    stage = "memories"
    output_name = "generated_memories.json"
    shaping_params = ("teacher", "base_url", "base_url_digest", "memory_model",
                      "max_output_tokens",
                      "all_trajectories")

    def upstream(self) -> luigi.Task:
        return self.clone(ParseRollouts)

    def version_tags(self) -> dict[str, str]:
        from skillsft.pipeline.stages.memories import PROMPT_VERSIONS

        return {f"prompt/{k}": v for k, v in PROMPT_VERSIONS.items()}

    def compute(self) -> StageOutput:
        from skillsft.pipeline.stages.memories import MemoryOptions, generate_memories

        if self.sharded():
            from skillsft.tasks.shards import merge_memories

            return merge_memories(self)
        source = self.input_files()[0]
        records = jsonio.load(source)
        check_kind(source, records, "processed trajectories")
        if not isinstance(records, list):
            raise InputError(f"{source}: expected a JSON list of processed trajectories "
                             "(docs/formats.md, 'Processed trajectories')")
        teacher = build_teacher(self, "memory", self.memory_model)
        # The threshold is applied by StageTask.run after the rejects file is written.
        options = MemoryOptions(all_trajectories=self.all_trajectories, failure_threshold=1.0)
        # It validates each record itself (a bad one is a failure with its reason).
        result = generate_memories(records, get_env(self.env), teacher, options)
        rejects = memory_rejects(self.stage, str(source), result.failures)
        return StageOutput(
            payload=jsonio.dumps(result.memories),
            counts={**result.counts, "inputs": len(records),
                    "outputs": len(result.memories), "rejected": len(rejects)},
            teacher=[stats_to_dict(result.stats)],
            side_files={"memories_rejects.jsonl": rejects_lines(rejects)},
            outcome=StageOutcome(self.stage, str(source), "trajectories",
                                 result.counts.get("trajectories_attempted", 0), len(rejects),
                                 len(result.memories), rejects),
            rejects_name="memories_rejects.jsonl",
        )


class AggregateSkillBank(FromInputs, SelectionParams, TeacherParams, MemoryParams,
                         AggregateParams, StageTask):
    stage = "aggregate"
    output_name = "skill_bank.json"
    shaping_params = ("teacher", "base_url", "base_url_digest", "aggregate_model",
                      "max_output_tokens", "batch_size", "general_skills", "category_skills",
                      "common_mistakes")

    def upstream(self) -> luigi.Task:
        return self.clone(GenerateMemories)

    def version_tags(self) -> dict[str, str]:
        from skillsft.pipeline.stages.aggregate import PROMPT_VERSIONS

        return {f"prompt/{k}": v for k, v in PROMPT_VERSIONS.items()}

    def compute(self) -> StageOutput:
        from skillsft.pipeline.envs.prompt_profiles import BankShape, CountRange
        from skillsft.pipeline.formats.skill_bank_io import load_memory_files
        from skillsft.pipeline.stages.aggregate import (
            AggregateOptions,
            AggregationError,
            aggregate_memories,
        )

        spec = get_env(self.env)
        inputs = ", ".join(map(str, self.input_files()))
        loaded = load_memory_files(self.input_files(), spec, failure_threshold=1.0)
        outcome = StageOutcome(self.stage, inputs, "memory records",
                               loaded.counts.get("records", 0), len(loaded.rejects),
                               len(loaded.memories), loaded.rejects)
        side_files = {"aggregate_rejects.jsonl": rejects_lines(loaded.rejects)}
        if not loaded.memories:  # nothing to merge: no teacher call; StageTask.run fails it
            return StageOutput(payload=b"", side_files=side_files, outcome=outcome,
                               rejects_name="aggregate_rejects.jsonl")
        teacher = build_teacher(self, "aggregate", self.aggregate_model)
        shape = BankShape(CountRange.parse(self.general_skills),
                          CountRange.parse(self.category_skills),
                          CountRange.parse(self.common_mistakes))
        try:
            result = aggregate_memories(
                loaded.memories, spec, teacher,
                AggregateOptions(batch_size=self.batch_size, shape=shape),
            )
        except AggregationError as error:
            failed = [Reject(stage=self.stage, file=inputs, reason="teacher_error",
                             step=request_id, detail=f"aggregation call {request_id}: {message}")
                      for request_id, message in error.failed]
            side_files["aggregate_rejects.jsonl"] = rejects_lines([*loaded.rejects, *failed])
            return StageOutput(payload=b"", side_files=side_files, failure=error,
                               rejects_name="aggregate_rejects.jsonl")
        return StageOutput(
            payload=jsonio.dumps(result.bank.model_dump(mode="json", exclude_none=True)),
            counts={**loaded.counts, **result.counts, "rejected": len(loaded.rejects),
                    "inputs": loaded.counts.get("records", 0), "outputs": 1},
            teacher=[stats_to_dict(result.stats)],
            side_files=side_files,
            outcome=outcome,
            rejects_name="aggregate_rejects.jsonl",
        )


class Distill(ShardedStage, FromInputs, SelectionParams, TeacherParams, MemoryParams,
              AggregateParams, DistillParams, StageTask):
    stage = "distill"
    output_name = "distilled_trajectories.json"
    shaping_params = ("teacher", "base_url", "base_url_digest", "distill_model",
                      "max_output_tokens", *RENDERING)
    skill_bank = luigi.Parameter(default="")

    def upstream(self) -> luigi.Task:
        return self.clone(ParseRollouts)

    def unsharded_requires(self) -> list[luigi.Task]:
        return [*FromInputs.requires(self), self.bank_task()]

    def requires(self) -> list[luigi.Task]:
        return super().requires() if self.sharded() else self.unsharded_requires()

    def bank_task(self) -> luigi.Task:
        return InputFile(path=self.skill_bank) if self.skill_bank else self.clone(
            AggregateSkillBank)

    def external_signatures(self) -> dict[str, str]:
        signatures = super().external_signatures()
        if self.skill_bank:
            signatures["skill_bank"] = hash_file(Path(self.skill_bank))
        return signatures

    def version_tags(self) -> dict[str, str]:
        from skillsft.pipeline.stages.distill import PROMPT_VERSION

        return {"prompt/distill": PROMPT_VERSION}

    def fingerprinted_params(self) -> dict[str, Any]:
        return dict(sorted({**super().fingerprinted_params(), **self.selection_params()}.items()))

    def compute(self) -> StageOutput:
        from skillsft.pipeline.formats.conversations import RenderOptions
        from skillsft.pipeline.formats.skill_bank_io import load_skill_bank
        from skillsft.pipeline.stages.distill import DistillOptions, distill

        if self.sharded():
            from skillsft.tasks.shards import merge_distill

            return merge_distill(self)
        spec = get_env(self.env)
        *inputs, bank_path = self.input_files()
        loaded = load_trajectory_records(inputs[0], self.stage)
        bank = load_skill_bank(bank_path, spec)
        teacher = build_teacher(self, "distill", self.distill_model)
        options = DistillOptions(
            render=RenderOptions(history=self.history, seed=self.seed,
                                 search_information=self.keep_information),
            input_name=str(inputs[0]),
            skills=self.skill_selection(),
        )
        result = distill(loaded.records, spec, bank, teacher, options, self.scorer())
        rejects = loaded.rejects + result.failures
        attempted = result.counts.get("trajectories_attempted", 0) + len(loaded.rejects)
        return StageOutput(
            payload=jsonio.dumps(result.conversations),
            counts={**result.counts, "inputs": len(loaded.records) + len(loaded.rejects),
                    "outputs": len(result.conversations), "rejected": len(rejects)},
            teacher=[stats_to_dict(result.stats)] if result.stats else [],
            side_files={"distill_rejects.jsonl": rejects_lines(rejects)},
            outcome=StageOutcome(self.stage, str(inputs[0]), "trajectories", attempted,
                                 len(rejects), len(result.conversations), rejects),
            rejects_name="distill_rejects.jsonl",
        )


class Flatten(FromInputs, SelectionParams, TeacherParams, MemoryParams, AggregateParams,
              DistillParams, StageTask):
    stage = "flatten"
    shaping_params = ("history",)  # the records' layout; seed and information live upstream
    skill_bank = luigi.Parameter(default="")

    @property
    def output_name(self) -> str:  # type: ignore[override]
        return f"{self.env}_sft_data.json"

    def upstream(self) -> luigi.Task:
        return self.clone(Distill)

    def compute(self) -> StageOutput:
        from skillsft.pipeline.formats.conversations import RenderOptions
        from skillsft.pipeline.stages.flatten import FlattenOptions, flatten, load_conversations

        spec = get_env(self.env)
        path = self.input_files()[0]
        conversations, unreadable = load_conversations(path)
        options = FlattenOptions(
            render=RenderOptions(history=self.history, seed=self.seed,
                                 search_information=self.keep_information),
            input_name=str(path),
        )
        result = flatten(conversations, spec, options)
        result.rejects[:0] = unreadable
        # A dropped turn is listed but is the post-checks' job, not a failure of the stage.
        failed = len(unreadable) + result.counts.get("dropped_unreadable_conversation", 0)
        stem = self.output_file().stem
        provenance_name = f"{stem.removesuffix('_data')}_provenance.jsonl"
        return StageOutput(
            payload=jsonio.dumps(result.records),
            counts={**result.counts, "records": len(result.records),
                    "inputs": len(conversations) + len(unreadable),
                    "outputs": len(result.records),
                    "rejected": len(result.rejects)},  # dropped turns are rejects lines too
            side_files={
                f"{stem}.jsonl": jsonio.dumps_lines(result.records),
                provenance_name: jsonio.dumps_lines(result.provenance),
                "flatten_rejects.jsonl": rejects_lines(result.rejects),
            },
            outcome=StageOutcome(self.stage, str(path), "conversations",
                                 len(conversations) + len(unreadable), failed,
                                 len(result.records), result.rejects),
            rejects_name="flatten_rejects.jsonl",
        )


class BuildReport(Flatten):
    """report.json + report.md from every manifest; re-made whenever the corpus changes."""

    stage = "report"
    output_name = "report.json"  # type: ignore[assignment]
    shaping_params = ("cutoff_len",)
    preferences = luigi.BoolParameter(default=False)  # also preference pairs

    def requires(self) -> list[luigi.Task]:
        from skillsft.tasks.preferences import PreferencePairs, SkillDocument

        extras = [self.clone(PreferencePairs)] if self.preferences else []
        return [self.clone(Flatten), self.clone(SkillDocument), *extras]

    def compute(self) -> StageOutput:
        from skillsft.pipeline.stages.report import build_report, render_report_md
        from skillsft.tasks.preferences import PreferencePairs

        if not self.preferences:
            # Pairs an earlier run made from other settings are retired, so that neither this
            # report nor a publish presents them with this corpus (their teacher answers stay
            # in the journal: asking for them again costs nothing).
            stale = self.clone(PreferencePairs).output()
            stale.invalidate()
            Path(stale.path).unlink(missing_ok=True)
        report = build_report(Path(self.work_dir), self.env, self.cutoff_len)
        return StageOutput(
            payload=jsonio.dumps(report),
            side_files={"report.md": render_report_md(report).encode()},
        )


class RunEnv(SelectionParams, TeacherParams, MemoryParams, AggregateParams, DistillParams,
             CardParams, luigi.WrapperTask):
    """Everything for one environment: the task `skillsft run <env>` builds."""

    env = luigi.ChoiceParameter(choices=["alfworld", "webshop", "search"], var_type=str)
    work_dir = luigi.Parameter()
    skill_bank = luigi.Parameter(default="")
    repo_id = luigi.Parameter(default="")
    private = luigi.BoolParameter(default=False)
    revision = luigi.Parameter(default="")
    validation_fraction = luigi.FloatParameter(default=0.0)
    preferences = luigi.BoolParameter(default=False)
    allow_offline = luigi.BoolParameter(default=False)

    def requires(self) -> list[luigi.Task]:
        wanted: list[luigi.Task] = [self.clone(BuildReport)]
        if self.repo_id:
            from skillsft.tasks.publish import PublishCorpus

            wanted.append(self.clone(PublishCorpus))
        return wanted


SINGLE_STAGE_TASKS: dict[str, type[StageTask]] = {
    "memories": GenerateMemories,
    "aggregate": AggregateSkillBank,
    "distill": Distill,
    "flatten": Flatten,
}
