"""One thin Luigi task per stage; each reads its inputs, calls one pipeline function, returns bytes.

Graph (run): ParseRollouts -> GenerateMemories -> AggregateSkillBank -> Distill -> Flatten
-> BuildReport (-> PublishCorpus when a repo id is given), wrapped by RunEnv. With
`--skill-bank FILE` stage 2 is left out and Distill reads that file. Single-stage commands
build the same tasks with `input_paths` pointing at user files instead of upstream tasks.
"""

from pathlib import Path
from typing import Any

import luigi

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.formats.record_files import TRAJECTORIES, load_records
from skillsft.schemas import Reject
from skillsft.tasks.base import StageOutput, StageTask, hash_file, signature_of_tree
from skillsft.tasks.params import (
    RENDERING,
    SELECTION,
    AggregateParams,
    CardParams,
    DistillParams,
    EnvParameter,
    FailureParams,
    MemoryParams,
    SelectionParams,
    TeacherParams,
)
from skillsft.tasks.shard_merge import merge_shards, shard_tasks
from skillsft.tasks.teacher import build_teacher


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


def rejects_lines(rejects: list[Reject]) -> bytes:
    return jsonio.dumps_lines(rejects)


class ShardedStage:
    """A teacher stage that, with `--shards N` > 1, merges N shard tasks (tasks/shards.py)
    instead of calling the teacher itself. Its fingerprint stays the unsharded one."""

    def requires(self) -> Any:
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
        result = parse_rollouts(Path(self.rollout_dir), get_env(self.env), options, progress=True)
        return StageOutput.of(result, jsonio.dumps(result.records), input_name=self.rollout_dir,
                              rejects_name="rejects.jsonl")


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
            return merge_shards(self, "memories_rejects.jsonl")
        source = self.input_files()[0]
        loaded = load_records(source, TRAJECTORIES, self.stage)
        teacher = build_teacher(self, "memory", self.memory_model)
        options = MemoryOptions(all_trajectories=self.all_trajectories, input_name=str(source))
        result = generate_memories(loaded.records, get_env(self.env), options, teacher)
        result.absorb_load(loaded)
        return StageOutput.of(result, jsonio.dumps(result.records), input_name=str(source),
                              rejects_name="memories_rejects.jsonl")


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
        from skillsft.pipeline.stages.result import StageResult

        spec = get_env(self.env)
        inputs = ", ".join(map(str, self.input_files()))
        loaded = load_memory_files(self.input_files(), spec)
        rejects_name = "aggregate_rejects.jsonl"
        if not loaded.records:  # nothing to merge: no teacher call; StageTask.run fails it
            empty: StageResult[Any] = StageResult([], unit="memory records")
            empty.absorb_load(loaded)
            return StageOutput.of(empty, b"", input_name=inputs, rejects_name=rejects_name)
        teacher = build_teacher(self, "aggregate", self.aggregate_model)
        shape = BankShape(CountRange.parse(self.general_skills),
                          CountRange.parse(self.category_skills),
                          CountRange.parse(self.common_mistakes))
        options = AggregateOptions(batch_size=self.batch_size, shape=shape)
        try:
            result = aggregate_memories(loaded.records, spec, options, teacher)
        except AggregationError as error:
            failed = [Reject(stage=self.stage, file=inputs, reason="teacher_error",
                             step=request_id, detail=f"aggregation call {request_id}: {message}")
                      for request_id, message in error.failed]
            lines = rejects_lines([*loaded.rejects, *failed])
            return StageOutput(payload=b"", side_files={rejects_name: lines}, failure=error,
                               rejects_name=rejects_name)
        result.absorb_load(loaded)
        (bank,) = result.records
        return StageOutput.of(result, jsonio.dumps(bank.model_dump(mode="json", exclude_none=True)),
                              input_name=inputs, rejects_name=rejects_name)


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
            return merge_shards(self, "distill_rejects.jsonl")
        spec = get_env(self.env)
        *inputs, bank_path = self.input_files()
        loaded = load_records(inputs[0], TRAJECTORIES, self.stage)
        bank = load_skill_bank(bank_path, spec)
        teacher = build_teacher(self, "distill", self.distill_model)
        options = DistillOptions(
            render=RenderOptions(history=self.history, seed=self.seed,
                                 search_information=self.keep_information),
            input_name=str(inputs[0]),
            skills=self.skill_selection(),
        )
        result = distill(loaded.records, spec, options, teacher, bank, self.scorer())
        result.absorb_load(loaded)
        return StageOutput.of(result, jsonio.dumps(result.records), input_name=str(inputs[0]),
                              rejects_name="distill_rejects.jsonl")


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
        from skillsft.pipeline.formats.record_files import CONVERSATIONS
        from skillsft.pipeline.stages.flatten import FlattenOptions, flatten

        spec = get_env(self.env)
        path = self.input_files()[0]
        loaded = load_records(path, CONVERSATIONS, self.stage)
        options = FlattenOptions(
            render=RenderOptions(history=self.history, seed=self.seed,
                                 search_information=self.keep_information),
            input_name=str(path),
        )
        result = flatten(loaded.records, spec, options)
        result.absorb_load(loaded)
        stem = self.output_file().stem
        provenance_name = f"{stem.removesuffix('_data')}_provenance.jsonl"
        return StageOutput.of(
            result, jsonio.dumps(result.records), input_name=str(path),
            rejects_name="flatten_rejects.jsonl",
            side_files={
                f"{stem}.jsonl": jsonio.dumps_lines(result.records),
                provenance_name: jsonio.dumps_lines(result.extras["provenance"]),
            },
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

    env = EnvParameter()
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
