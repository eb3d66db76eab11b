"""Fixed costs: start-up, the work around the teacher in a small run, a re-run with nothing to do.

    .venv/bin/python bench/startup.py [--repeat 5] [--questions 300] [--latency 0.1]
        [--rerun-envs 700] [--skip-run] [--skip-rerun]

Every figure is the median of `--repeat` runs (the search run: of 3) and is printed beside its
ratio to two baselines measured in the same run, `python -c pass` (the interpreter alone) and
`python -c "import luigi"`, so results taken on a busy machine can still be compared.

- `skillsft --version`, `skillsft --help`, `skillsft run --help`; and which heavy packages
  `--version` loaded (none of openai, datasets, pyarrow, luigi is the goal).
- A Search run of `--questions` question files (examples/rollouts/search replicated, each copy's
  question made unique) against the test server in its own process (`python -m
  skillsft.testing --stages --latency L`), concurrency 16 pinned. Split into: start-up (process
  start to the line naming the teacher), the pre-flight (to the pre-flight line: importing the
  openai client, the endpoint probes), the stages' own time from their manifests (parse,
  memories, aggregate, distill, flatten), and the rest: Luigi's scheduling between stages, the
  closing stages (skill document, report), the summary and the process's exit.
- A re-run with nothing to do on a finished ALFWorld work dir of `--rerun-envs` x 3
  trajectories (made once with the offline teacher, which takes a while at 700 envs).
"""

import argparse
import importlib.util
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import orjson

REPO = Path(__file__).resolve().parents[1]
SEARCH_SAMPLE = REPO / "examples" / "rollouts" / "search"
QUESTION = re.compile(r"^(Your question: .*)$", re.MULTILINE)
CLOSED_STAGES = ("parse", "memories", "aggregate", "distill", "flatten")
HEAVY = ("openai", "datasets", "pyarrow", "luigi", "huggingface_hub", "pydantic")
PY = sys.executable


def median_seconds(command: list[str], repeat: int, **kwargs) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, **kwargs)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def modules_loaded_by_version() -> list[str]:
    probe = ("import sys, runpy; sys.argv = ['skillsft', '--version']\n"
             "try:\n    runpy.run_module('skillsft', run_name='__main__')\n"
             "except SystemExit:\n    pass\n"
             f"print(','.join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)")
    done = subprocess.run([PY, "-c", probe], capture_output=True, text=True, check=True)
    return [m for m in done.stderr.strip().split(",") if m]


def build_search_corpus(root: Path, questions: int) -> int:
    sources = sorted(p for p in SEARCH_SAMPLE.rglob("*.txt"))
    for number in range(questions):
        source = sources[number % len(sources)]
        target = root / source.parent.name / f"q{number:05d}.txt"
        target.parent.mkdir(parents=True, exist_ok=True)
        text = QUESTION.sub(lambda m, n=number: f"{m.group(1)} (copy {n})", source.read_text(), 1)
        target.write_text(text)
    return questions


def start_server(latency: float) -> tuple[subprocess.Popen, str]:
    server = subprocess.Popen([PY, "-m", "skillsft.testing", "--stages", "--latency",
                               str(latency)], stdout=subprocess.PIPE, text=True)
    first = server.stdout.readline() if server.stdout else ""
    if not first.startswith("PORT "):
        sys.exit(f"the test server did not start: {first!r}")
    return server, f"http://127.0.0.1:{first.split()[1]}/v1"


def search_run(rollouts: Path, work: Path, base_url: str) -> dict[str, float]:
    """One run; seconds to the teacher line, to the pre-flight line, in each closed stage, and
    in all."""
    command = [PY, "-m", "skillsft", "run", "search", "--teacher", "openai", "--base-url",
               base_url, "--rollout-dir", str(rollouts), "--work-dir", str(work),
               "--concurrency", "16", "--max-concurrency", "16"]
    env = {**os.environ, "OPENAI_API_KEY": "sk-bench"}
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env=env, cwd=REPO)
    teacher_line = preflight = None
    lines = []
    for line in process.stdout or []:
        lines.append(line)
        if teacher_line is None and "teacher for this run" in line:
            teacher_line = time.perf_counter() - started
        if preflight is None and "pre-flight" in line:
            preflight = time.perf_counter() - started
    process.wait()
    wall = time.perf_counter() - started
    if process.returncode != 0:
        sys.exit("search run failed:\n" + "".join(lines[-40:]))
    if teacher_line is None or preflight is None:
        sys.exit("search run: no teacher or pre-flight line:\n" + "".join(lines[:20]))
    figures = {"wall": wall, "start-up": teacher_line, "pre-flight": preflight - teacher_line}
    for path in (work / ".skillsft").glob("*.manifest.json"):
        manifest = orjson.loads(path.read_bytes())
        if manifest.get("stage") in CLOSED_STAGES:
            figures[manifest["stage"]] = manifest["wall_seconds"]
    figures["the rest"] = wall - preflight - sum(figures.get(stage, 0.0)
                                                 for stage in CLOSED_STAGES)
    figures["pre-flight + the rest"] = figures["pre-flight"] + figures["the rest"]
    return figures


def end_to_end_bench() -> ModuleType:
    """bench/end_to_end.py, loaded from its file (bench/ is not a package): its corpus builder."""
    spec = importlib.util.spec_from_file_location("end_to_end", REPO / "bench" / "end_to_end.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def finished_alfworld(scratch: Path, envs: int) -> list[str]:
    rollouts, work = scratch / "alfworld", scratch / "alfworld-work"
    trajectories = end_to_end_bench().build_corpus(rollouts, envs)
    command = [PY, "-m", "skillsft", "run", "alfworld", "--teacher", "offline",
               "--rollout-dir", str(rollouts), "--work-dir", str(work),
               "--n-success-envs", "1000000", "--n-fail-envs", "1000000"]
    print(f"  making a finished work dir of {trajectories} trajectories (offline teacher)",
          file=sys.stderr)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   cwd=REPO)
    return command


def row(name: str, seconds: float, base: dict[str, float]) -> str:
    ratios = "  ".join(f"{seconds / value:6.1f}x {key}" for key, value in base.items())
    return f"  {name:<44} {seconds:7.3f} s   {ratios}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--questions", type=int, default=300)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--rerun-envs", type=int, default=700)
    parser.add_argument("--skip-run", action="store_true")
    parser.add_argument("--skip-rerun", action="store_true")
    args = parser.parse_args()

    base = {"python -c pass": median_seconds([PY, "-c", "pass"], args.repeat),
            "import luigi": median_seconds([PY, "-c", "import luigi"], args.repeat)}
    print(f"baselines (medians of {args.repeat}):")
    for name, seconds in base.items():
        print(f"  {name:<44} {seconds:7.3f} s")
    print("start-up:")
    for flags in (["--version"], ["--help"], ["run", "--help"]):
        seconds = median_seconds([PY, "-m", "skillsft", *flags], args.repeat, cwd=REPO)
        print(row("skillsft " + " ".join(flags), seconds, base))
    print(f"  heavy packages `skillsft --version` loads: {modules_loaded_by_version() or 'none'}")

    scratch = Path(tempfile.mkdtemp(prefix="skillsft-startup-"))
    try:
        if not args.skip_run:
            rollouts = scratch / "search"
            build_search_corpus(rollouts, args.questions)
            runs = []
            for attempt in range(3):
                server, url = start_server(args.latency)
                try:
                    runs.append(search_run(rollouts, scratch / f"search-work-{attempt}", url))
                finally:
                    server.terminate()
                    server.wait(timeout=10)
            print(f"search run, {args.questions} question files, {args.latency * 1000:.0f} ms "
                  "latency, concurrency 16 (medians of 3):")
            for key in ["wall", "start-up", "pre-flight", *CLOSED_STAGES, "the rest",
                        "pre-flight + the rest"]:
                values = [run[key] for run in runs if key in run]
                if values:
                    print(row(key, statistics.median(values), base))
            print("  (the rest = Luigi's scheduling, skill document, report, summary, exit)")
            rerun = [PY, "-m", "skillsft", "run", "search", "--teacher", "offline",
                     "--rollout-dir", str(rollouts), "--work-dir", str(scratch / "search-off")]
            subprocess.run(rerun, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, cwd=REPO)
            print(row(f"re-run, nothing to do ({args.questions} files)",
                      median_seconds(rerun, args.repeat, cwd=REPO), base))
        if not args.skip_rerun:
            command = finished_alfworld(scratch, args.rerun_envs)
            print(row(f"re-run, nothing to do ({args.rerun_envs * 3} trajectories)",
                      median_seconds(command, args.repeat, cwd=REPO), base))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
