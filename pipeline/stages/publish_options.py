"""What a publish is told beyond the corpus: where it goes and what the card says.

Kept apart from `publish.py` (which imports the Hub client and `datasets`) so that declaring the
options, as the command line and the tasks do, costs no heavy import.
"""

from dataclasses import dataclass, field
from typing import Annotated

from skillsft.pipeline.options import Opt

# The license identifiers the Hub's card metadata accepts (lower-cased SPDX ids, a few Hub
# additions), and `other`; a card with any other value shows no license at all.
HUB_LICENSE_IDS = """
apache-2.0 mit openrail bigscience-openrail-m creativeml-openrail-m bigscience-bloom-rail-1.0
bigcode-openrail-m afl-3.0 artistic-2.0 bsl-1.0 bsd bsd-2-clause bsd-3-clause
bsd-3-clause-clear c-uda cc cc0-1.0 cc-by-2.0 cc-by-2.5 cc-by-3.0 cc-by-4.0 cc-by-sa-3.0
cc-by-sa-4.0 cc-by-nc-2.0 cc-by-nc-3.0 cc-by-nc-4.0 cc-by-nd-4.0 cc-by-nc-nd-3.0
cc-by-nc-nd-4.0 cc-by-nc-sa-2.0 cc-by-nc-sa-3.0 cc-by-nc-sa-4.0 cdla-sharing-1.0
cdla-permissive-1.0 cdla-permissive-2.0 wtfpl ecl-2.0 epl-1.0 epl-2.0 etalab-2.0 eupl-1.1
eupl-1.2 agpl-3.0 gfdl gpl gpl-2.0 gpl-3.0 lgpl lgpl-2.1 lgpl-3.0 isc lppl-1.3c ms-pl mpl-2.0
odc-by odbl openrail++ osl-3.0 postgresql ofl-1.1 ncsa unlicense zlib pddl lgpl-lr
llama2 llama3 llama3.1 llama3.2 llama3.3 llama4 gemma other
"""
HUB_LICENSES = frozenset(HUB_LICENSE_IDS.split())


def license_id(text: str) -> str:
    """`text` as the Hub spells it; ValueError naming the fix when it is not a license id."""
    if text.lower() in HUB_LICENSES:
        return text.lower()
    raise ValueError(f"{text!r} is not a license id the Hub knows: give an SPDX id such as "
                     "cc-by-4.0, mit or apache-2.0, or `other`")


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


SKILL_VARIANTS = ("none",)  # `none`: every record also without its experience block


@dataclass(frozen=True)
class SkillVariants:
    """Extra variants of the records to publish beside the ones with skills."""

    names: Annotated[str, Opt(
        "also publish every record without its experience block, as config <env>_noskill "
        "(same outputs and order; no teacher call)", name="skill_variants",
        choices=SKILL_VARIANTS)] = ""

    def shapes_output(self) -> bool:
        """Unset, the publish fingerprint is what it was before the option existed."""
        return bool(self.names)


@dataclass(frozen=True)
class CardOptions:
    """What the published card says beyond the data."""

    license: Annotated[str, Opt("the card's license (a Hub id such as cc-by-4.0 or mit, or "
                                "other; default: keep the card's, else other)", metavar="ID",
                                kind="license")] = ""
    pretty_name: Annotated[str, Opt("the card's title")] = ""
    citation: Annotated[str, Opt("a BibTeX entry for the data's origin, shown in the card",
                                 kind="file", metavar="FILE")] = ""  # a path, resolved
    tokenizer: Annotated[str, Opt(
        "count token lengths with the student's tokenizer (a local tokenizer.json or model "
        "folder; needs `tokenizers`); default: a labelled word-piece estimate",
        kind="tokenizer", metavar="PATH_OR_NAME")] = ""
    variants: SkillVariants = field(default_factory=SkillVariants)
