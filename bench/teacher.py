"""Teacher throughput: sequential calls versus the teacher's default concurrency, same run.

    .venv/bin/python bench/teacher.py [--requests 2000] [--latency 0.1]
    .venv/bin/python bench/teacher.py --adaptive [--requests 2000] [--latency 0.1]
    .venv/bin/python bench/teacher.py --cpu [--envs 700] [--concurrency 64]

`--cpu` measures the client's CPU per request, side by side in one run: the memories stage on
N ALFWorld envs (3 trajectories each, every env selected; prompt building, the teacher,
validation and the journal included) against a 0 ms server, then a bare `AsyncOpenAI` loop
with a semaphore sending the same bodies (as the server received them) to the same server and
JSON-parsing each answer.
CPU is this process's (`time.process_time`) around each part, so start-up is left out; the
server runs in a child process and is not counted.

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
import json
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from openai import AsyncOpenAI

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.formats.rollouts.selection import SelectionOptions
from skillsft.pipeline.stages.memories import MemoryOptions, generate_memories
from skillsft.pipeline.stages.parse import parse_rollouts
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


def stage_cpu(base_url: str, corpus: Path, concurrency: int, work_dir: Path) -> tuple[float, int]:
    """CPU seconds of the memories stage and the HTTP requests it sent."""
    spec = get_env("alfworld")
    every_env = SelectionOptions(n_success_envs=1 << 20, n_fail_envs=1 << 20, include_mixed=True)
    records = parse_rollouts(corpus, spec, every_env).records
    settings = TeacherSettings.resolve({}, teacher="openai", api_key=API_KEY, base_url=base_url,
                                       concurrency=concurrency, max_concurrency=concurrency,
                                       show_progress=False, response_format="json_schema")
    teacher = OpenAITeacher(settings, work_dir, "memory")
    before = server_json(base_url, "/stats")["total"]
    started = time.process_time()
    result = generate_memories(records, spec, MemoryOptions(), teacher)
    cpu = time.process_time() - started
    sent = server_json(base_url, "/stats")["total"] - before
    if any(reject.reason.startswith("teacher") for reject in result.rejects):
        raise SystemExit("teacher requests failed; the benchmark needs a fault-free server")
    return cpu, sent


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


def run_cpu(envs: int, concurrency: int) -> None:
    from end_to_end import build_corpus  # bench/ is on the path when this file is run

    process, base_url = start_server_process("--latency", "0", "--stages")
    try:
        with tempfile.TemporaryDirectory() as folder:
            corpus = Path(folder) / "rollouts"
            trajectories = build_corpus(corpus, envs)
            ours, sent = stage_cpu(base_url, corpus, concurrency, Path(folder) / "work")
            bodies = server_json(base_url, "/bodies")["bodies"]
            server_json(base_url, "/reset", b"")
            bare = bare_loop_cpu(base_url, bodies, concurrency)
    finally:
        process.kill()
        process.wait()
    ours_ms, bare_ms = 1000 * ours / sent, 1000 * bare / len(bodies)
    print(f"{envs} envs, {trajectories} trajectories, {sent} requests, concurrency "
          f"{concurrency}, 0 ms server")
    print(f"memories stage: {ours:.2f} s CPU, {ours_ms:.2f} ms per request (prompts, teacher, "
          "validation, journal)")
    print(f"bare AsyncOpenAI loop, same bodies: {bare:.2f} s CPU, {bare_ms:.2f} ms per request")
    print(f"ours / bare: {ours_ms / bare_ms:.2f}x (goal <= 1.0x)")


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
    args = parser.parse_args()
    if args.cpu:
        run_cpu(args.envs, (args.concurrency or [64])[0])
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
