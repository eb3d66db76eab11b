"""One thin Luigi task per stage; each reads its inputs, calls one pipeline function, returns bytes.

Graph (run, composed by skillsft/graph.py): ParseRollouts -> GenerateMemories ->
AggregateSkillBank -> Distill -> Flatten -> BuildReport (tasks/report.py; -> PublishCorpus when
a repo id is given), wrapped by RunEnv (tasks/run.py). With `--skill-bank FILE` stage 2 is left
out and Distill reads that file. Single-stage commands build the same tasks with `InputFile`s
for inputs instead of upstream tasks.
"""

import sys
from pathlib import Path

import luigi

from skillsft.pipeline import workdir
from skillsft.pipeline.envs import get_env
from skillsft.pipeline.errors import InputError
from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.formats.file_kinds import check_kind
from skillsft.pipeline.formats.records import load_trajectory_records
from skillsft.pipeline.selection import SelectionOptions
from skillsft.pipeline.stages.aggregate import AggregateOptions
from skillsft.pipeline.stages.distill import DistillOptions
from skillsft.pipeline.stages.flatten import FlattenOptions
from skillsft.pipeline.stages.memories import MemoryOptions
from skillsft.pipeline.stages.outcome import FailureRule, StageOutcome
from skillsft.schemas import Reject
from skillsft.tasks.base import (
    SKIP_PREFIX,
    StageOutput,
    StageTask,
    rejects_lines,
    signature_of_tree,
)
from skillsft.tasks.options_param import OptionsParameter
from skillsft.tasks.teacher import TeacherParameter, build_teacher, scorer_for, stats_to_dict


class ParseRollouts(StageTask):
    stage = "parse"
    failure = OptionsParameter(FailureRule)
    output_name = workdir.PROCESSED
    # The only task that reads the rollout folder for the SFT corpus (checked by the CLI).
    rollout_dir = luigi.Parameter(default="")
    selection = OptionsParameter(SelectionOptions)

    def external_signatures(self) -> dict[str, str]:
        return {"rollout_dir": signature_of_tree(Path(self.rollout_dir))}

    def compute(self) -> StageOutput:
        from skillsft.pipeline.stages.parse import parse_rollouts

        result = parse_rollouts(get_env(self.env), Path(self.rollout_dir), self.selection,
                                progress=True)
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


class GenerateMemories(StageTask):
    stage = "memories"
    failure = OptionsParameter(FailureRule)
    output_name = workdir.MEMORIES
    teacher = TeacherParameter()
    memories = OptionsParameter(MemoryOptions)

    def version_tags(self) -> dict[str, str]:
        from skillsft.pipeline.stages.memories import PROMPT_VERSIONS

        return {f"prompt/{k}": v for k, v in PROMPT_VERSIONS.items()}

    def compute(self) -> StageOutput:
        from dataclasses import replace

        from skillsft.pipeline.stages.memories import generate_memories

        source = self.input_files()[0]
        records = jsonio.load(source)
        check_kind(source, records, "processed trajectories")
        if not isinstance(records, list):
            raise InputError(f"{source}: expected a JSON list of processed trajectories "
                             "(docs/formats.md, 'Processed trajectories')")
        teacher = build_teacher(self.teacher, self.stage, Path(self.work_dir))
        # The threshold is applied by StageTask.run after the rejects file is written.
        options = replace(self.memories, failure_threshold=1.0)
        # It validates each record itself (a bad one is a failure with its reason).
        result = generate_memories(records, get_env(self.env), teacher, options)
        rejects = [
            Reject(stage=self.stage, file=str(source), reason=f.reason,
                   trajectory=f.env_id if f.trajectory_index < 0 else
                   f"{f.env_id}/{f.trajectory_index}",
                   detail=f"env {f.env_id}, trajectory {f.trajectory_index}: {f.detail}")
            for f in result.failures
        ]
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


class AggregateSkillBank(StageTask):
    stage = "aggregate"
    failure = OptionsParameter(FailureRule)
    output_name = workdir.SKILL_BANK
    teacher = TeacherParameter()
    aggregate = OptionsParameter(AggregateOptions)

    def version_tags(self) -> dict[str, str]:
        from skillsft.pipeline.stages.aggregate import PROMPT_VERSIONS

        return {f"prompt/{k}": v for k, v in PROMPT_VERSIONS.items()}

    def compute(self) -> StageOutput:
        from skillsft.pipeline.formats.skill_bank_io import load_memory_files
        from skillsft.pipeline.stages.aggregate import AggregationError, aggregate_memories

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
        teacher = build_teacher(self.teacher, self.stage, Path(self.work_dir))
        try:
            result = aggregate_memories(loaded.memories, spec, teacher, self.aggregate)
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


class Distill(StageTask):
    """Inputs: the processed trajectories, then the skill bank."""

    stage = "distill"
    failure = OptionsParameter(FailureRule)
    output_name = workdir.DISTILLED
    teacher = TeacherParameter()
    distill = OptionsParameter(DistillOptions)

    def version_tags(self) -> dict[str, str]:
        from skillsft.pipeline.stages.distill import PROMPT_VERSION

        return {"prompt/distill": PROMPT_VERSION}

    def compute(self) -> StageOutput:
        from dataclasses import replace

        from skillsft.pipeline.formats.skill_bank_io import load_skill_bank
        from skillsft.pipeline.stages.distill import distill

        spec = get_env(self.env)
        *inputs, bank_path = self.input_files()
        loaded = load_trajectory_records(inputs[0], self.stage)
        bank = load_skill_bank(bank_path, spec)
        teacher = build_teacher(self.teacher, self.stage, Path(self.work_dir))
        options = replace(self.distill, input_name=str(inputs[0]))
        scorer = scorer_for(options.skills, self.teacher, Path(self.work_dir))
        result = distill(loaded.records, spec, bank, teacher, options, scorer)
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


class Flatten(StageTask):
    stage = "flatten"
    failure = OptionsParameter(FailureRule)
    flatten = OptionsParameter(FlattenOptions)

    @property
    def output_name(self) -> str:  # type: ignore[override]
        return workdir.corpus(self.env)

    def compute(self) -> StageOutput:
        from dataclasses import replace

        from skillsft.pipeline.stages.flatten import flatten, load_conversations

        spec = get_env(self.env)
        path = self.input_files()[0]
        conversations, unreadable = load_conversations(path)
        options = replace(self.flatten, input_name=str(path))
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


SINGLE_STAGE_TASKS: dict[str, type[StageTask]] = {
    "memories": GenerateMemories,
    "aggregate": AggregateSkillBank,
    "distill": Distill,
    "flatten": Flatten,
}
