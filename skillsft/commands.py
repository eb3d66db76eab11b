"""The commands that run directly, without a Luigi graph: `publish`, `report`, `export-skills`.

Each returns its exit status; none needs a teacher or pays for anything.
"""

import argparse
import sys
from pathlib import Path

from skillsft.options_cli import options_from_args
from skillsft.pipeline import workdir
from skillsft.pipeline.errors import SkillsftError
from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.stages.publish_options import CardOptions, HubOptions
from skillsft.pipeline.stages.report_options import ReportOptions
from skillsft.settings import UsageError
from skillsft.tasks.publish import card_fields
from skillsft.tasks.targets import iter_manifests, write_bytes_atomically


def detect_env(work_dir: Path) -> str:
    """The environment whose corpus lies in the work dir (every stage manifest records it)."""
    for _name, manifest in iter_manifests(work_dir):
        env = manifest.get("params", {}).get("env")
        if env:
            return str(env)
    raise UsageError(f"{work_dir} holds no finished stage; run `skillsft run` first")


def report_command(args: argparse.Namespace) -> int:
    from skillsft.pipeline.stages.report import build_report, render_report_md

    work_dir = Path(args.work_dir)
    env = detect_env(work_dir)
    options = options_from_args(ReportOptions, args)
    report = build_report(work_dir, env, options.cutoff_len)
    write_bytes_atomically(work_dir / workdir.REPORT_JSON, jsonio.dumps(report))
    write_bytes_atomically(work_dir / workdir.REPORT_MD, render_report_md(report).encode())
    print(f"skillsft: wrote {work_dir / workdir.REPORT_JSON} and {work_dir / workdir.REPORT_MD}")
    return 0


def publish_command(args: argparse.Namespace) -> int:
    from skillsft.pipeline.stages.publish import PublishOptions, publish

    work_dir = Path(args.work_dir)
    env = detect_env(work_dir)
    hub = options_from_args(HubOptions, args)
    if not hub.repo_id and not args.dry_run:
        print("skillsft publish: --repo-id USER/NAME is required (or use --dry-run)",
              file=sys.stderr)
        return 2
    card = card_fields(options_from_args(CardOptions, args), options_from_args(ReportOptions, args))
    options = PublishOptions(
        private=hub.private, revision=hub.revision or None, dry_run=args.dry_run,
        commit_message=args.commit_message, validation_fraction=hub.validation_fraction,
        allow_offline=hub.allow_offline, **card,  # type: ignore[arg-type]
    )
    try:
        result = publish(work_dir, env, hub.repo_id or f"<you>/{env}-sft", options)
    except SkillsftError as exc:
        print(f"skillsft publish: {exc}", file=sys.stderr)
        return 1
    print("\n".join(result.summary_lines()))
    return 0


def export_skills_command(args: argparse.Namespace) -> int:
    """SKILL.md from a skill bank: no teacher, nothing paid, so no graph: load, render, write."""
    from skillsft.pipeline.envs import get_env
    from skillsft.pipeline.errors import InputError
    from skillsft.pipeline.stages.skill_bank_io import load_skill_bank
    from skillsft.pipeline.stages.skill_document import document_path, render_skill_document

    if not Path(args.skill_bank).is_file():
        raise UsageError(f"--skill-bank {args.skill_bank} is not a file")
    spec = get_env(args.env)
    try:
        bank = load_skill_bank(Path(args.skill_bank), spec)
    except InputError as exc:
        raise UsageError(str(exc)) from None
    path = document_path(Path(args.output), spec)
    write_bytes_atomically(path, render_skill_document(bank, spec).encode())
    print(f"skillsft: wrote {path}")
    return 0


# Commands that run without a graph, by name.
DIRECT_COMMANDS = {
    "publish": publish_command,
    "report": report_command,
    "export-skills": export_skills_command,
}
