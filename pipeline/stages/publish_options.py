"""What a publish is told beyond the corpus: where it goes and what the card says.

Kept apart from `publish.py` (which imports the Hub client and `datasets`) so that declaring the
options, as the command line and the tasks do, costs no heavy import.
"""

from dataclasses import dataclass
from typing import Annotated

from skillsft.pipeline.options import Opt


@dataclass(frozen=True)
class HubOptions:
    """Where the corpus goes; `repo_id` empty: no upload."""

    repo_id: Annotated[str, Opt("publish to this Hub dataset repo at the end",
                                metavar="USER/NAME")] = ""
    private: Annotated[bool, Opt("with --repo-id: a private repo")] = False
    revision: Annotated[str, Opt("with --repo-id: the branch to commit to")] = ""
    validation_fraction: Annotated[float, Opt(
        "with --repo-id: share of trajectories held out as a validation split",
        kind="held_out_share")] = 0.0
    # Consent, not content: an offline corpus is the same corpus either way.
    allow_offline: Annotated[bool, Opt(
        "with --repo-id: upload even an offline-teacher (smoke-test) corpus",
        shaping=False)] = False


@dataclass(frozen=True)
class CardOptions:
    """What the published card says beyond the data."""

    license: Annotated[str, Opt("the card's license (a Hub id such as cc-by-4.0 or mit; "
                                "default: keep the card's, else other)", metavar="ID")] = ""
    pretty_name: Annotated[str, Opt("the card's title")] = ""
    citation: Annotated[str, Opt("a BibTeX entry for the data's origin, shown in the card",
                                 kind="file", metavar="FILE")] = ""  # a path, resolved
    tokenizer: Annotated[str, Opt(
        "count token lengths with the student's tokenizer (a local tokenizer.json or model "
        "folder; needs `tokenizers`); default: a labelled word-piece estimate",
        kind="tokenizer", metavar="PATH_OR_NAME")] = ""
