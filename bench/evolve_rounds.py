"""Two rounds on the bundled ALFWorld sample: what evolving a bank costs, and what rebuilding
the corpus with the evolved bank costs.

    .venv/bin/python bench/evolve_rounds.py [--teacher openai|offline] [--protect SECTION ...]
        [--gate] [--round2 rest|all]

The sample's eight env folders are split: env000-003 are round 1, env004-007 round 2. Steps,
each a `skillsft` child process (openai: against the local test server over HTTP, answering
with skillsft.testing's stage responder; offline: the rule-based teacher):

1. `run` on round 1: the round-1 bank and corpus (work dir W);
2. `evolve` from that bank with round 2's rollouts (W; `--gate` adds an evaluator that scores
   categories covered minus 0.01 per entry);
3. `run` on all eight folders in a fresh work dir: a bank built from all rollouts at once;
4. `run` on round 1 with the evolved bank, in W: the corpus rebuilt for what changed.

Printed: edits by fate, the gate's decision, and per step the teacher requests (new and from
the journal), tokens and dollars, read from the stage manifests. `--include-mixed` is passed
to every command so the small sample yields more than a handful of trajectories.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from skillsft.tasks.targets import iter_manifests
from skillsft.testing.openai_server import FakeOpenAIServer, ServerConfig
from skillsft.testing.stage_responder import stage_responder

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "examples" / "rollouts" / "alfworld"
EVALUATOR = """\
import json, sys
bank = json.load(open(sys.argv[1]))
skills = bank.get("task_specific_skills") or {}
entries = (len(bank.get("general_skills", [])) + sum(map(len, skills.values()))
           + len(bank.get("common_mistakes", [])))
print(json.dumps({"score": sum(1 for s in skills.values() if s) - 0.01 * entries}))
"""


def split(root: Path) -> dict[str, Path]:
    folders = {"round1": root / "round1", "round2": root / "round2", "all": root / "all"}
    for name in sorted(p.name for p in SAMPLE.iterdir() if p.is_dir()):
        part = "round1" if name < "env004" else "round2"
        shutil.copytree(SAMPLE / name, folders[part] / name)
        shutil.copytree(SAMPLE / name, folders["all"] / name)
    return folders


def skillsft(teacher: list[str], *argv: str) -> None:
    done = subprocess.run([sys.executable, "-m", "skillsft", *argv, *teacher, "--include-mixed"],
                          cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "OPENAI_API_KEY": "bench-key"})
    if done.returncode != 0:
        raise SystemExit(f"skillsft {' '.join(argv)} failed:\n{done.stdout[-2000:]}"
                         f"{done.stderr[-2000:]}")


def usage(folder: Path, outputs: set[str]) -> dict[str, dict[str, float]]:
    """Teacher usage per stage of the manifests of `outputs` in `folder`."""
    found: dict[str, dict[str, float]] = {}
    for name, manifest in iter_manifests(folder):
        if name not in outputs:
            continue
        for part in manifest.get("teacher", []):
            row = found.setdefault(manifest["stage"], Counter())
            for key in ("calls_new", "calls_from_journal", "prompt_tokens", "completion_tokens"):
                row[key] += part.get(key, 0)
            row["cost_usd"] += part.get("cost_usd") or 0.0
    return found


def line(label: str, rows: dict[str, dict[str, float]]) -> str:
    total = Counter()
    for row in rows.values():
        total.update(row)
    stages = ", ".join(f"{stage} {int(r['calls_new'])} new + {int(r['calls_from_journal'])} "
                       "from journal" for stage, r in sorted(rows.items()))
    return (f"{label:<38} {int(total['calls_new']):>4} new {int(total['calls_from_journal']):>4}"
            f" journal {int(total['prompt_tokens'] + total['completion_tokens']):>7} tokens "
            f"${total['cost_usd']:.4f}   ({stages})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", choices=("openai", "offline"), default="openai")
    parser.add_argument("--protect", action="append", default=[])
    parser.add_argument("--gate", action="store_true")
    parser.add_argument("--round2", choices=("rest", "all"), default="rest",
                        help="round 2's rollouts: env004-007 (default) or all eight envs")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="evolve-bench-"))
    folders = split(root)
    server = None
    teacher = ["--teacher", "offline"]
    if args.teacher == "openai":
        server = FakeOpenAIServer(ServerConfig(responder=stage_responder)).start()
        teacher = ["--teacher", "openai", "--base-url", server.base_url]
    work, scratch = root / "work", root / "scratch"
    try:
        skillsft(teacher, "run", "alfworld", "--rollout-dir", str(folders["round1"]),
                 "--work-dir", str(work))
        first = usage(work, {"generated_memories.json", "skill_bank.json",
                             "distilled_trajectories.json"})
        extra = [f"--protect={s}" for s in args.protect]
        if args.gate:
            script = root / "evaluate.py"
            script.write_text(EVALUATOR)
            extra += ["--gate-command", f"{sys.executable} {script} {{bank}}"]
        skillsft(teacher, "evolve", "alfworld", "--skill-bank", str(work / "skill_bank.json"),
                 "--rollout-dir", str(folders["round2" if args.round2 == "rest" else "all"]),
                 "--work-dir", str(work), *extra)
        folder = work / "evolution" / "round-001"
        round2 = usage(folder, {"generated_memories.json", "candidate_skill_bank.json"})
        skillsft(teacher, "run", "alfworld", "--rollout-dir", str(folders["all"]),
                 "--work-dir", str(scratch))
        at_once = usage(scratch, {"generated_memories.json", "skill_bank.json"})
        skillsft(teacher, "run", "alfworld", "--skill-bank", str(folder / "skill_bank.json"),
                 "--rollout-dir", str(folders["round1"]), "--work-dir", str(work))
        rebuild = usage(work, {"distilled_trajectories.json"})
    finally:
        if server is not None:
            server.stop()
    edits = [json.loads(x) for x in (folder / "edits.jsonl").read_text().splitlines() if x]
    selection = dict(iter_manifests(folder))["candidate_skill_bank.json"]["counts"]
    gate = json.loads((folder / "gate.json").read_text())
    print(f"teacher: {args.teacher}; protect: {args.protect or 'none'}; work: {root}")
    print("edits: " + ", ".join(f"{k.removeprefix('edits_')} {v}" for k, v in selection.items()
                                if k.startswith("edits_")))
    print("final fates: " + ", ".join(f"{n} {f}" for f, n in sorted(
        Counter(e["fate"] for e in edits).items())))
    print(f"gate: {gate['decision']}" + (f" (candidate {gate['candidate_score']:g}, current "
                                         f"{gate['current_score']:g})"
                                         if "candidate_score" in gate else ""))
    print(line("round 1: run (bank + corpus)", first))
    print(line("round 2: evolve (memories + edits)", round2))
    print(line("bank from all rollouts at once", at_once))
    print(line("corpus rebuilt with the evolved bank", rebuild))
    print(line("  vs round 1's full distillation", {"distill": first.get("distill", {})}))
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
