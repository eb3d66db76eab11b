"""The report task: report.json + report.md from every manifest; re-made whenever the corpus
changes. Its inputs are the corpus (Flatten), the skill document and, when asked for, the
preference pairs; it finds the work dir through the corpus it was handed, not by convention."""

from pathlib import Path

import luigi

from skillsft.pipeline import workdir
from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.stages.report_options import ReportOptions
from skillsft.tasks.base import StageOutput, StageTask
from skillsft.tasks.options_param import OptionsParameter
from skillsft.tasks.targets import StageTarget


class BuildReport(StageTask):
    stage = "report"
    output_name = workdir.REPORT_JSON
    report = OptionsParameter(ReportOptions)

    def corpus_dir(self) -> Path:
        return Path(luigi.task.flatten(self.input())[0].path).parent

    def compute(self) -> StageOutput:
        from skillsft.pipeline.stages.report import build_report, render_report_md

        folder = self.corpus_dir()
        pairs = folder / workdir.preference_pairs(self.env)
        if not any(Path(t.path) == pairs for t in luigi.task.flatten(self.input())):
            # Pairs an earlier run made from other settings are retired, so that neither this
            # report nor a publish presents them with this corpus (their teacher answers stay
            # in the journal: asking for them again costs nothing).
            StageTarget(pairs, "").invalidate()
            pairs.unlink(missing_ok=True)
        report = build_report(folder, self.env, self.report.cutoff_len)
        return StageOutput(
            payload=jsonio.dumps(report),
            side_files={workdir.REPORT_MD: render_report_md(report).encode()},
        )
