"""Teacher throughput: sequential calls versus the teacher's default concurrency, same run.

    .venv/bin/python bench/teacher.py [--requests 2000] [--latency 0.1]
    .venv/bin/python bench/teacher.py --adaptive [--requests 2000] [--latency 0.1]
    .venv/bin/python bench/teacher.py --cpu [--envs 700] [--concurrency 64] [--cprofile FILE]

`--cpu` measures the client's CPU per stage, side by side in one run: the stages of an ALFWorld
run on N envs (3 trajectories each, every env selected) against a 0 ms server, each stage
reading the file the previous one wrote and writing its own as tasks/stages.py does (memories,
aggregate, distill, flatten; prompt building, the teacher, validation, the journal and the
record files included), then, per stage that calls the teacher, a bare `AsyncOpenAI` loop with
a semaphore sending the same bodies (as the server received them) to the same server and
JSON-parsing each answer. CPU is this process's (`time.process_time`) around each part, so
start-up and parsing the rollouts are left out; the server runs in a child process and is not
counted. `--cprofile FILE` writes a profile of the stages, timed in CPU (the profiler's own
cost inflates every figure; read it for shares, and the table of a run without it for time).

`--adaptive` measures the adaptive limit instead: starting at --concurrency 16 it may grow to
--max-concurrency 64 against a server that takes everything (wall time against the ideal at the
limit reached), then against a server that answers 429 above 24 in flight (the limit should
settle near 24, and no request may be lost).

Starts the local OpenAI-compatible test server as a subprocess with a fixed per-request latency,
answers N requests one at a time (the same teacher, concurrency 1), then N fresh requests at the
default concurrency (each run with its own empty journal), and prints both wall times, their
ratio, and the ideal time (requests x latency / concurrency).
"""

import argparse
import asyncio
import cProfile
import json
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from openai import AsyncOpenAI

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
from skillsft.pipeline.teacher.openai.teacher import OpenAITeacher
from skillsft.pipeline.teacher.settings import TeacherSettings
from skillsft.testing.process import start_server_process
from skillsft.testing.toy import toy_requests

API_KEY = "sk-bench-local"  # the fake server accepts any key


def adaptive_batch(base_url: str, requests: int, version: str) -> tuple[float, float, int]:
    """Wall time, final adaptive limit and failed requests of one batch (16 growing to 64)."""
    settings = TeacherSettings.resolve({}, api_key=API_KEY, base_url=base_url,
                                       concurrency=16, max_concurrency=64, show_progress=False,
                                       response_format="json_schema")
    with tempfile.TemporaryDirectory() as work_dir:
        teacher = OpenAITeacher(settings, Path(work_dir), "bench")
        started = time.perf_counter()
        results, _ = teacher.run_batch(toy_requests(requests, version), stage="bench")
        elapsed = time.perf_counter() - started
    return elapsed, teacher.final_limit, sum(not result.ok for result in results)


def run_adaptive(requests: int, latency: float) -> None:
    for cap in (0, 24):
        process, base_url = start_server_process("--latency", str(latency),
                                                 "--max-in-flight", str(cap),
                                                 "--retry-after", "0.05")
        try:
            wall, limit, failed = adaptive_batch(base_url, requests, f"adaptive-{cap}")
            with urllib.request.urlopen(base_url.rsplit("/v1", 1)[0] + "/stats") as answer:
                stats = json.load(answer)
        finally:
            process.kill()
            process.wait()
        ideal = requests * latency / limit
        server = f"429 above {cap} in flight" if cap else "no cap"
        print(f"server {server:<22} wall {wall:.2f} s; final limit {limit:.1f}; ideal at that "
              f"limit {ideal:.2f} s; wall / ideal {wall / ideal:.2f}x; peak in flight "
              f"{stats['peak_in_flight']}; 429s {stats['faults'].get('over_capacity', 0)}; "
              f"lost {failed}")


def timed_batch(base_url: str, requests: int, concurrency: int | None, version: str) -> float:
    settings = TeacherSettings.resolve(
        {},
        api_key=API_KEY,
        base_url=base_url,
        concurrency=concurrency,
        show_progress=False,
    )
    with tempfile.TemporaryDirectory() as work_dir:
        teacher = OpenAITeacher(settings, Path(work_dir), "bench")
        started = time.perf_counter()
        results, _ = teacher.run_batch(toy_requests(requests, version), stage="bench")
        elapsed = time.perf_counter() - started
    failed = sum(not result.ok for result in results)
    if failed:
        raise SystemExit(f"{failed} requests failed; the benchmark needs a fault-free server")
    return elapsed


def server_json(base_url: str, route: str, data: bytes | None = None) -> Any:
    request = urllib.request.Request(base_url.rsplit("/v1", 1)[0] + route, data=data)
    with urllib.request.urlopen(request) as answer:
        return json.load(answer)


class StageCpu:
    """The stages of one ALFWorld run against one server, each stage reading the file the
    previous one wrote, as tasks/stages.py does (streamed loader in, `array_chunks` out)."""

    def __init__(self, base_url: str, folder: Path, concurrency: int,
                 profiler: cProfile.Profile | None) -> None:
        self.base_url, self.folder, self.concurrency = base_url, folder, concurrency
        self.profiler = profiler
        self.spec = get_env("alfworld")
        self.work_dir = folder / "work"
        self.work_dir.mkdir(exist_ok=True)

    def teacher(self, stage: str) -> OpenAITeacher:
        settings = TeacherSettings.resolve(
            {}, teacher="openai", api_key=API_KEY, base_url=self.base_url,
            concurrency=self.concurrency, max_concurrency=self.concurrency,
            show_progress=False, response_format="json_schema")
        return OpenAITeacher(settings, self.work_dir, stage)

    def timed(self, work: Callable[[], Any]) -> tuple[float, int, list[dict[str, Any]]]:
        """CPU seconds of `work`, and the bodies the server received meanwhile."""
        server_json(self.base_url, "/reset", b"")
        if self.profiler is not None:
            self.profiler.enable()
        started = time.process_time()
        work()
        cpu = time.process_time() - started
        if self.profiler is not None:
            self.profiler.disable()
        bodies = server_json(self.base_url, "/bodies")["bodies"]
        return cpu, len(bodies), bodies

    def write(self, name: str, records: Iterable[Any]) -> Path:
        path = self.folder / name
        with open(path, "wb") as out:
            for chunk in array_chunks(records):
                out.write(chunk)
        return path

    def run(self, corpus: Path) -> dict[str, tuple[float, int, list[dict[str, Any]]]]:
        every_env = SelectionOptions(n_success_envs=1 << 20, n_fail_envs=1 << 20,
                                     include_mixed=True)
        trajectories = self.write("trajectories.json",
                                  parse_rollouts(corpus, self.spec, every_env).records)
        memories_file = self.folder / "memories.json"
        bank_holder: list[Any] = []
        distilled = self.folder / "distilled.json"

        def memories() -> None:
            result, stream = iter_memories(
                iter_records(trajectories, TRAJECTORIES, "memories", LoadedRecords([])),
                self.spec, MemoryOptions(), self.teacher("memory"))
            self.write(memories_file.name, stream)
            if any(r.reason.startswith("teacher") for r in result.rejects):
                raise SystemExit("teacher requests failed; the benchmark needs a fault-free "
                                 "server")

        def aggregate() -> None:
            loaded = load_memory_files([memories_file], self.spec)
            result = aggregate_memories(loaded.records, self.spec, AggregateOptions(),
                                        self.teacher("aggregate"))
            bank_holder.extend(result.records)

        def distill() -> None:
            _, stream = iter_distilled(
                iter_records(trajectories, TRAJECTORIES, "distill", LoadedRecords([])),
                self.spec, DistillOptions(), self.teacher("distill"), bank_holder[0])
            self.write(distilled.name, stream)

        def flatten() -> None:
            _, pairs = iter_flattened(
                iter_records(distilled, CONVERSATIONS, "flatten", LoadedRecords([])),
                self.spec, FlattenOptions())
            with open(self.folder / "corpus.jsonl", "wb") as lines:

                def records() -> Iterator[Any]:
                    for record, _ in pairs:
                        lines.write(jsonio.dumps_line(record))
                        yield record

                self.write("corpus.json", records())

        return {name: self.timed(work) for name, work in
                (("memories", memories), ("aggregate", aggregate), ("distill", distill),
                 ("flatten", flatten))}


def bare_loop_cpu(base_url: str, bodies: list[dict[str, Any]], concurrency: int) -> float:
    """CPU seconds of the loop a user would write: AsyncOpenAI, a semaphore, json.loads."""

    async def send_all() -> None:
        client = AsyncOpenAI(api_key=API_KEY, base_url=base_url, max_retries=0)
        gate = asyncio.Semaphore(concurrency)

        async def one(body: dict[str, Any]) -> None:
            async with gate:
                completion = await client.chat.completions.create(**body)
                json.loads(completion.choices[0].message.content or "null")

        await asyncio.gather(*(one(body) for body in bodies))
        await client.close()

    started = time.process_time()
    asyncio.run(send_all())
    return time.process_time() - started


def run_cpu(envs: int, concurrency: int, profile: Path | None) -> None:
    from end_to_end import build_corpus  # bench/ is on the path when this file is run

    profiler = cProfile.Profile(time.process_time) if profile else None
    process, base_url = start_server_process("--latency", "0", "--stages")
    try:
        with tempfile.TemporaryDirectory() as folder:
            corpus = Path(folder) / "rollouts"
            trajectories = build_corpus(corpus, envs)
            stages = StageCpu(base_url, Path(folder), concurrency, profiler).run(corpus)
            bare = {name: bare_loop_cpu(base_url, bodies, concurrency)
                    for name, (_, _, bodies) in stages.items() if bodies}
    finally:
        process.kill()
        process.wait()
    print(f"{envs} envs, {trajectories} trajectories, concurrency {concurrency}, 0 ms server; "
          "CPU of this process (time.process_time)")
    print(f"{'stage':<10} {'requests':>8} {'cpu s':>7} {'ms/req':>7} {'bare s':>7} "
          f"{'bare ms/req':>11} {'ours/bare':>9}")
    for name, (cpu, sent, _) in stages.items():
        if name not in bare:
            print(f"{name:<10} {sent:>8} {cpu:>7.2f}")
            continue
        ours_ms, bare_ms = 1000 * cpu / sent, 1000 * bare[name] / sent
        print(f"{name:<10} {sent:>8} {cpu:>7.2f} {ours_ms:>7.2f} {bare[name]:>7.2f} "
              f"{bare_ms:>11.2f} {ours_ms / bare_ms:>8.2f}x")
    if profiler is not None and profile is not None:
        profiler.dump_stats(str(profile))
        print(f"cProfile of the stages (CPU time) in {profile}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument(
        "--concurrency", type=int, nargs="+", default=None,
        help="teacher concurrencies to measure (default: the teacher's default)",
    )
    parser.add_argument("--adaptive", action="store_true",
                        help="measure the adaptive limit (growth, and settling under 429s)")
    parser.add_argument("--cpu", action="store_true",
                        help="client CPU per request: the memories stage vs a bare loop")
    parser.add_argument("--envs", type=int, default=700, help="--cpu: ALFWorld envs")
    parser.add_argument("--cprofile", type=Path, default=None,
                        help="--cpu: write a cProfile of the stages (CPU time) to this file")
    args = parser.parse_args()
    if args.cpu:
        run_cpu(args.envs, (args.concurrency or [64])[0], args.cprofile)
        return
    if args.adaptive:
        run_adaptive(args.requests, args.latency)
        return
    concurrencies = args.concurrency or [TeacherSettings().concurrency]
    process, base_url = start_server_process("--latency", str(args.latency))
    try:
        sequential = timed_batch(base_url, args.requests, 1, "sequential")
        concurrent = {
            c: timed_batch(base_url, args.requests, c, f"concurrent-{c}") for c in concurrencies
        }
    finally:
        process.kill()
        process.wait()
    print(f"requests:                 {args.requests} at {args.latency * 1000:.0f} ms latency")
    print(f"sequential (1 in flight): {sequential:.2f} s")
    for c, wall in concurrent.items():
        ideal = args.requests * args.latency / c
        print(f"teacher ({c:>2} in flight):    {wall:.2f} s; speed-up {sequential / wall:.1f}x "
              f"(target >= 20x); ideal {ideal:.2f} s; teacher / ideal {wall / ideal:.2f}x "
              "(target <= 1.3x)")


if __name__ == "__main__":
    main()
