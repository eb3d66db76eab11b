"""Skill-bank evolution (`skillsft evolve`): the teacher's edit answers and the edits file.

The teacher answers two request kinds. `evolve_reflect` reads a batch of new memories against
the current bank and proposes edits; `evolve_merge` reads numbered edits and returns them with
similar ones merged, each merged edit naming the numbers it came from (`sources`). The evidence
of a merged edit is the union of its sources' evidence, computed by us, so a model can neither
invent evidence nor lose it. Ids of new entries (`dyn_NNN`) are assigned by us when the bank is
updated, never by the model.

`EditRecord` is one line of `edits.jsonl`: every proposed, merged, selected and applied edit
with its evidence and what became of it (`fate`, `reason`).
"""

from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from skillsft.schemas.base import StrictModel

# The sections of a bank an edit may name (besides one per category id of the environment)
# and the prose fields of its entries.
GENERAL = "general"
MISTAKES = "mistakes"
SKILL_FIELDS = ("title", "principle", "when_to_apply")
MISTAKE_FIELDS = ("description", "why_it_happens", "how_to_avoid")

@dataclass(frozen=True)
class Entry:
    entry_id: str
    section: str
    text: dict[str, str]  # the entry's prose fields

    @property
    def is_mistake(self) -> bool:
        return self.section == MISTAKES


Operation = Literal["ADD", "REVISE", "RETIRE"]
Fate = Literal["merged", "dropped", "conflict", "not_selected", "applied", "rejected_by_gate",
               "selected"]


class EditDraft(StrictModel):
    """One edit as the teacher writes it.

    ADD names the `section` (`general`, `mistakes` or a category id) and fills the entry's
    text: `title`, `principle`, `when_to_apply` for a skill; `description`, `why_it_happens`,
    `how_to_avoid` for a mistake. REVISE names `target_id` and gives the new text; RETIRE names
    `target_id` and says why in `reason`. `evidence` lists the memory ids that support it."""

    op: Operation
    section: str = ""
    target_id: str = ""
    title: str = ""
    principle: str = ""
    when_to_apply: str = ""
    description: str = ""
    why_it_happens: str = ""
    how_to_avoid: str = ""
    reason: str = Field(min_length=1)
    evidence: list[str] = Field(min_length=1)


class ReflectAnswer(StrictModel):
    edits: list[EditDraft]


class MergedEditDraft(EditDraft):
    """A merged edit: the numbers of the input edits it stands for; its evidence is theirs."""

    evidence: list[str] = Field(default_factory=list)
    sources: list[int] = Field(min_length=1)


class MergeAnswer(StrictModel):
    edits: list[MergedEditDraft]


class EditRecord(StrictModel):
    """One line of edits.jsonl."""

    edit_id: str  # "P/B0001/E01" proposed, "M/L1/B0000/E01" merged
    stage: Literal["proposed", "merged"]
    op: Operation
    section: str
    target_id: str = ""
    new_id: str = ""  # the id an applied ADD got
    text: dict[str, str] = Field(default_factory=dict)
    reason: str = ""
    evidence: list[str] = Field(default_factory=list)
    trajectories: int = 0  # distinct trajectories among the evidence
    sources: list[str] = Field(default_factory=list)  # merged: the edits it came from
    fate: Fate
    fate_reason: str = ""
    rank: int | None = None  # position among the valid final edits, 1 = best supported


class GateScore(StrictModel):
    """One evaluator run, kept in evolution/gate_scores.jsonl so a bank is scored once."""

    bank_sha256: str
    command: str  # the --gate-command template, {bank} unreplaced
    score: float
    log: str


__all__ = ["EditDraft", "EditRecord", "GateScore", "MergeAnswer", "MergedEditDraft",
           "ReflectAnswer"]
