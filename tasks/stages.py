"""One thin Luigi task per stage; each reads its inputs, calls one pipeline function, returns bytes.

Graph (run, composed by skillsft/graph.py): ParseRollouts -> GenerateMemories ->
AggregateSkillBank -> Distill -> Flatten -> BuildReport (tasks/report.py; -> PublishCorpus when
a repo id is given), wrapped by RunEnv (tasks/run.py). With `--skill-bank FILE` stage 2 is left
out and Distill reads that file. Single-stage commands build the same tasks with `InputFile`s
for inputs instead of upstream tasks. Each task carries its inputs and its own options objects.
"""

import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import luigi

from skillsft.pipeline import workdir
from skillsft.pipeline.envs import get_env
from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.formats.record_files import TRAJECTORIES, LoadedRecords, iter_records
from skillsft.pipeline.formats.record_stream import array_chunks
from skillsft.pipeline.formats.rollouts.selection import SelectionOptions
from skillsft.pipeline.stages.aggregate import AggregateOptions
from skillsft.pipeline.stages.distill import DistillOptions
from skillsft.pipeline.stages.flatten import FlattenOptions
from skillsft.pipeline.stages.memories import MemoryOptions
from skillsft.pipeline.stages.outcome import FailureRule
from skillsft.pipeline.stages.result import StageResult
from skillsft.pipeline.stages.skill_selection import scorer_for
from skillsft.pipeline.teacher.plan import build_teacher, embedding_client
from skillsft.tasks.base import StageOutput, StageTask, signature_of_tree
from skillsft.tasks.options_param import OptionsParameter, TaskListParameter
from skillsft.tasks.shard_merge import merge_shards
from skillsft.tasks.teacher import TeacherParameter


class ParseRollouts(StageTask):
    stage = "parse"
    output_name = workdir.PROCESSED
    # The only task that reads the rollout folder for the SFT corpus (checked by the CLI).
    rollout_dir = luigi.Parameter(default="")
    selection = OptionsParameter(SelectionOptions)
    failure = OptionsParameter(FailureRule)

    def external_signatures(self) -> dict[str, str]:
        return {"rollout_dir": signature_of_tree(Path(self.rollout_dir))}

    def compute(self) -> StageOutput:
        from skillsft.pipeline.stages.parse import iter_parsed

        # The records stream into the file as they are built (one held at a time); the
        # result's counters are complete once they are written.
        result, records = iter_parsed(Path(self.rollout_dir), get_env(self.env), self.selection,
                                      progress=True)
        return StageOutput.of(result, array_chunks(records), input_name=self.rollout_dir,
                              rejects_name=workdir.REJECTS["parse"])


class ShardedStage(StageTask):
    """A teacher stage that, given shard tasks (`--shards N` > 1, tasks/shards.py), merges
    their files instead of calling the teacher itself. Its fingerprint stays the unsharded one
    (its upstream is still `inputs`), so changing N never re-runs a finished stage."""

    shard_tasks = TaskListParameter(default=(), significant=False)

    def requires(self) -> Any:
        return list(self.shard_tasks) or list(self.inputs)

    def upstream_tasks(self) -> list[StageTask]:
        return [dep for dep in luigi.task.flatten(list(self.inputs))
                if isinstance(dep, StageTask)]


class GenerateMemories(ShardedStage):
    stage = "memories"
    output_name = workdir.MEMORIES
    input_names = ("trajectories",)
    teacher = TeacherParameter()
    memories = OptionsParameter(MemoryOptions)
    failure = OptionsParameter(FailureRule)

    def version_tags(self) -> dict[str, str]:
        from skillsft.pipeline.stages.memories import PROMPT_VERSIONS

        return {f"prompt/{k}": v for k, v in PROMPT_VERSIONS.items()}

    def compute(self) -> StageOutput:
        from skillsft.pipeline.stages.memories import iter_memories

        if self.shard_tasks:
            return merge_shards(self, workdir.REJECTS["memories"])
        source = self.input_file("trajectories")
        loaded: LoadedRecords[Any] = LoadedRecords([])
        teacher = build_teacher(self.teacher, self.stage, Path(self.work_dir))
        options = replace(self.memories, input_name=str(source))
        # The trajectories stream in as the teacher's window has room and the memories out as
        # their answers come (teacher/base.py answer_stream): a window of them is held.
        result, memories = iter_memories(iter_records(source, TRAJECTORIES, self.stage, loaded),
                                         get_env(self.env), options, teacher)
        return StageOutput.of(result, array_chunks(absorbing_load(memories, result, loaded)),
                              input_name=str(source), rejects_name=workdir.REJECTS["memories"])


class AggregateSkillBank(StageTask):
    stage = "aggregate"
    output_name = workdir.SKILL_BANK
    teacher = TeacherParameter()
    aggregate = OptionsParameter(AggregateOptions)
    failure = OptionsParameter(FailureRule)

    def version_tags(self) -> dict[str, str]:
        from skillsft.pipeline.stages.aggregate import PROMPT_VERSIONS

        return {f"prompt/{k}": v for k, v in PROMPT_VERSIONS.items()}

    def compute(self) -> StageOutput:
        from skillsft.pipeline.stages.aggregate import aggregate_memories
        from skillsft.pipeline.stages.skill_bank_io import load_memory_files

        spec = get_env(self.env)
        inputs = ", ".join(map(str, self.input_files()))
        loaded = load_memory_files(self.input_files(), spec)
        rejects_name = workdir.REJECTS["aggregate"]
        if not loaded.records:  # nothing to merge: no teacher call; StageTask.run fails it
            empty: StageResult[Any] = StageResult([], unit="memory records")
            empty.absorb_load(loaded)
            return StageOutput.of(empty, b"", input_name=inputs, rejects_name=rejects_name)
        teacher = build_teacher(self.teacher, self.stage, Path(self.work_dir))
        result = aggregate_memories(loaded.records, spec, self.aggregate, teacher)
        # a failed call's rejects name the memory files this run read
        result.rejects = [r.model_copy(update={"file": inputs}) for r in result.rejects]
        result.absorb_load(loaded)
        (bank,) = result.records
        return StageOutput.of(result, jsonio.dumps(bank.model_dump(mode="json", exclude_none=True)),
                              input_name=inputs, rejects_name=rejects_name)


class Distill(ShardedStage):
    """Inputs: the processed trajectories, then the skill bank."""

    stage = "distill"
    output_name = workdir.DISTILLED
    input_names = ("trajectories", "skill_bank")
    teacher = TeacherParameter()
    distill = OptionsParameter(DistillOptions)
    failure = OptionsParameter(FailureRule)

    def version_tags(self) -> dict[str, str]:
        from skillsft.pipeline.stages.distill import PROMPT_VERSION

        return {"prompt/distill": PROMPT_VERSION}

    def compute(self) -> StageOutput:
        from skillsft.pipeline.stages.distill import iter_distilled
        from skillsft.pipeline.stages.skill_bank_io import load_skill_bank

        if self.shard_tasks:
            return merge_shards(self, workdir.REJECTS["distill"])
        spec = get_env(self.env)
        source = self.input_file("trajectories")
        loaded: LoadedRecords[Any] = LoadedRecords([])
        bank = load_skill_bank(self.input_file("skill_bank"), spec)
        teacher = build_teacher(self.teacher, self.stage, Path(self.work_dir))
        options = replace(self.distill, input_name=str(source))
        scorer = scorer_for(embedding_client(options.skills, self.teacher, Path(self.work_dir)))
        # --skills retrieve ranks against every task: a first pass reads only those.
        tasks = ((r.task for r in iter_records(source, TRAJECTORIES, self.stage,
                                               LoadedRecords([])))
                 if options.skills.mode == "retrieve" else None)
        result, conversations = iter_distilled(
            iter_records(source, TRAJECTORIES, self.stage, loaded), spec, options, teacher, bank,
            scorer, tasks=tasks)
        return StageOutput.of(result, array_chunks(absorbing_load(conversations, result, loaded)),
                              input_name=str(source), rejects_name=workdir.REJECTS["distill"])


def absorbing_load(records: Iterator[Any], result: StageResult[Any],
                   loaded: LoadedRecords[Any]) -> Iterator[Any]:
    """A stage's stream of records that puts the streamed loader's rejects and counters into
    the result once it ends (they are complete only then)."""
    yield from records
    result.absorb_load(loaded)


class Flatten(StageTask):
    stage = "flatten"
    input_names = ("conversations",)
    flatten = OptionsParameter(FlattenOptions)
    failure = OptionsParameter(FailureRule)

    @property
    def output_name(self) -> str:  # type: ignore[override]
        return workdir.corpus(self.env)

    def compute(self) -> StageOutput:
        from skillsft.pipeline.formats.record_files import CONVERSATIONS
        from skillsft.pipeline.stages.flatten import iter_flattened

        spec = get_env(self.env)
        path = self.input_file("conversations")
        loaded: LoadedRecords[Any] = LoadedRecords([])
        options = replace(self.flatten, input_name=str(path))
        # The conversations stream in and the records out, one conversation's worth held at a
        # time: the corpus is written as the records come, its .jsonl and provenance lines go
        # to spools on disk meanwhile and are copied into place after it.
        result, pairs = iter_flattened(iter_records(path, CONVERSATIONS, self.stage, loaded),
                                       spec, options)
        lines, provenance = Spool(), Spool()

        def records() -> Iterator[Any]:
            for record, origin in pairs:
                lines.write(jsonio.dumps_line(record))
                provenance.write(jsonio.dumps_line(origin))
                yield record

        stem = self.output_file().stem
        provenance_name = f"{stem.removesuffix('_data')}_provenance.jsonl"
        return StageOutput.of(
            result, array_chunks(absorbing_load(records(), result, loaded)), input_name=str(path),
            rejects_name=workdir.REJECTS["flatten"],
            side_files={f"{stem}.jsonl": lines.chunks(),
                        provenance_name: provenance.chunks()},
        )


class Spool:
    """Bytes written while one stream is consumed, read back afterwards (a stage writing two
    files from one pass over its records): an anonymous temporary file, so they are held on
    disk, not in memory."""

    def __init__(self) -> None:
        # Closed by `chunks`, or with the object if the stage fails before it reads back.
        self.file = tempfile.TemporaryFile()  # noqa: SIM115

    def write(self, data: bytes) -> None:
        self.file.write(data)

    def chunks(self) -> Iterator[bytes]:
        """Everything written, in order; call once, after the writing stream is done."""
        with self.file:
            self.file.seek(0)
            yield from iter(lambda: self.file.read(1 << 20), b"")


SINGLE_STAGE_TASKS: dict[str, type[StageTask]] = {
    "memories": GenerateMemories,
    "aggregate": AggregateSkillBank,
    "distill": Distill,
    "flatten": Flatten,
}
