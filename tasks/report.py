"""`skillsft report`: rebuild report.json and report.md of a work dir from its manifests."""

from pathlib import Path

from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.stages.report import build_report, render_report_md
from skillsft.tasks.targets import iter_manifests, write_bytes_atomically


def detect_env(work_dir: Path) -> str:
    """The environment whose corpus lies in the work dir (every stage manifest records it)."""
    for _name, manifest in iter_manifests(work_dir):
        env = manifest.get("params", {}).get("env")
        if env:
            return str(env)
    raise SystemExit(f"skillsft: {work_dir} holds no finished stage; run `skillsft run` first")


def report_command(work_dir: Path, cutoff_len: int = 8192) -> None:
    env = detect_env(work_dir)
    report = build_report(work_dir, env, cutoff_len)
    write_bytes_atomically(work_dir / "report.json", jsonio.dumps(report))
    write_bytes_atomically(work_dir / "report.md", render_report_md(report).encode())
    print(f"skillsft: wrote {work_dir / 'report.json'} and {work_dir / 'report.md'}")
