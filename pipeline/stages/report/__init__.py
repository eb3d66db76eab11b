"""The run report (report.json + report.md) of a work dir.

- readers.py: the work dir's files, read as streams, bad lines and records as warnings;
- statistics.py: the figures, each tallied in one pass over its file;
- build.py: the report from the tallies; rendering.py: report.md from the report;
- its options (`ReportOptions`) live in ../report_options.py, which the command line imports
  without the rest.
"""

from skillsft.pipeline.stages.report.build import build_report
from skillsft.pipeline.stages.report.readers import (
    HUB_DIR,
    Loaded,
    Provenance,
)
from skillsft.pipeline.stages.report.rendering import render_report_md
from skillsft.pipeline.stages.report_options import ReportOptions

__all__ = [
    "HUB_DIR",
    "Loaded",
    "Provenance",
    "ReportOptions",
    "build_report",
    "render_report_md",
]
