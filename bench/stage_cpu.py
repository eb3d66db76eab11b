"""The stages' own CPU, without the teacher's: what prompt building, validation, record files and
flattening cost, apart from HTTP and the journal.

    .venv/bin/python bench/stage_cpu.py [--envs 700] [--rounds 3] [--cprofile FILE]

Builds an ALFWorld corpus of N envs (3 trajectories each, every env selected), parses it once,
then runs memories, aggregate, distill and flatten as tasks/stages.py does (each reads the file
the previous one wrote, streamed in, and writes its own with `array_chunks`), with a teacher that
hands back answers recorded from the offline teacher in a first round, so no round pays for
answering. Prints the best CPU seconds (`time.process_time`) of each stage over the rounds; the
journal key and body of every request are computed too, as the live teacher does, and shown on
their own line. `--cprofile FILE` profiles one more round, timed in CPU.
"""

import argparse
import cProfile
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.formats.record_files import (
    CONVERSATIONS,
    TRAJECTORIES,
    LoadedRecords,
    iter_records,
)
from skillsft.pipeline.formats.record_stream import array_chunks
from skillsft.pipeline.formats.rollouts.selection import SelectionOptions
from skillsft.pipeline.stages.aggregate import AggregateOptions, aggregate_memories
from skillsft.pipeline.stages.distill import DistillOptions, iter_distilled
from skillsft.pipeline.stages.flatten import FlattenOptions, iter_flattened
from skillsft.pipeline.stages.memories import MemoryOptions, iter_memories
from skillsft.pipeline.stages.parse import parse_rollouts
from skillsft.pipeline.stages.skill_bank_io import load_memory_files
from skillsft.pipeline.teacher.base import BatchStats, TeacherRequest, TeacherResult
from skillsft.pipeline.teacher.offline.teacher import OfflineTeacher
from skillsft.pipeline.teacher.openai.chat_request import body_bytes, chat_body, chat_key

MODEL, PARAMETERS = "bench-model", {"temperature": 0.2}


class RecordedTeacher:
    """Answers from the offline teacher the first time a request id is asked, the recorded
    result afterwards; computes each request's journal key and body like the live teacher."""

    name = "openai"  # what the stages record as the source, like a live teacher's

    def __init__(self) -> None:
        self.offline = OfflineTeacher(show_progress=False)
        self.answers: dict[str, TeacherResult[Any]] = {}
        self.key_cpu = 0.0

    def run_batch(self, requests: Sequence[TeacherRequest[Any]], *, stage: str
                  ) -> tuple[list[TeacherResult[Any]], BatchStats]:
        new = [r for r in requests if r.request_id not in self.answers]
        if new:
            results, _ = self.offline.run_batch(new, stage=stage)
            self.answers.update((r.request_id, r) for r in results)
        started = time.process_time()
        for request in requests:
            chat_key(MODEL, PARAMETERS, request.messages, request)
            body_bytes(chat_body(MODEL, list(request.messages), PARAMETERS, "json_schema",
                                 request.answer_model))
        self.key_cpu += time.process_time() - started
        return [self.answers[r.request_id] for r in requests], BatchStats(stage=stage,
                                                                          model=MODEL)


def write(path: Path, records: Iterable[Any]) -> Path:
    with open(path, "wb") as out:
        for chunk in array_chunks(records):
            out.write(chunk)
    return path


def one_round(folder: Path, trajectories: Path, teacher: RecordedTeacher) -> dict[str, float]:
    spec = get_env("alfworld")
    times: dict[str, float] = {}
    started = time.process_time()
    _, memories = iter_memories(iter_records(trajectories, TRAJECTORIES, "memories",
                                             LoadedRecords([])), spec, MemoryOptions(), teacher)
    memory_file = write(folder / "memories.json", memories)
    times["memories"] = time.process_time() - started

    started = time.process_time()
    loaded = load_memory_files([memory_file], spec)
    (bank,) = aggregate_memories(loaded.records, spec, AggregateOptions(), teacher).records
    times["aggregate"] = time.process_time() - started

    started = time.process_time()
    _, conversations = iter_distilled(iter_records(trajectories, TRAJECTORIES, "distill",
                                                   LoadedRecords([])),
                                      spec, DistillOptions(), teacher, bank)
    distilled = write(folder / "distilled.json", conversations)
    times["distill"] = time.process_time() - started

    started = time.process_time()
    _, pairs = iter_flattened(iter_records(distilled, CONVERSATIONS, "flatten",
                                           LoadedRecords([])), spec, FlattenOptions())
    with open(folder / "corpus.jsonl", "wb") as lines, \
            open(folder / "provenance.jsonl", "wb") as provenance:

        def records() -> Iterator[Any]:
            for record, origin in pairs:
                lines.write(jsonio.dumps_line(record))
                provenance.write(jsonio.dumps_line(origin))
                yield record

        write(folder / "corpus.json", records())
    times["flatten"] = time.process_time() - started
    return times


def main() -> None:
    from end_to_end import build_corpus  # bench/ is on the path when this file is run

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=700)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cprofile", type=Path, default=None)
    args = parser.parse_args()
    every_env = SelectionOptions(n_success_envs=1 << 20, n_fail_envs=1 << 20, include_mixed=True)
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        count = build_corpus(folder / "rollouts", args.envs)
        parsed = parse_rollouts(folder / "rollouts", get_env("alfworld"), every_env).records
        trajectories = write(folder / "trajectories.json", parsed)
        teacher = RecordedTeacher()
        one_round(folder, trajectories, teacher)  # records the answers
        best: dict[str, float] = {}
        key_cpu = float("inf")
        for _ in range(args.rounds):
            teacher.key_cpu = 0.0
            for stage, cpu in one_round(folder, trajectories, teacher).items():
                best[stage] = min(best.get(stage, float("inf")), cpu)
            key_cpu = min(key_cpu, teacher.key_cpu)
        if args.cprofile:  # a round of its own: the profiler's cost stays out of the table
            profiler = cProfile.Profile(time.process_time)
            profiler.enable()
            one_round(folder, trajectories, teacher)
            profiler.disable()
            profiler.dump_stats(str(args.cprofile))
    print(f"{args.envs} envs, {count} trajectories, {len(teacher.answers)} requests; best CPU s "
          f"of {args.rounds} rounds")
    for stage, cpu in best.items():
        print(f"  {stage:<10} {cpu:6.3f}")
    print(f"  of which journal keys and bodies: {key_cpu:.3f}")


if __name__ == "__main__":
    main()
