"""Teacher throughput: sequential calls versus the teacher's default concurrency, same run.

    .venv/bin/python bench/teacher.py [--requests 2000] [--latency 0.1]
    .venv/bin/python bench/teacher.py --adaptive [--requests 2000] [--latency 0.1]

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
import json
import tempfile
import time
import urllib.request
from pathlib import Path

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
    args = parser.parse_args()
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
