"""`skillsft evolve <env> --skill-bank CURRENT --rollout-dir NEW`: one round of bank evolution.

Everything the command can be told wrong is checked here, before stage 1 or any teacher call:
the rollout folder, the current bank (the file, the field, the fix), the protected sections
and the gate command (it must name `{bank}` and be startable). The graph is built from today's
stage tasks plus tasks/evolve.py; skillsft/cli.py runs it with the same `execute` as every
command and prints the round's result (`round_summary`) at the end.
"""

import argparse
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skillsft import graph
from skillsft.options_cli import options_from_args
from skillsft.pipeline.envs import ENVS
from skillsft.pipeline.errors import InputError
from skillsft.pipeline.stages.evolve import rounds
from skillsft.pipeline.stages.evolve.bank_view import sections_of
from skillsft.pipeline.stages.evolve.gate import GateCommandError, command_words, sha256_of
from skillsft.pipeline.stages.evolve.options import EvolveOptions, GateOptions
from skillsft.settings import UsageError, check_rollouts, resolve_teacher
from skillsft.tasks.base import InputFile
from skillsft.tasks.evolve import EvolveCandidate, EvolveGate
from skillsft.tasks.preferences import SkillDocument
from skillsft.tasks.run import RunEnv
from skillsft.tasks.stages import GenerateMemories, ParseRollouts

EVOLVE_TASKS = (ParseRollouts, GenerateMemories, EvolveCandidate, EvolveGate)


def check_bank(path: Path, env: str) -> None:
    from skillsft.pipeline.stages.skill_bank_io import load_skill_bank

    if not path.is_file():
        raise UsageError(f"--skill-bank {path} is not a file")
    try:
        load_skill_bank(path, ENVS[env])
    except InputError as exc:
        raise UsageError(f"--skill-bank {exc}") from None


def check_gate(gate: GateOptions) -> None:
    """A gate command that cannot start fails now, before anything is paid for."""
    if not gate.gate_command:
        return
    program = command_words(gate.gate_command, Path("bank.json"))[0]
    if shutil.which(program) is None:
        raise GateCommandError(f"--gate-command cannot start {program!r}: not found or not "
                               "executable; give a path or a program on PATH")


def check_protected(options: EvolveOptions, env: str) -> None:
    known = sections_of(ENVS[env])
    unknown = [s for s in options.protect if s not in known]
    if unknown:
        raise UsageError(f"--protect {unknown[0]}: no such section; {env} banks have "
                         f"{', '.join(known)}")


def evolve_graph(args: argparse.Namespace, environ: Mapping[str, str]) -> tuple[RunEnv, Path]:
    """The round's graph and its folder (round.json written unless --dry-run)."""
    rollout = args.rollout_dir or environ.get("ROLLOUT_DIR")
    if not rollout:
        raise UsageError("evolve needs the new rollouts: --rollout-dir NEW (or $ROLLOUT_DIR)")
    rollout_dir = Path(rollout)
    check_rollouts(rollout_dir, args.env)
    bank = Path(args.skill_bank)
    check_bank(bank, args.env)
    options = {name: options_from_args(model, args)
               for name, model in graph.options_models(*EVOLVE_TASKS).items()}
    check_protected(options["evolve"], args.env)
    check_gate(options["gate"])
    work_dir = Path(args.work_dir or environ.get("WORK_DIR") or Path("runs") / args.env)
    sha = sha256_of(bank)
    number = rounds.find_round(work_dir, sha, rollout_dir)
    folder = rounds.round_dir(work_dir, number)
    if not args.dry_run:
        rounds.record_round(work_dir, number, sha, rollout_dir, str(bank))
    teacher = resolve_teacher(args, environ)
    place: dict[str, Any] = {"env": args.env, "work_dir": str(work_dir)}
    common = {**place, "failure": options["failure"]}
    parse = ParseRollouts(**common, rollout_dir=str(rollout_dir), selection=options["selection"],
                          output_path=str(folder / rounds.PROCESSED))
    memories = GenerateMemories(**common, inputs=(parse,), teacher=teacher,
                                memories=options["memories"],
                                output_path=str(folder / rounds.MEMORIES))
    current = InputFile(path=str(bank), role="skill_bank")
    candidate = EvolveCandidate(**common, inputs=(memories, current), round_number=number,
                                teacher=teacher, evolve=options["evolve"],
                                output_path=str(folder / rounds.CANDIDATE))
    gate = EvolveGate(**place, inputs=(candidate, current), round_number=number,
                      teacher_name=teacher.kind, gate=options["gate"],
                      output_path=str(folder / rounds.ACCEPTED))
    from skillsft.pipeline.stages.skill_document import document_path

    document = SkillDocument(**place, inputs=(gate,),
                             output_path=str(document_path(folder, ENVS[args.env])))
    return RunEnv(work_dir=str(work_dir), wanted=(document,)), folder


def round_summary(folder: Path) -> list[str]:
    """What the round did, from its files: edits by fate, the gate's decision, the bank."""
    from skillsft.pipeline.formats import jsonio

    gate = jsonio.load(folder / rounds.GATE)
    fates = _fates((folder / rounds.EDITS).read_bytes().splitlines())
    decision = gate["decision"]
    scores = (f" (candidate {gate['candidate_score']:g} vs current {gate['current_score']:g})"
              if "candidate_score" in gate else "")
    edits = ", ".join(f"{n} {fate.replace('_', ' ')}" for fate, n in sorted(fates.items()))
    return [f"skillsft: evolve {folder.name}: edits: {edits or 'none proposed'}",
            f"skillsft: gate: {decision.replace('_', ' ')}{scores}; bank: "
            f"{folder / rounds.ACCEPTED}; what changed: {folder / rounds.CHANGES}"]


def _fates(lines: list[bytes]) -> dict[str, int]:
    import orjson

    counts: dict[str, int] = {}
    for line in lines:
        if line.strip():
            fate = orjson.loads(line)["fate"]
            counts[fate] = counts.get(fate, 0) + 1
    return counts
