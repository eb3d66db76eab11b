"""Teacher throughput: sequential calls versus the teacher's default concurrency, same run.

    .venv/bin/python bench/teacher.py [--requests 2000] [--latency 0.1]

Starts the local OpenAI-compatible test server as a subprocess with a fixed per-request latency,
answers N requests one at a time (the same teacher, concurrency 1), then N fresh requests at the
default concurrency (each run with its own empty journal), and prints both wall times, their
ratio, and the ideal time (requests x latency / concurrency).
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.support

from skillsft.pipeline.teacher.openai_teacher import OpenAITeacher  # noqa: E402
from skillsft.pipeline.teacher.settings import TeacherSettings  # noqa: E402
from tests.support.fixtures import TEST_API_KEY, start_server_process  # noqa: E402
from tests.support.teacher_run import toy_requests  # noqa: E402


def timed_batch(base_url: str, requests: int, concurrency: int | None, version: str) -> float:
    settings = TeacherSettings.resolve(
        {},
        api_key=TEST_API_KEY,
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument(
        "--concurrency", type=int, nargs="+", default=None,
        help="teacher concurrencies to measure (default: the teacher's default)",
    )
    args = parser.parse_args()
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
