"""One thin Luigi task per stage; each reads its inputs, calls one pipeline function, returns bytes.

Graph (run): ParseRollouts -> GenerateMemories -> AggregateSkillBank -> Distill -> Flatten
-> BuildReport (-> PublishCorpus when a repo id is given), wrapped by RunEnv. With
`--skill-bank FILE` stage 2 is left out and Distill reads that file. Single-stage commands
build the same tasks with `input_paths` pointing at user files instead of upstream tasks.
"""

from pathlib import Path
from typing import Any

import luigi
from skillsft.pipeline import jsonio
from skillsft.pipeline.envs import get_env
from skillsft.pipeline.errors import InputError, TooManyFailures, check_failure_rate
from skillsft.pipeline.records import load_trajectory_records
from skillsft.schemas import Reject
from skillsft.tasks.base import StageOutput, StageTask, hash_file, signature_of_tree
from skillsft.tasks.params import (
    RENDERING,
    SELECTION,
    AggregateParams,
    DistillParams,
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


def rejects_lines(rejects: list[Reject]) -> bytes:
    return jsonio.dumps_lines(rejects)


def examples(rejects: list[Reject], limit: int = 3) -> str:
    """The first few rejects, for an error message that says what went wrong, not just how
    often."""
    return "; ".join(f"{r.reason}: {r.detail}"[:200] for r in rejects[:limit])


class ParseRollouts(SelectionParams, StageTask):
    stage = "parse"
    output_name = "processed_trajectories.json"
    shaping_params = SELECTION

    def requires(self) -> list[luigi.Task]:
        return []

    def external_signatures(self) -> dict[str, str]:
        return {"rollout_dir": signature_of_tree(Path(self.rollout_dir))}

    def compute(self) -> StageOutput:
        from skillsft.pipeline.parse import parse_rollouts
        from skillsft.pipeline.selection import SelectionOptions, SourceRange

        options = SelectionOptions(
            search_source_ranges=tuple(SourceRange.parse(r) for r in self.source_ranges),
            **{name: getattr(self, name) for name in SELECTION if name != "source_ranges"},
        )
        result = parse_rollouts(get_env(self.env), Path(self.rollout_dir), options, progress=True)
        return StageOutput(
            payload=jsonio.dumps(result.records),
            counts={**result.counts, "inputs": result.counts.get("files_seen", 0),
                    "outputs": len(result.records), "rejected": len(result.rejects)},
            side_files={"rejects.jsonl": rejects_lines(result.rejects)},
        )


class GenerateMemories(FromInputs, SelectionParams, TeacherParams, MemoryParams, StageTask):
    stage = "memories"
    output_name = "generated_memories.json"
    shaping_params = ("teacher", "base_url", "base_url_digest", "memory_model",
                      "max_output_tokens",
                      "all_trajectories")

    def upstream(self) -> luigi.Task:
        return self.clone(ParseRollouts)

    def version_tags(self) -> dict[str, str]:
        from skillsft.pipeline.memories import PROMPT_VERSIONS

        return {f"prompt/{k}": v for k, v in PROMPT_VERSIONS.items()}

    def compute(self) -> StageOutput:
        from skillsft.pipeline.memories import MemoryOptions, generate_memories

        source = self.input_files()[0]
        records = jsonio.load(source)
        if not isinstance(records, list):
            raise InputError(f"{source}: expected a JSON list of processed trajectories "
                             "(FORMATS.md section 3)")
        teacher = build_teacher(self, "memory", self.memory_model)
        options = MemoryOptions(
            all_trajectories=self.all_trajectories, failure_threshold=self.max_failure_rate
        )
        # It validates each record itself (a bad one is a failure with its reason) and applies
        # the failure threshold over records and trajectories alike.
        result = generate_memories(records, get_env(self.env), teacher, options)
        rejects = [
            Reject(stage=self.stage, file=str(source), reason=f.reason,
                   detail=f"env {f.env_id}, trajectory {f.trajectory_index}: {f.detail}")
            for f in result.failures
        ]
        return StageOutput(
            payload=jsonio.dumps(result.memories),
            counts={**result.counts, "inputs": len(records),
                    "outputs": len(result.memories), "rejected": len(rejects)},
            teacher=[stats_to_dict(result.stats)],
            side_files={"memories_rejects.jsonl": rejects_lines(rejects)},
        )


class AggregateSkillBank(FromInputs, SelectionParams, TeacherParams, MemoryParams,
                         AggregateParams, StageTask):
    stage = "aggregate"
    output_name = "skill_bank.json"
    shaping_params = ("teacher", "base_url", "base_url_digest", "aggregate_model",
                      "max_output_tokens",
                      "batch_size")

    def upstream(self) -> luigi.Task:
        return self.clone(GenerateMemories)

    def version_tags(self) -> dict[str, str]:
        from skillsft.pipeline.aggregate import PROMPT_VERSIONS

        return {f"prompt/{k}": v for k, v in PROMPT_VERSIONS.items()}

    def compute(self) -> StageOutput:
        from skillsft.pipeline.aggregate import AggregateOptions, aggregate_memories
        from skillsft.pipeline.skill_bank_io import load_memory_files

        spec = get_env(self.env)
        loaded = load_memory_files(self.input_files(), spec, self.max_failure_rate)
        teacher = build_teacher(self, "aggregate", self.aggregate_model)
        result = aggregate_memories(
            loaded.memories, spec, teacher, AggregateOptions(batch_size=self.batch_size)
        )
        return StageOutput(
            payload=jsonio.dumps(result.bank.model_dump(mode="json", exclude_none=True)),
            counts={**loaded.counts, **result.counts, "rejected": len(loaded.rejects),
                    "inputs": loaded.counts.get("records", 0), "outputs": 1},
            teacher=[stats_to_dict(result.stats)],
            side_files={"aggregate_rejects.jsonl": rejects_lines(loaded.rejects)},
        )


class Distill(FromInputs, SelectionParams, TeacherParams, MemoryParams, AggregateParams,
              DistillParams, StageTask):
    stage = "distill"
    output_name = "distilled_trajectories.json"
    shaping_params = ("teacher", "base_url", "base_url_digest", "distill_model",
                      "max_output_tokens", *RENDERING)
    skill_bank = luigi.Parameter(default="")

    def upstream(self) -> luigi.Task:
        return self.clone(ParseRollouts)

    def requires(self) -> list[luigi.Task]:
        bank = InputFile(path=self.skill_bank) if self.skill_bank else self.clone(
            AggregateSkillBank)
        return [*super().requires(), bank]

    def external_signatures(self) -> dict[str, str]:
        signatures = super().external_signatures()
        if self.skill_bank:
            signatures["skill_bank"] = hash_file(Path(self.skill_bank))
        return signatures

    def version_tags(self) -> dict[str, str]:
        from skillsft.pipeline.distill import PROMPT_VERSION

        return {"prompt/distill": PROMPT_VERSION}

    def compute(self) -> StageOutput:
        from skillsft.pipeline.conversations import RenderOptions
        from skillsft.pipeline.distill import DistillOptions, distill
        from skillsft.pipeline.skill_bank_io import load_skill_bank

        spec = get_env(self.env)
        *inputs, bank_path = self.input_files()
        loaded = load_trajectory_records(inputs[0], self.stage)
        bank = load_skill_bank(bank_path, spec)
        teacher = build_teacher(self, "distill", self.distill_model)
        options = DistillOptions(
            render=RenderOptions(history=self.history, seed=self.seed,
                                 search_information=self.keep_information),
            input_name=str(inputs[0]),
        )
        result = distill(loaded.records, spec, bank, teacher, options)
        rejects = loaded.rejects + result.failures
        attempted = result.counts.get("trajectories_attempted", 0) + len(loaded.rejects)
        check_failure_rate(len(rejects), attempted, self.max_failure_rate,
                           f"trajectories of {inputs[0]}", examples(rejects))
        return StageOutput(
            payload=jsonio.dumps(result.conversations),
            counts={**result.counts, "inputs": len(loaded.records) + len(loaded.rejects),
                    "outputs": len(result.conversations), "rejected": len(rejects)},
            teacher=[stats_to_dict(result.stats)] if result.stats else [],
            side_files={"distill_rejects.jsonl": rejects_lines(rejects)},
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
        from skillsft.pipeline.conversations import RenderOptions
        from skillsft.pipeline.flatten import FlattenOptions, flatten, load_conversations

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
        dropped = sum(v for k, v in result.counts.items()
                      if k.startswith("dropped_") and k != "dropped_unreadable_conversation")
        if conversations and not result.records:
            raise TooManyFailures(
                f"flattening {path} produced no record from {len(conversations)} conversations "
                f"({examples(result.rejects) or 'every turn was dropped'}); see "
                f"{self.output_file().parent / 'flatten_rejects.jsonl'}"
            )
        stem = self.output_file().stem
        provenance_name = f"{stem.removesuffix('_data')}_provenance.jsonl"
        return StageOutput(
            payload=jsonio.dumps(result.records),
            counts={**result.counts, "records": len(result.records),
                    "inputs": len(conversations) + len(unreadable),
                    "outputs": len(result.records),
                    "rejected": len(result.rejects) + dropped},
            side_files={
                f"{stem}.jsonl": jsonio.dumps_lines(result.records),
                provenance_name: jsonio.dumps_lines(result.provenance),
                "flatten_rejects.jsonl": rejects_lines(result.rejects),
            },
        )


class BuildReport(Flatten):
    """report.json + report.md from every manifest; re-made whenever the corpus changes."""

    stage = "report"
    output_name = "report.json"  # type: ignore[assignment]
    shaping_params = ()

    def requires(self) -> list[luigi.Task]:
        return [self.clone(Flatten)]

    def compute(self) -> StageOutput:
        from skillsft.pipeline.report import build_report, render_report_md

        report = build_report(Path(self.work_dir), self.env)
        return StageOutput(
            payload=jsonio.dumps(report),
            side_files={"report.md": render_report_md(report).encode()},
        )


class RunEnv(SelectionParams, TeacherParams, MemoryParams, AggregateParams, DistillParams,
             luigi.WrapperTask):
    """Everything for one environment: the task `skillsft run <env>` builds."""

    env = luigi.ChoiceParameter(choices=["alfworld", "webshop", "search"], var_type=str)
    work_dir = luigi.Parameter()
    skill_bank = luigi.Parameter(default="")
    repo_id = luigi.Parameter(default="")
    private = luigi.BoolParameter(default=False)
    revision = luigi.Parameter(default="")
    validation_fraction = luigi.FloatParameter(default=0.0)

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
