"""End-to-end benchmark: the ALFWorld pipeline, unsharded, sharded and on two worker processes.

    .venv/bin/python bench/end_to_end.py [--envs 700] [--latency 0.1] [--concurrency 16]
        [--double] [--skip-sequential] [--modes unsharded,sharded,two-workers]
        [--profile] [--cprofile FILE] [--scale [--scale-trajectories 20000]
        [--scale-latency 0.02] [--scale-unsharded]]

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
`--scale` adds one run of 20,000 trajectories (one worker, default shards, 20 ms latency by
default, to keep it short; `--scale-unsharded` runs it with `--shards 1`, to see one process
hold the whole stage).

`--profile` adds, per run, where the time above the ideal goes, stage by stage, from the
manifests the run left (`wall_seconds`, `cpu_seconds`, teacher requests): each stage's own
ideal (its requests x latency / concurrency), its CPU (parsing, rendering, JSON, the teacher
client) and the rest (waiting: on the teacher, or on the other cores), and the time outside
every stage (start-up, pre-flight, scheduling, the summary). `--cprofile FILE` runs the first
mode under cProfile (the main thread: Luigi's worker and the stages; the teacher client's
threads are not in it) and prints the functions that took the most time.
"""

import argparse
import json
import math
import os
import pstats
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
class StageTime:
    stage: str
    tasks: int
    wall: float  # summed over the stage's tasks (shards run one after another in one worker)
    cpu: float
    requests: int
    peak_rss_mib: float = 0.0  # the worker's high-water mark when the stage's last task ended


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
    stages: list[StageTime]


STAGE_ORDER = ("parse", "split", "memories", "aggregate", "distill", "flatten", "skill_document",
               "report")


def stage_times(work: Path) -> list[StageTime]:
    """Per stage, from every manifest the run left (shards' included): wall, CPU, requests
    (from the stage's own manifest: a merge's holds its shards' requests)."""
    found: dict[str, StageTime] = {}
    for path in sorted(work.rglob("*.manifest.json")):
        manifest = json.loads(path.read_text())
        stage = str(manifest.get("stage") or manifest.get("task"))
        row = found.setdefault(stage, StageTime(stage, 0, 0.0, 0.0, 0))
        row.tasks += 1
        row.wall += float(manifest.get("wall_seconds") or 0.0)
        row.cpu += float(manifest.get("cpu_seconds") or 0.0)
        row.peak_rss_mib = max(row.peak_rss_mib, float(manifest.get("peak_rss_mib") or 0.0))
        if "shards" not in path.relative_to(work).parts:
            row.requests += sum(int(u.get("calls_new", 0)) for u in manifest.get("teacher") or [])
    rank = {name: i for i, name in enumerate(STAGE_ORDER)}
    return sorted(found.values(), key=lambda r: (rank.get(r.stage, len(rank)), r.stage))


def skillsft_command(rollouts: Path, work: Path, base_url: str, concurrency: int,
                     shards: int, *extra: str, cprofile: Path | None = None) -> list[str]:
    profiler = ["-m", "cProfile", "-o", str(cprofile)] if cprofile else []
    return [
        sys.executable, "-c", RSS_WRAPPER,
        sys.executable, *profiler, "-m", "skillsft", "run", "alfworld", "--teacher", "openai",
        "--base-url", base_url, "--rollout-dir", str(rollouts), "--work-dir", str(work),
        # --max-concurrency pins the limit: the teacher's adaptive limit would otherwise grow
        # past `concurrency` and the one-at-a-time baseline would not be one at a time.
        "--concurrency", str(concurrency), "--max-concurrency", str(concurrency),
        "--shards", str(shards), "--n-success-envs", "1000000", "--n-fail-envs", "1000000",
        *extra,
    ]


def measure(mode: str, rollouts: Path, trajectories: int, work: Path, latency: float,
            concurrency: int, shards: int, processes: int, scratch: Path,
            cprofile: Path | None = None) -> Row:
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
            skillsft_command(rollouts, work, server.base_url, concurrency, shards, *extra,
                             cprofile=cprofile),
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
               journal / 2**20, stage_times(work))


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


def print_profile(rows: list[Row], latency: float, concurrency: int) -> None:
    """Where each run's time above the ideal went, stage by stage."""
    for row in rows:
        print(f"\n{row.mode}, {row.trajectories} trajectories: wall {row.wall:.1f} s, "
              f"ideal {row.ideal:.1f} s")
        print(f"  {'stage':<16} {'tasks':>5} {'wall s':>7} {'cpu s':>7} {'requests':>8} "
              f"{'ideal s':>8} {'above s':>8} {'waiting s':>9} {'RSS MiB':>8}")
        for stage in row.stages:
            ideal = stage.requests * latency / concurrency
            print(f"  {stage.stage:<16} {stage.tasks:>5} {stage.wall:>7.2f} {stage.cpu:>7.2f} "
                  f"{stage.requests:>8} {ideal:>8.2f} {stage.wall - ideal:>8.2f} "
                  f"{max(0.0, stage.wall - stage.cpu):>9.2f} {stage.peak_rss_mib:>8.0f}")
        inside = sum(stage.wall for stage in row.stages)
        print(f"  {'outside stages':<16} {'':>5} {row.wall - inside:>7.2f}   (start-up, "
              "pre-flight, scheduling, summary; with 2 workers the stages overlap)")


def print_cprofile(path: Path, top: int = 25) -> None:
    print(f"\ncProfile of the first run (main thread), top {top} by own time:")
    pstats.Stats(str(path), stream=sys.stdout).sort_stats("tottime").print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=700)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--double", action="store_true",
                        help="also run the parallel modes on twice the corpus")
    parser.add_argument("--skip-sequential", action="store_true")
    parser.add_argument("--modes", default="unsharded,sharded,two-workers",
                        help="which parallel modes to run, comma-separated")
    parser.add_argument("--profile", action="store_true",
                        help="per-stage wall, CPU and ideal of every run, from its manifests")
    parser.add_argument("--cprofile", type=Path, default=None,
                        help="run the first mode under cProfile, save the profile here")
    parser.add_argument("--scale", action="store_true",
                        help="also run one worker, default shards, on --scale-trajectories")
    parser.add_argument("--scale-trajectories", type=int, default=20_000)
    parser.add_argument("--scale-latency", type=float, default=0.02)
    parser.add_argument("--scale-unsharded", action="store_true",
                        help="run the --scale corpus with --shards 1 (one process holds it all)")
    args = parser.parse_args()
    wanted = set(args.modes.split(","))

    scratch = Path(tempfile.mkdtemp(prefix="skillsft-bench-"))
    rows: list[Row] = []
    scale_rows: list[Row] = []
    try:
        for factor in (1, 2) if args.double else (1,):
            rollouts = scratch / f"rollouts-x{factor}"
            trajectories = build_corpus(rollouts, args.envs * factor)
            shards = auto_shards(trajectories)
            modes = [(name, label, args.concurrency, count, processes)
                     for name, label, count, processes in (
                         ("unsharded", "1 worker, unsharded", 1, 1),
                         ("sharded", f"1 worker, {shards} shards", shards, 1),
                         ("two-workers", f"2 workers, {shards} shards", shards, 2))
                     if name in wanted]
            if factor == 1 and not args.skip_sequential:
                modes.insert(0, ("sequential", "sequential", 1, 1, 1))
            for _, mode, concurrency, count, processes in modes:
                work = scratch / f"work-x{factor}-{len(rows)}"
                profiled = args.cprofile if not rows else None
                row = measure(mode, rollouts, trajectories, work, args.latency, concurrency,
                              count, processes, scratch, cprofile=profiled)
                if concurrency != args.concurrency:  # the baseline's ideal is its own
                    row.ideal = row.requests * args.latency / concurrency
                rows.append(row)
                print(f"  done: {mode} ({trajectories} trajectories) in {row.wall:.1f} s",
                      file=sys.stderr)
            shutil.rmtree(rollouts)
        if args.scale:
            rollouts = scratch / "rollouts-scale"
            trajectories = build_corpus(rollouts, math.ceil(args.scale_trajectories / 3))
            shards = 1 if args.scale_unsharded else auto_shards(trajectories)
            label = "1 worker, unsharded" if shards == 1 else f"1 worker, {shards} shards"
            row = measure(label, rollouts, trajectories,
                          scratch / "work-scale", args.scale_latency, args.concurrency, shards, 1,
                          scratch)
            scale_rows.append(row)
            print(f"  done: scale ({trajectories} trajectories) in {row.wall:.1f} s",
                  file=sys.stderr)
        if rows:
            print_rows(rows, args.latency, args.concurrency)
        if scale_rows:
            print()
            print_rows(scale_rows, args.scale_latency, args.concurrency)
        if args.profile:
            print_profile(rows, args.latency, args.concurrency)
            print_profile(scale_rows, args.scale_latency, args.concurrency)
        if args.cprofile and rows:
            print_cprofile(args.cprofile)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
