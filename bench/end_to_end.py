"""End-to-end benchmark: the ALFWorld pipeline on 300 envs against the local server.

    .venv/bin/python bench/end_to_end.py [--envs 300] [--latency 0.1] [--concurrency 16]

Builds a corpus of N env folders by replicating examples/rollouts/alfworld (each copy's
initial observation is made unique, so no two prompts coincide and no answer can be shared),
starts the fake OpenAI-compatible server (skillsft.testing) with the given latency, and runs
`skillsft run alfworld` twice in child processes, each into a fresh work dir: at the default
concurrency and at concurrency 1. Prints wall time, teacher calls, calls/s and peak RSS of each,
the speed-up, and the ideal time (calls x latency / concurrency). Both runs are measured here,
in the same process, on the same machine state.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from skillsft.testing.openai_server import FakeOpenAIServer, ServerConfig
from skillsft.testing.stage_responder import stage_responder

REPO = Path(__file__).resolve().parents[1]

SAMPLE = REPO / "examples" / "rollouts" / "alfworld"
MARKER = "You are in the middle of a room."


def build_corpus(root: Path, n_envs: int) -> None:
    sources = sorted(p for p in SAMPLE.iterdir() if p.is_dir())
    for number in range(n_envs):
        source = sources[number % len(sources)]
        target = root / f"env{number:03d}"
        target.mkdir(parents=True)
        for file in sorted(source.glob("*.txt")):
            text = file.read_text()
            unique = f"You are in the middle of a room (copy {number})."
            (target / file.name).write_text(text.replace(MARKER, unique, 1))


def timed_run(rollouts: Path, work: Path, base_url: str, concurrency: int) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one `skillsft run` in a child process."""
    command = [
        sys.executable, "-c",
        "import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
        "print('MAXRSS', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
        "sys.exit(r.returncode)",
        sys.executable, "-m", "skillsft", "run", "alfworld", "--teacher", "openai",
        "--base-url", base_url, "--rollout-dir", str(rollouts), "--work-dir", str(work),
        # --max-concurrency pins the limit: the teacher's adaptive limit would otherwise grow
        # past `concurrency` and the one-at-a-time baseline would not be one at a time.
        "--concurrency", str(concurrency), "--max-concurrency", str(concurrency),
        "--n-success-envs", "100000", "--n-fail-envs", "100000",
    ]
    env = {**os.environ, "OPENAI_API_KEY": "sk-bench"}
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"run failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    rss = int(done.stdout.rsplit("MAXRSS", 1)[1].split()[0])
    return wall, rss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=300)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="skillsft-bench-"))
    try:
        rollouts = scratch / "rollouts"
        build_corpus(rollouts, args.envs)
        rows = []
        for concurrency in (args.concurrency, 1):
            server = FakeOpenAIServer(ServerConfig(latency=args.latency,
                                                   responder=stage_responder)).start()
            try:
                wall, rss = timed_run(rollouts, scratch / f"work-c{concurrency}",
                                      server.base_url, concurrency)
                calls, peak = server.stats.total, server.stats.peak_in_flight
            finally:
                server.stop()
            rows.append((concurrency, wall, calls, peak, rss))
        print(f"ALFWorld pipeline, {args.envs} envs, server latency {args.latency * 1000:.0f} ms")
        print(f"{'concurrency':>11} {'wall s':>8} {'calls':>6} {'calls/s':>8} "
              f"{'peak in flight':>15} {'peak RSS MiB':>13}")
        for concurrency, wall, calls, peak, rss in rows:
            print(f"{concurrency:>11} {wall:>8.1f} {calls:>6} {calls / wall:>8.1f} {peak:>15} "
                  f"{rss / 1024:>13.0f}")
        (_, fast, calls, _, _), (_, slow, _, _, _) = rows
        ideal = calls * args.latency / args.concurrency
        print(f"speed-up vs concurrency 1: {slow / fast:.1f}x")
        print(f"ideal at concurrency {args.concurrency} (calls x latency / concurrency): "
              f"{ideal:.1f} s; measured / ideal: {fast / ideal:.2f}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
