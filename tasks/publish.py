"""Stage 5: `skillsft publish` and the Publish task at the end of a run given a repo id.

Both call `pipeline.publish.publish`; the task's output is a small receipt (what was committed
where) so a re-run with the same corpus and repo does not upload again.
"""

import argparse
import sys
from pathlib import Path

import luigi

from skillsft.pipeline.corpus_metrics import DEFAULT_CUTOFF_LEN
from skillsft.pipeline.errors import SkillsftError
from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.stages.publish import PublishOptions, publish
from skillsft.tasks.base import StageOutput, hash_file
from skillsft.tasks.params import CardParams
from skillsft.tasks.report import detect_env
from skillsft.tasks.stages import BuildReport

CARD = ("license", "pretty_name", "citation", "tokenizer", "cutoff_len")


def card_options(source: object) -> dict[str, object]:
    """PublishOptions' card fields from a task (or parsed flags); the citation file is read."""
    citation = getattr(source, "citation", "")
    return {
        "license": getattr(source, "license", "") or None,
        "pretty_name": getattr(source, "pretty_name", "") or None,
        "citation": Path(citation).read_text(encoding="utf-8") if citation else None,
        "tokenizer": getattr(source, "tokenizer", "") or None,
        "cutoff_len": getattr(source, "cutoff_len", None) or DEFAULT_CUTOFF_LEN,
    }


class PublishCorpus(BuildReport, CardParams):
    stage = "publish"
    shaping_params = ("repo_id", "private", "revision", "validation_fraction", *CARD)
    repo_id = luigi.Parameter()
    private = luigi.BoolParameter(default=False)
    revision = luigi.Parameter(default="")
    validation_fraction = luigi.FloatParameter(default=0.0)
    allow_offline = luigi.BoolParameter(default=False)

    def external_signatures(self) -> dict[str, str]:
        """The citation file's content, not only its path: an edited BibTeX is a new card."""
        signatures = super().external_signatures()
        if self.citation and Path(self.citation).is_file():
            signatures["citation"] = hash_file(Path(self.citation))
        return signatures

    @property
    def output_name(self) -> str:  # type: ignore[override]
        return f"published_{self.env}.json"

    def requires(self) -> list[luigi.Task]:
        return [self.clone(BuildReport)]

    def compute(self) -> StageOutput:
        options = PublishOptions(private=self.private, revision=self.revision or None,
                                 validation_fraction=self.validation_fraction,
                                 allow_offline=self.allow_offline, **card_options(self))
        result = publish(Path(self.work_dir), self.env, self.repo_id, options)
        print("\n".join(result.summary_lines()))
        receipt = {"repo_id": result.repo_id, "revision": result.revision,
                   "files": result.files, "rows": result.rows, "splits": result.splits,
                   "commit_url": result.commit_url}
        return StageOutput(payload=jsonio.dumps(receipt), counts={"rows": result.rows})


def publish_command(args: argparse.Namespace) -> int:
    work_dir = Path(args.work_dir)
    env = detect_env(work_dir)
    if not args.repo_id and not args.dry_run:
        print("skillsft publish: --repo-id USER/NAME is required (or use --dry-run)",
              file=sys.stderr)
        return 2
    options = PublishOptions(
        private=args.private, revision=args.revision, dry_run=args.dry_run,
        commit_message=args.commit_message, validation_fraction=args.validation_fraction,
        allow_offline=args.allow_offline,
        **card_options(args),
    )
    try:
        result = publish(work_dir, env, args.repo_id or f"<you>/{env}-sft", options)
    except SkillsftError as exc:
        print(f"skillsft publish: {exc}", file=sys.stderr)
        return 1
    print("\n".join(result.summary_lines()))
    return 0
