"""End-to-end benchmark: the ALFWorld pipeline, unsharded, sharded and on two worker processes.

    .venv/bin/python bench/end_to_end.py [--envs 700] [--latency 0.1] [--concurrency 16]
        [--double] [--skip-sequential]

Builds a corpus of N env folders by replicating examples/rollouts/alfworld (3 trajectories each,
so 700 envs are 2,100 trajectories; each copy's initial observation is made unique, so no two
prompts coincide and no answer can be shared), starts the local OpenAI-compatible test server
with the given latency, and runs `skillsft run alfworld` in child processes, each into a fresh
work dir against a fresh server:

- sequential: concurrency 1, one shard (the baseline);
- 1 worker, unsharded: `--shards 1`;
- 1 worker, sharded: the default shard count for the corpus;
- 2 workers, sharded: two `skillsft run` processes sharing one luigid on 127.0.0.1.

For each: wall time, teacher requests, the ideal time (requests x latency / concurrency: the
machine-wide limit holds across both workers, so the ideal is the same for all), measured /
ideal, peak RSS of each `skillsft` process, and the size of the journal. `--double` runs the
three parallel modes again on twice the corpus, to show that peak memory stays flat.
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from skillsft.pipeline.stages.shards import auto_shards
from skillsft.testing.openai_server import FakeOpenAIServer, ServerConfig
from skillsft.testing.stage_responder import stage_responder

REPO = Path(__file__).resolve().parents[1]

SAMPLE = REPO / "examples" / "rollouts" / "alfworld"
MARKER = "You are in the middle of a room."
RSS_WRAPPER = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
               "print('MAXRSS', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
               "sys.exit(r.returncode)")


def build_corpus(root: Path, n_envs: int) -> int:
    """N env folders; returns how many trajectories (rollout files) they hold."""
    sources = sorted(p for p in SAMPLE.iterdir() if p.is_dir())
    files = 0
    for number in range(n_envs):
        source = sources[number % len(sources)]
        target = root / f"env{number:05d}"
        target.mkdir(parents=True)
        for file in sorted(source.glob("*.txt")):
            text = file.read_text()
            unique = f"You are in the middle of a room (copy {number})."
            (target / file.name).write_text(text.replace(MARKER, unique, 1))
            files += 1
    return files


def start_luigid(folder: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    luigid = Path(sys.executable).with_name("luigid")
    process = subprocess.Popen(
        [str(luigid if luigid.exists() else "luigid"), "--address", "127.0.0.1", "--port",
         str(port), "--state-path", str(folder / "state.pickle"), "--logdir", str(folder)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url + "/api/task_list?data={}", timeout=1)
            return process, url
        except OSError:
            if time.monotonic() > deadline:
                sys.exit("luigid did not start")
            time.sleep(0.1)


@dataclass
class Row:
    mode: str
    trajectories: int
    wall: float
    requests: int
    peak_in_flight: int
    ideal: float
    rss_mib: list[float]
    journal_mib: float


def skillsft_command(rollouts: Path, work: Path, base_url: str, concurrency: int,
                     shards: int, *extra: str) -> list[str]:
    return [
        sys.executable, "-c", RSS_WRAPPER,
        sys.executable, "-m", "skillsft", "run", "alfworld", "--teacher", "openai",
        "--base-url", base_url, "--rollout-dir", str(rollouts), "--work-dir", str(work),
        # --max-concurrency pins the limit: the teacher's adaptive limit would otherwise grow
        # past `concurrency` and the one-at-a-time baseline would not be one at a time.
        "--concurrency", str(concurrency), "--max-concurrency", str(concurrency),
        "--shards", str(shards), "--n-success-envs", "1000000", "--n-fail-envs", "1000000",
        *extra,
    ]


def measure(mode: str, rollouts: Path, trajectories: int, work: Path, latency: float,
            concurrency: int, shards: int, processes: int, scratch: Path) -> Row:
    server = FakeOpenAIServer(ServerConfig(latency=latency, responder=stage_responder)).start()
    luigid = None
    extra: list[str] = []
    if processes > 1:
        folder = scratch / f"luigid-{len(list(scratch.glob('luigid-*')))}"
        folder.mkdir()
        luigid, url = start_luigid(folder)
        extra = ["--scheduler-url", url]
    env = {**os.environ, "OPENAI_API_KEY": "sk-bench"}
    try:
        started = time.perf_counter()
        running = [subprocess.Popen(
            skillsft_command(rollouts, work, server.base_url, concurrency, shards, *extra),
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for _ in range(processes)]
        outputs = [process.communicate()[0] for process in running]
        wall = time.perf_counter() - started
        for process, output in zip(running, outputs, strict=True):
            if process.returncode != 0:
                sys.exit(f"{mode}: run failed:\n{output[-3000:]}")
        requests, peak = server.stats.stage_requests, server.stats.peak_in_flight
    finally:
        server.stop()
        if luigid is not None:
            luigid.terminate()
            luigid.wait(timeout=10)
    rss = [int(out.rsplit("MAXRSS", 1)[1].split()[0]) / 1024 for out in outputs]
    journal = sum(p.stat().st_size for p in (work / "journal").glob("*.jsonl"))
    return Row(mode, trajectories, wall, requests, peak, requests * latency / concurrency, rss,
               journal / 2**20)


def print_rows(rows: list[Row], latency: float, concurrency: int) -> None:
    print(f"ALFWorld pipeline, server latency {latency * 1000:.0f} ms, concurrency {concurrency} "
          "(machine-wide)")
    print(f"{'mode':<24} {'traj':>6} {'wall s':>7} {'requests':>8} {'peak':>5} {'ideal s':>8} "
          f"{'/ideal':>7} {'peak RSS MiB (each process)':>28} {'journal MiB':>11}")
    for row in rows:
        rss = " + ".join(f"{r:.0f}" for r in row.rss_mib)
        print(f"{row.mode:<24} {row.trajectories:>6} {row.wall:>7.1f} {row.requests:>8} "
              f"{row.peak_in_flight:>5} {row.ideal:>8.1f} {row.wall / row.ideal:>7.2f} "
              f"{rss:>28} {row.journal_mib:>11.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=700)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--double", action="store_true",
                        help="also run the parallel modes on twice the corpus")
    parser.add_argument("--skip-sequential", action="store_true")
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="skillsft-bench-"))
    rows: list[Row] = []
    try:
        for factor in (1, 2) if args.double else (1,):
            rollouts = scratch / f"rollouts-x{factor}"
            trajectories = build_corpus(rollouts, args.envs * factor)
            shards = auto_shards(trajectories)
            modes = [("1 worker, unsharded", args.concurrency, 1, 1),
                     (f"1 worker, {shards} shards", args.concurrency, shards, 1),
                     (f"2 workers, {shards} shards", args.concurrency, shards, 2)]
            if factor == 1 and not args.skip_sequential:
                modes.insert(0, ("sequential", 1, 1, 1))
            for mode, concurrency, count, processes in modes:
                work = scratch / f"work-x{factor}-{len(rows)}"
                row = measure(mode, rollouts, trajectories, work, args.latency, concurrency,
                              count, processes, scratch)
                if concurrency != args.concurrency:  # the baseline's ideal is its own
                    row.ideal = row.requests * args.latency / concurrency
                rows.append(row)
                print(f"  done: {mode} ({trajectories} trajectories) in {row.wall:.1f} s",
                      file=sys.stderr)
        print_rows(rows, args.latency, args.concurrency)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
