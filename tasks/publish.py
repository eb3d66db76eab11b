"""Stage 5 at the end of a run given a repo id: publish the corpus the report describes.

The task's output is a small receipt (what was committed where) so a re-run with the same
corpus and repo does not upload again. `skillsft publish` (skillsft/commands.py) calls the same
`pipeline.stages.publish.publish` directly.
"""

from pathlib import Path

import luigi

from skillsft.pipeline import workdir
from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.stages.publish_options import CardOptions, HubOptions
from skillsft.pipeline.stages.report_options import ReportOptions
from skillsft.tasks.base import StageOutput, StageTask, hash_file
from skillsft.tasks.options_param import OptionsParameter


def card_fields(card: CardOptions, report: ReportOptions) -> dict[str, object]:
    """PublishOptions' card fields; the citation file is read."""
    return {
        "license": card.license or None,
        "pretty_name": card.pretty_name or None,
        "citation": Path(card.citation).read_text(encoding="utf-8") if card.citation else None,
        "tokenizer": card.tokenizer or None,
        "skill_variants": card.variants.names,
        "cutoff_len": report.cutoff_len,
    }


class PublishCorpus(StageTask):
    """Input: the report task (which read the corpus)."""

    stage = "publish"
    hub = OptionsParameter(HubOptions)
    card = OptionsParameter(CardOptions)
    report = OptionsParameter(ReportOptions)

    def external_signatures(self) -> dict[str, str]:
        """The citation file's content, not only its path: an edited BibTeX is a new card."""
        signatures = super().external_signatures()
        if self.card.citation and Path(self.card.citation).is_file():
            signatures["citation"] = hash_file(Path(self.card.citation))
        return signatures

    @property
    def output_name(self) -> str:  # type: ignore[override]
        return workdir.published(self.env)

    def compute(self) -> StageOutput:
        from skillsft.pipeline.stages.publish import PublishOptions, publish

        folder = Path(luigi.task.flatten(self.input())[0].path).parent
        options = PublishOptions(private=self.hub.private, revision=self.hub.revision or None,
                                 validation_fraction=self.hub.validation_fraction,
                                 allow_offline=self.hub.allow_offline,
                                 **card_fields(self.card, self.report))  # type: ignore[arg-type]
        result = publish(folder, self.env, self.hub.repo_id, options)
        print("\n".join(result.summary_lines()))
        receipt = {"repo_id": result.repo_id, "revision": result.revision,
                   "files": result.files, "rows": result.rows, "splits": result.splits,
                   "commit_url": result.commit_url}
        return StageOutput(payload=jsonio.dumps(receipt), counts={"rows": result.rows})
