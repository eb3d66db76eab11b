"""`skillsft preferences` and `skillsft export-skills`: the root task (or the direct work) of each.

`preferences` builds the same `PreferencePairs` task `run --preferences` builds, pointed at the
user's rollout folder, skill bank and output file. `export-skills` needs no teacher and pays for
nothing, so it runs directly: load the bank, render, write atomically.
"""

import argparse
from collections.abc import Mapping
from pathlib import Path

import luigi

from skillsft import settings


def build_command(args: argparse.Namespace, environ: Mapping[str, str]) -> luigi.Task:
    if not Path(args.skill_bank).is_file():
        raise settings.UsageError(f"--skill-bank {args.skill_bank} is not a file")
    if args.command == "export-skills":
        raise settings.CommandDone(export_skills(args.env, Path(args.skill_bank),
                                                 Path(args.output)))
    from skillsft.tasks.preferences import PreferencePairs

    rollout_dir = settings.resolve_rollout_dir(args, environ)
    settings.check_rollouts(rollout_dir, args.env)
    output = Path(args.output)
    params = {**settings.stage_params(args), **settings.teacher_params(args, environ)}
    return PreferencePairs(
        env=args.env,
        work_dir=str(output.parent),
        output_path=str(output),
        rollout_dir=str(rollout_dir),
        skill_bank=str(args.skill_bank),
        require_pairs=True,
        **{k: v for k, v in params.items() if k in PreferencePairs.get_param_names()},
    )


def export_skills(env: str, bank_path: Path, output_dir: Path) -> int:
    from skillsft.pipeline.envs import get_env
    from skillsft.pipeline.errors import InputError
    from skillsft.pipeline.formats.skill_bank_io import load_skill_bank
    from skillsft.pipeline.stages.skill_document import document_path, render_skill_document
    from skillsft.tasks.targets import write_bytes_atomically

    spec = get_env(env)
    try:
        bank = load_skill_bank(bank_path, spec)
    except InputError as exc:
        raise settings.UsageError(str(exc)) from None
    path = document_path(output_dir, spec)
    write_bytes_atomically(path, render_skill_document(bank, spec).encode())
    print(f"skillsft: wrote {path}")
    return 0
