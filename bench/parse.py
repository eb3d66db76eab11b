"""Stage-1 benchmark: 20,000 rollout files, our parse stage against a plain regex script.

    .venv/bin/python bench/parse.py [--files 20000] [--workers 2]

Builds the corpus by replicating the ALFWorld sample (examples/rollouts/alfworld) into a temp
folder as env folders, then times, each in a fresh child process, (1) the baseline below: a
straightforward script that reads each file whole and pulls steps, lists and the task out with
regexes, then applies the same selection and loop removal; and (2) `parse_rollouts`. It prints
files/s for both, their ratio, and each child's peak RSS. Numbers are only comparable within a
run (same machine, same cache state), which is why both are measured here.
"""

import argparse
import ast
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "examples" / "rollouts" / "alfworld"

HEADER = re.compile(
    r"^Step (-?\d+) \| Action: (.*?) \| Reward: ([-\d.]+) \| Done: (True|False)$", re.MULTILINE
)
ADMISSIBLE = re.compile(r"Your admissible actions of the current situation are: \[(.*?)\]\.", re.S)
TASK = re.compile(r"Your task is to: (.*?)\.?$", re.MULTILINE)
BOILER = re.compile(
    r"Now it's your turn to take an action\..*?(\n\n|$)|-= Welcome to TextWorld, ALFRED! =-", re.S
)


def baseline(rollout_dir: Path) -> int:
    """The straightforward script: regexes over each whole file, then selection and dedupe."""
    kept = []
    for env in sorted(p for p in rollout_dir.iterdir() if p.is_dir()):
        episodes = []
        for path in sorted(env.glob("*.txt")):
            text = path.read_text()
            task = TASK.search(text)
            headers = list(HEADER.finditer(text))
            steps = []
            for i, m in enumerate(headers):
                end = headers[i + 1].start() if i + 1 < len(headers) else len(text)
                block = text[m.end() : end]
                obs = block.split("Obs: ", 1)[-1]
                adm = ADMISSIBLE.search(obs)
                actions = []
                if adm:
                    body = adm.group(1)
                    if body.startswith("'"):
                        actions = ast.literal_eval("[" + body + "]")
                    else:
                        actions = [a.strip() for a in re.split(r",(?![^\[]*\])", body)]
                    obs = obs[: adm.start()]
                obs = BOILER.sub("", TASK.sub("", obs)).strip()
                steps.append(
                    {
                        "step_id": f"Step {m.group(1)}",
                        "action": None if m.group(1) == "-1" else m.group(2),
                        "observation": obs,
                        "admissible_actions": [a for a in actions if a != "help"],
                        "reward": float(m.group(3)),
                        "done": m.group(4) == "True",
                    }
                )
            won = any(s["done"] and s["reward"] >= 10 for s in steps)
            episodes.append((len(steps), path.name, won, task.group(1) if task else "", steps))
        if len(episodes) < 3:
            continue
        wins = sum(e[2] for e in episodes)
        if wins >= 2 and len(episodes) - wins >= 1:
            continue
        for _, _, _, _, steps in sorted(episodes)[:3]:
            out: list[dict] = []
            for step in steps:
                out.append(step)
                for length in range(1, len(out) // 2 + 1):
                    acts = [s["action"] for s in out]
                    if acts[-length:] == acts[-2 * length : -length]:
                        del out[-length:]
                        break
            kept.append(out)
    return len(kept)


def ours(rollout_dir: Path, workers: int) -> int:
    from skillsft.pipeline.envs import get_env
    from skillsft.pipeline.stages.parse import parse_rollouts

    return parse_rollouts(rollout_dir, get_env("alfworld"), workers=workers).counts["files_parsed"]


def build_corpus(target: Path, n_files: int) -> int:
    envs = sorted(p for p in SAMPLE.iterdir() if p.is_dir())
    written = 0
    copy = 0
    while written < n_files:
        for env in envs:
            folder = target / f"env{copy:06d}"
            folder.mkdir()
            for src in sorted(env.glob("*.txt")):
                if written == n_files:
                    break
                shutil.copyfile(src, folder / src.name)
                written += 1
            copy += 1
            if written == n_files:
                break
    return written


def run_child(kind: str, corpus: Path, workers: int) -> tuple[float, float]:
    """(seconds, peak RSS MiB of the child and its workers) for one measured run."""
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            kind,
            "--corpus",
            str(corpus),
            "--workers",
            str(workers),
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd=REPO,
    ).stdout.split()
    return float(out[0]), float(out[1])


def child(kind: str, corpus: Path, workers: int) -> None:
    start = time.perf_counter()
    baseline(corpus) if kind == "baseline" else ours(corpus, workers)
    elapsed = time.perf_counter() - start
    peak_kib = max(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
    )
    print(elapsed, peak_kib / 1024)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--child", choices=["baseline", "ours"])
    parser.add_argument("--corpus", type=Path)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.corpus, args.workers)
        return
    with tempfile.TemporaryDirectory(prefix="skillsft-bench-") as tmp:
        n = build_corpus(Path(tmp), args.files)
        run_child("baseline", Path(tmp), 1)  # warm the page cache for both contenders
        base_s, base_mb = run_child("baseline", Path(tmp), 1)
        ours_s, ours_mb = run_child("ours", Path(tmp), args.workers)
    print(f"corpus: {n} files replicated from {SAMPLE.relative_to(REPO)}")
    print(
        f"baseline regex script: {n / base_s:8.0f} files/s  "
        f"({base_s:.2f} s, peak {base_mb:.0f} MiB)"
    )
    print(
        f"skillsft stage 1:      {n / ours_s:8.0f} files/s  "
        f"({ours_s:.2f} s, peak {ours_mb:.0f} MiB, "
        f"workers={args.workers})"
    )
    print(f"ratio (ours / baseline): {base_s / ours_s:.2f}x")


if __name__ == "__main__":
    main()
