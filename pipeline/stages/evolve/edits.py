"""One edit on its way through a round, and its line in edits.jsonl.

An edit is proposed by a reflect call or made by a merge call from earlier ones (`sources`);
its evidence is the memory ids it cites (a merged edit: the union of its sources'). Every edit
ends with a `fate`: merged into another, dropped (with the reason), lost a conflict, not
selected, applied, or rejected by the gate.
"""

from dataclasses import dataclass
from typing import Any

from skillsft.schemas.evolve import MISTAKE_FIELDS, SKILL_FIELDS, EditDraft, EditRecord

TEXT_FIELDS = SKILL_FIELDS + MISTAKE_FIELDS
OPS = ("ADD", "REVISE", "RETIRE")


@dataclass
class Edit:
    edit_id: str
    stage: str  # "proposed" | "merged"
    op: str
    section: str
    target_id: str
    text: dict[str, str]
    reason: str
    evidence: tuple[str, ...]
    sources: tuple[str, ...] = ()
    trajectories: int = 0
    fate: str = ""
    fate_reason: str = ""
    rank: int | None = None
    new_id: str = ""  # the id an applied ADD got (update.py)

    @classmethod
    def from_draft(cls, draft: EditDraft, edit_id: str, stage: str,
                   evidence: tuple[str, ...] | None = None,
                   sources: tuple[str, ...] = ()) -> "Edit":
        text = {f: getattr(draft, f).strip() for f in TEXT_FIELDS if getattr(draft, f).strip()}
        cited = evidence if evidence is not None else tuple(dict.fromkeys(draft.evidence))
        return cls(edit_id, stage, draft.op, draft.section.strip(), draft.target_id.strip(),
                   text, draft.reason.strip(), cited, sources)

    def as_item(self, number: int) -> dict[str, Any]:
        """The edit as a merge prompt shows it: numbered, with its evidence count."""
        item: dict[str, Any] = {"n": number, "op": self.op, "section": self.section}
        if self.target_id:
            item["target_id"] = self.target_id
        return {**item, **self.text, "reason": self.reason, "evidence": list(self.evidence)}

    def record(self) -> EditRecord:
        return EditRecord(
            edit_id=self.edit_id, stage=self.stage, op=self.op,  # type: ignore[arg-type]
            section=self.section, target_id=self.target_id, new_id=self.new_id,
            text=self.text, reason=self.reason, evidence=list(self.evidence),
            trajectories=self.trajectories, sources=list(self.sources),
            fate=self.fate, fate_reason=self.fate_reason, rank=self.rank)  # type: ignore[arg-type]
