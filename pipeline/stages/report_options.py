"""What the report (and the card) measure the corpus against.

Kept apart from the report package (its readers and tallies import the environments, the skill
selection and the corpus metrics) so that declaring the options, as the command line and the
tasks do, costs no import beyond the options themselves; publish_options.py does the same.
"""

from dataclasses import dataclass
from typing import Annotated

from skillsft.pipeline.formats.token_lengths import DEFAULT_CUTOFF_LEN
from skillsft.pipeline.options import Opt


@dataclass(frozen=True)
class ReportOptions:
    """What the report (and the card) measure the corpus against."""

    cutoff_len: Annotated[int, Opt(
        "the student's training cutoff in tokens: the report and the card count records longer "
        "than this (default 8192)", kind="positive_int")] = DEFAULT_CUTOFF_LEN
