"""Settle a round: gate the candidate (or not), give every selected edit its final fate, and
write down in words what changed.

- No edit selected: the bank stays as it was; no evaluator runs.
- No `--gate-command`: every selected edit is applied; the round says no gate ran.
- With a gate: the current bank and the candidate are scored (each once ever, gate.py); the
  candidate is accepted only when its score is strictly higher, else the bank stays as it was
  and the selected edits become `rejected_edits.jsonl`, shown to the next round's reflect
  prompt as edits that did not help.
The accepted bank is the candidate's bytes or the current bank's bytes, never re-serialised.
"""

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.stages.evolve.edits import Edit
from skillsft.pipeline.stages.evolve.gate import ScoreBook
from skillsft.pipeline.stages.evolve.options import GateOptions
from skillsft.pipeline.stages.evolve.update import describe_changes
from skillsft.schemas.evolve import EditRecord

if TYPE_CHECKING:
    from skillsft.pipeline.envs import EnvSpec

OFFLINE_NOTE = ("The edits were proposed by the offline teacher: rule-based, from the memories "
                "alone, a smoke test of the pipeline, not a model's judgement.")


@dataclass
class RoundDecision:
    decision: str  # "accepted" | "rejected" | "no_gate" | "no_edits"
    accepted_bytes: bytes
    records: list[EditRecord]
    gate: dict[str, Any] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    changes_md: str = ""

    @property
    def rejected(self) -> list[EditRecord]:
        return [r for r in self.records if r.fate == "rejected_by_gate"]


def _settle(records: Sequence[EditRecord], fate: str, reason: str) -> list[EditRecord]:
    return [r.model_copy(update={"fate": fate, "fate_reason": reason})
            if r.fate == "selected" else r for r in records]


def decide_round(records: Sequence[EditRecord], current: Path, candidate: Path,
                 folder: Path, options: GateOptions, scores: ScoreBook, *,
                 round_number: int, teacher: str, spec: "EnvSpec") -> RoundDecision:
    selected = [r for r in records if r.fate == "selected"]
    gate: dict[str, Any] = {"command": options.gate_command or None}
    counts = Counter[str]()
    if not selected:
        decision, accepted = "no_edits", current.read_bytes()
        settled = list(records)
    elif not options.gate_command:
        decision, accepted = "no_gate", candidate.read_bytes()
        settled = _settle(records, "applied", "no gate ran (no --gate-command)")
    else:
        now, now_known = scores.score(current, options.gate_command,
                                      folder / "gate-current.log", options.gate_timeout)
        new, new_known = scores.score(candidate, options.gate_command,
                                      folder / "gate-candidate.log", options.gate_timeout)
        counts["gate_runs"] = (not now_known) + (not new_known)
        counts["gate_scores_reused"] = now_known + new_known
        gate.update(current_score=now.score, candidate_score=new.score,
                    current_log=now.log, candidate_log=new.log,
                    current_score_reused=now_known, candidate_score_reused=new_known)
        if new.score > now.score:
            decision, accepted = "accepted", candidate.read_bytes()
            settled = _settle(records, "applied",
                              f"candidate scored {new.score:g} > current {now.score:g}")
        else:
            decision, accepted = "rejected", current.read_bytes()
            settled = _settle(records, "rejected_by_gate",
                              f"candidate scored {new.score:g}, not above current {now.score:g}")
    gate["decision"] = decision
    counts["edits_applied"] = sum(r.fate == "applied" for r in settled)
    counts["edits_rejected_by_gate"] = sum(r.fate == "rejected_by_gate" for r in settled)
    counts["accepted"] = int(decision in ("accepted", "no_gate"))
    result = RoundDecision(decision, accepted, settled, gate, dict(counts))
    result.changes_md = changes_text(result, current, round_number, teacher, spec)
    return result


_HEADLINE = {
    "accepted": "The gate accepted the candidate: {candidate:g} > {current:g}.",
    "rejected": ("The gate rejected the candidate ({candidate:g}, not above {current:g}): the "
                 "bank stays as it was; the edits below went to rejected_edits.jsonl."),
    "no_gate": "No gate ran (no --gate-command): every selected edit was applied.",
    "no_edits": "No edit was selected: the bank stays as it was.",
}


def changes_text(decision: RoundDecision, current: Path, round_number: int, teacher: str,
                 spec: "EnvSpec") -> str:
    gate = decision.gate
    headline = _HEADLINE[decision.decision].format(
        candidate=gate.get("candidate_score", 0.0), current=gate.get("current_score", 0.0))
    fates = Counter(r.fate for r in decision.records)
    lines = [f"# Round {round_number:03d}: changes to {current.name}", "", headline, "",
             "Edits: " + ", ".join(f"{n} {fate.replace('_', ' ')}"
                                   for fate, n in sorted(fates.items())) + "."]
    if teacher == "offline":
        lines += ["", OFFLINE_NOTE]
    changed = [Edit(**r.model_dump(exclude={"stage", "sources", "rank"}),
                    stage=r.stage, sources=tuple(r.sources))
               for r in decision.records if r.fate in ("applied", "rejected_by_gate")]
    before = jsonio.load(current)
    lines += describe_changes(before, changed, spec)
    return "\n".join(lines) + "\n"
