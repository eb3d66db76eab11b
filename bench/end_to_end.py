"""End-to-end benchmark: the ALFWorld pipeline, unsharded, sharded and on two worker processes.

    .venv/bin/python bench/end_to_end.py [--envs 700] [--latency 0.1] [--concurrency 16]
        [--double] [--skip-sequential] [--modes unsharded,sharded,two-workers]
        [--profile] [--cprofile FILE] [--scale [--scale-trajectories 20000]
        [--scale-latency 0.02]] [--shards N] [--no-machine-ideal]

Builds a corpus of N env folders by replicating examples/rollouts/alfworld (3 trajectories each,
so 700 envs are 2,100 trajectories; each copy's initial observation is made unique, so no two
prompts coincide and no answer can be shared), starts the local OpenAI-compatible test server
with the given latency, and runs `skillsft run alfworld` in child processes, each into a fresh
work dir against a fresh server:

- sequential: concurrency 1, one shard (the baseline);
- 1 worker, unsharded: `--shards 1`;
- 1 worker, sharded: the shard count commands sharing a central scheduler choose for the
  corpus (one per 500 trajectories; `--shards N` sets it), given with `--shards`: one worker
  alone on the in-process scheduler does not shard by default, so this shows what shards run
  one after another cost;
- 2 workers, sharded: two `skillsft run` processes sharing one luigid on 127.0.0.1.

For each: wall time, CPU time of each process, teacher requests, the ideal time (requests x
latency / concurrency: the machine-wide limit holds across both workers, so the ideal is the
same for all), measured / ideal, peak RSS of each `skillsft` process, and the size of the
journal. `--double` runs the three parallel modes again on twice the corpus, to show that peak
memory stays flat.
`--scale` adds one run of 20,000 trajectories (one worker with its default shard count, i.e.
unsharded, or `--shards N`; 20 ms latency by default, to keep it short).

`--profile` adds, per run, where the time above the ideal goes, stage by stage, from the
manifests the run left (`wall_seconds`, `cpu_seconds`, teacher requests): each stage's own
ideal (its requests x latency / concurrency), its CPU (parsing, rendering, JSON, the teacher
client) and the rest (waiting: on the teacher, or on the other cores), and the time outside
every stage (start-up, pre-flight, scheduling, the summary), the mean number of requests the
server had in flight while it had any, and for sharded runs a timeline of the tasks (from each
manifest's mtime and wall time: when a worker joined a stage). `--cprofile FILE` runs the first
mode under cProfile (the main thread: Luigi's worker and the stages; the teacher client's
threads are not in it) and prints the functions that took the most time.

The machine's own ideal, measured in the same run: the theoretical ideal assumes the server and
the client cost nothing, but here the server shares the machine's cores with the run. So after
the first one-process run of each corpus size, the stage requests its server received (the
bodies byte for byte, the pre-flight probes left out) are replayed by a bare `AsyncOpenAI` loop
(a semaphore of `--concurrency`, `json.loads` of each answer; no skillsft code) in a child
process, to a fresh server with the same latency and answers, wave after wave: a wave is what
the server received while it was never idle (a stage, an aggregation level), and the next
starts when it is done, as in the run. Its wall time is "machine s"; each run is shown against
both ideals. The server's CPU per request (it runs in threads of this process, which does
nothing else meanwhile) is shown for the run and for the replay.
"""

import argparse
import asyncio
import json
import math
import os
import pstats
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from skillsft.pipeline.stages.shards import auto_shards
from skillsft.testing.openai_server import FakeOpenAIServer, ServerConfig, is_probe
from skillsft.testing.stage_responder import stage_responder

REPO = Path(__file__).resolve().parents[1]

SAMPLE = REPO / "examples" / "rollouts" / "alfworld"
MARKER = "You are in the middle of a room."
RSS_WRAPPER = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
               "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
               "print('MAXRSS', u.ru_maxrss, 'CPU', u.ru_utime + u.ru_stime); "
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
    server_cpu_ms: float = 0.0  # the server's CPU per request it received
    machine_ideal: float = 0.0  # the bare loop's replay of the same requests (0: not measured)
    mean_in_flight: float = 0.0  # at the server, over the time it had any request in flight
    cpu: list[float] = field(default_factory=list)  # CPU seconds of each skillsft process
    timeline: list[tuple[float, float, str]] = field(default_factory=list)  # (start, end, task)


@dataclass
class Replay:
    """The machine's ideal for one corpus: the bare loop's replay of a run's requests."""

    trajectories: int
    requests: int
    waves: int
    rounds: int  # each wave's requests / concurrency, rounded up, summed
    sizes: list[int]  # requests per wave, in order
    wall: float
    client_cpu: float  # the bare loop's process
    server_cpu_ms: float  # per request
    mean_in_flight: float  # at the server, while it had any


STAGE_ORDER = ("parse", "split", "memories", "aggregate", "distill", "flatten", "skill_document",
               "report")


def stage_times(work: Path) -> list[StageTime]:
    """Per stage, from every manifest the run left: wall, CPU, requests. A sharded stage is two
    rows: its shard tasks ("memories shards", with their requests) and its merge ("memories",
    whose manifest repeats its shards' requests: not counted again)."""
    found: dict[str, StageTime] = {}
    for path in sorted(work.rglob("*.manifest.json")):
        manifest = json.loads(path.read_text())
        stage = str(manifest.get("stage") or manifest.get("task"))
        if stage != "split" and "shards" in path.relative_to(work).parts:
            stage += " shards"
        row = found.setdefault(stage, StageTime(stage, 0, 0.0, 0.0, 0))
        row.tasks += 1
        row.wall += float(manifest.get("wall_seconds") or 0.0)
        row.cpu += float(manifest.get("cpu_seconds") or 0.0)
        row.peak_rss_mib = max(row.peak_rss_mib, float(manifest.get("peak_rss_mib") or 0.0))
        row.requests += sum(int(u.get("calls_new", 0)) for u in manifest.get("teacher") or [])
    for name, row in found.items():
        if f"{name} shards" in found:
            row.requests = 0
    rank = {name: i for i, name in enumerate(STAGE_ORDER)}
    return sorted(found.values(), key=lambda r: (rank.get(r.stage.split()[0], len(rank)),
                                                 not r.stage.endswith(" shards"), r.stage))


def task_timeline(work: Path, run_started: float) -> list[tuple[float, float, str]]:
    """Each task's (start, end) in seconds since the run started, from its manifest (written
    when the task ended: its mtime; its wall_seconds before that), in start order."""
    spans = []
    for path in work.rglob("*.manifest.json"):
        manifest = json.loads(path.read_text())
        end = path.stat().st_mtime - run_started
        label = str(path.relative_to(work)).removesuffix(".manifest.json")
        spans.append((end - float(manifest.get("wall_seconds") or 0.0), end, label))
    return sorted(spans)


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


def own_cpu() -> float:
    """CPU seconds of this process so far: its server threads' (it does nothing else while a
    run or a replay goes on; the children are counted apart)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def write_waves(server: FakeOpenAIServer, path: Path) -> int:
    """The stage requests the server received (probes left out), each with its wave, one JSON
    line each; returns how many."""
    stats = server.stats
    lines = [json.dumps({"wave": wave, "body": raw.decode()}) + "\n"
             for raw, body, wave in zip(stats.raw_bodies, stats.bodies, stats.waves, strict=True)
             if not is_probe(body)]
    path.write_text("".join(lines))
    return len(lines)


async def replay_waves(path: Path, base_url: str, concurrency: int) -> tuple[float, list[int]]:
    """The bare loop a user would write (AsyncOpenAI, a semaphore, json.loads of each answer)
    sending the recorded bodies, wave after wave; returns its wall seconds and wave sizes."""
    from openai import AsyncOpenAI

    waves: dict[int, list[dict]] = {}
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        waves.setdefault(entry["wave"], []).append(json.loads(entry["body"]))
    client = AsyncOpenAI(api_key="sk-bench", base_url=base_url, max_retries=0)
    gate = asyncio.Semaphore(concurrency)

    async def one(body: dict) -> None:
        async with gate:
            completion = await client.chat.completions.create(**body)
            json.loads(completion.choices[0].message.content or "null")

    started = time.perf_counter()
    for wave in sorted(waves):
        await asyncio.gather(*(one(body) for body in waves[wave]))
    wall = time.perf_counter() - started
    await client.close()
    return wall, [len(waves[wave]) for wave in sorted(waves)]


def replay_child(path: Path, base_url: str, concurrency: int) -> None:
    """`--replay`: run the bare loop in this (child) process and print its figures."""
    cpu_started = time.process_time()
    wall, waves = asyncio.run(replay_waves(path, base_url, concurrency))
    print("REPLAY", json.dumps({"wall": wall, "waves": waves,
                                "cpu": time.process_time() - cpu_started}))


def machine_ideal(bodies: Path, requests: int, trajectories: int, latency: float,
                  concurrency: int) -> Replay:
    """Replay a run's requests with the bare loop in a child process against a fresh server of
    the same latency and answers."""
    server = FakeOpenAIServer(ServerConfig(latency=latency, responder=stage_responder)).start()
    try:
        cpu_started = own_cpu()
        output = subprocess.run(
            [sys.executable, __file__, "--replay", str(bodies), "--replay-url", server.base_url,
             "--concurrency", str(concurrency)],
            cwd=REPO, capture_output=True, text=True, check=True).stdout
        server_cpu = own_cpu() - cpu_started
        received = server.stats.total
        mean_in_flight = server.stats.in_flight_seconds / max(1e-9, server.stats.busy_seconds)
    finally:
        server.stop()
    figures = json.loads(output.rsplit("REPLAY", 1)[1])
    sizes = figures["waves"]
    return Replay(trajectories, requests, len(sizes),
                  sum(math.ceil(size / concurrency) for size in sizes), sizes, figures["wall"],
                  figures["cpu"], 1000 * server_cpu / max(1, received), mean_in_flight)


def measure(mode: str, rollouts: Path, trajectories: int, work: Path, latency: float,
            concurrency: int, shards: int, processes: int, scratch: Path,
            cprofile: Path | None = None, record_to: Path | None = None) -> Row:
    """One run against a fresh server; `record_to`: write its requests there (write_waves)."""
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
        started, cpu_started, run_started = time.perf_counter(), own_cpu(), time.time()
        running = [subprocess.Popen(
            skillsft_command(rollouts, work, server.base_url, concurrency, shards, *extra,
                             cprofile=cprofile),
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for _ in range(processes)]
        outputs = [process.communicate()[0] for process in running]
        wall, server_cpu = time.perf_counter() - started, own_cpu() - cpu_started
        for process, output in zip(running, outputs, strict=True):
            if process.returncode != 0:
                sys.exit(f"{mode}: run failed:\n{output[-3000:]}")
        requests, peak = server.stats.stage_requests, server.stats.peak_in_flight
        received = server.stats.total
        mean_in_flight = server.stats.in_flight_seconds / max(1e-9, server.stats.busy_seconds)
        if record_to is not None:
            write_waves(server, record_to)
    finally:
        server.stop()
        if luigid is not None:
            luigid.terminate()
            luigid.wait(timeout=10)
    rss = [int(out.rsplit("MAXRSS", 1)[1].split()[0]) / 1024 for out in outputs]
    cpu = [float(out.rsplit("MAXRSS", 1)[1].split()[2]) for out in outputs]
    journal = sum(p.stat().st_size for p in (work / "journal").glob("*.jsonl"))
    return Row(mode, trajectories, wall, requests, peak, requests * latency / concurrency, rss,
               journal / 2**20, stage_times(work), 1000 * server_cpu / max(1, received),
               mean_in_flight=mean_in_flight, cpu=cpu, timeline=task_timeline(work, run_started))


def ratio(measured: float, ideal: float) -> str:
    return f"{measured / ideal:.2f}" if ideal else "-"  # a 0 ms server has no ideal


def print_rows(rows: list[Row], latency: float, concurrency: int) -> None:
    print(f"ALFWorld pipeline, server latency {latency * 1000:.0f} ms, concurrency {concurrency} "
          "(machine-wide)")
    print("ideal s: requests x latency / concurrency; machine ideal s: the same requests "
          "replayed by a bare AsyncOpenAI loop on this machine (see the module doc)")
    print(f"{'mode':<24} {'traj':>6} {'wall s':>7} {'requests':>8} {'peak':>5} {'ideal s':>8} "
          f"{'machine ideal s':>15} {'/ideal':>7} {'/machine':>8} "
          f"{'peak RSS MiB (each process)':>28} {'journal MiB':>11} {'server ms/req':>13} "
          f"{'CPU s (each process)':>20}")
    for row in rows:
        rss = " + ".join(f"{r:.0f}" for r in row.rss_mib)
        machine, by_machine = ((f"{row.machine_ideal:.1f}", f"{row.wall / row.machine_ideal:.2f}")
                               if row.machine_ideal else ("-", "-"))
        print(f"{row.mode:<24} {row.trajectories:>6} {row.wall:>7.1f} {row.requests:>8} "
              f"{row.peak_in_flight:>5} {row.ideal:>8.1f} {machine:>15} "
              f"{ratio(row.wall, row.ideal):>7} {by_machine:>8} {rss:>28} {row.journal_mib:>11.1f} "
              f"{row.server_cpu_ms:>13.2f} {' + '.join(f'{c:.1f}' for c in row.cpu):>20}")


def print_replays(replays: list[Replay], latency: float, concurrency: int) -> None:
    """The machine ideal's own figures: what the bare loop and the server cost."""
    print("\nMachine ideal: the runs' requests replayed by a bare AsyncOpenAI loop, "
          f"{latency * 1000:.0f} ms, concurrency {concurrency}, wave after wave (waves ideal: "
          "each wave's rounds of `concurrency` requests x latency)")
    print(f"{'traj':>6} {'requests':>8} {'waves':>5} {'ideal s':>8} {'waves ideal s':>13} "
          f"{'machine s':>9} {'machine/ideal':>13} {'loop CPU s':>10} {'server ms/req':>13} "
          f"{'in flight':>9}")
    for replay in replays:
        ideal = replay.requests * latency / concurrency
        print(f"{replay.trajectories:>6} {replay.requests:>8} {replay.waves:>5} {ideal:>8.1f} "
              f"{replay.rounds * latency:>13.1f} {replay.wall:>9.1f} "
              f"{ratio(replay.wall, ideal):>13} "
              f"{replay.client_cpu:>10.2f} {replay.server_cpu_ms:>13.2f} "
              f"{replay.mean_in_flight:>9.1f}")
        shown = ", ".join(str(size) for size in replay.sizes[:24])
        print(f"{'':>6} requests per wave: {shown}{', ...' if len(replay.sizes) > 24 else ''}")


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
        print(f"  mean requests in flight at the server while it had any: "
              f"{row.mean_in_flight:.1f} of {concurrency}")
        if any("shards" in label for _, _, label in row.timeline):
            print("  timeline (s since the run started; shards/... are shard tasks):")
            for start, end, label in row.timeline:
                print(f"    {start:7.2f} {end:7.2f}  {label}")


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
                        help="also run one worker, default shards (--shards: those), on "
                        "--scale-trajectories")
    parser.add_argument("--scale-trajectories", type=int, default=20_000)
    parser.add_argument("--scale-latency", type=float, default=0.02)
    parser.add_argument("--shards", type=int, default=0,
                        help="the sharded modes' shard count (default: the central-scheduler "
                        "default for the corpus)")
    parser.add_argument("--no-machine-ideal", action="store_true",
                        help="skip the bare loop's replay of the requests")
    parser.add_argument("--replay", type=Path, help=argparse.SUPPRESS)  # the replay's child
    parser.add_argument("--replay-url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.replay:
        replay_child(args.replay, args.replay_url, args.concurrency)
        return
    wanted = set(args.modes.split(","))

    scratch = Path(tempfile.mkdtemp(prefix="skillsft-bench-"))
    rows: list[Row] = []
    scale_rows: list[Row] = []
    replays: list[Replay] = []
    try:
        for factor in (1, 2) if args.double else (1,):
            rollouts = scratch / f"rollouts-x{factor}"
            trajectories = build_corpus(rollouts, args.envs * factor)
            # What a command sharing a central scheduler chooses (one worker alone on the
            # in-process scheduler would not shard at all: pipeline/stages/shards.py).
            shards = args.shards or auto_shards(trajectories)
            modes = [(name, label, args.concurrency, count, processes)
                     for name, label, count, processes in (
                         ("unsharded", "1 worker, unsharded", 1, 1),
                         ("sharded", f"1 worker, {shards} shards", shards, 1),
                         ("two-workers", f"2 workers, {shards} shards", shards, 2))
                     if name in wanted]
            if factor == 1 and not args.skip_sequential:
                modes.insert(0, ("sequential", "sequential", 1, 1, 1))
            bodies = scratch / f"bodies-x{factor}.jsonl"
            recorded = 0
            first_row = len(rows)
            for _, mode, concurrency, count, processes in modes:
                work = scratch / f"work-x{factor}-{len(rows)}"
                profiled = args.cprofile if not rows else None
                record = (not args.no_machine_ideal and not recorded and processes == 1
                          and concurrency == args.concurrency)
                row = measure(mode, rollouts, trajectories, work, args.latency, concurrency,
                              count, processes, scratch, cprofile=profiled,
                              record_to=bodies if record else None)
                recorded = recorded or (row.requests if record else 0)
                if concurrency != args.concurrency:  # the baseline's ideal is its own
                    row.ideal = row.requests * args.latency / concurrency
                rows.append(row)
                print(f"  done: {mode} ({trajectories} trajectories) in {row.wall:.1f} s",
                      file=sys.stderr)
            shutil.rmtree(rollouts)
            if recorded:
                replay = machine_ideal(bodies, recorded, trajectories, args.latency,
                                       args.concurrency)
                replays.append(replay)
                for row in rows[first_row:]:
                    if row.requests == replay.requests:  # the same requests (sequential aside)
                        row.machine_ideal = replay.wall
                print(f"  done: machine ideal ({trajectories} trajectories) in "
                      f"{replay.wall:.1f} s", file=sys.stderr)
        if args.scale:
            rollouts = scratch / "rollouts-scale"
            trajectories = build_corpus(rollouts, math.ceil(args.scale_trajectories / 3))
            shards = args.shards or auto_shards(trajectories, local_workers=1)  # its default
            label = "1 worker, unsharded" if shards == 1 else f"1 worker, {shards} shards"
            row = measure(label, rollouts, trajectories,
                          scratch / "work-scale", args.scale_latency, args.concurrency, shards, 1,
                          scratch)
            scale_rows.append(row)
            print(f"  done: scale ({trajectories} trajectories) in {row.wall:.1f} s",
                  file=sys.stderr)
        if rows:
            print_rows(rows, args.latency, args.concurrency)
        if replays:
            print_replays(replays, args.latency, args.concurrency)
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
