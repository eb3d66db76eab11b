"""Update: the candidate bank, the current bank's JSON with the selected edits applied.

Edits are applied to the bank's raw JSON, never to a re-serialised model, so every entry no
edit touches keeps its id, its text and its other keys byte for byte, and the file stays in the
schema stage 3 reads (a released `claude_style_skills*.json` works as the current bank). A
REVISE replaces the named fields of its entry in place; a RETIRE removes the entry; an ADD
appends an entry with the next `dyn_NNN` id (continuing the highest `dyn_` number in the bank,
as SkillRL names the skills it adds during training). `metadata.evolution` says which round
made the bank and from what.
"""

import copy
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from skillsft.pipeline.stages.evolve.edits import Edit
from skillsft.schemas.evolve import GENERAL, MISTAKES

if TYPE_CHECKING:
    from skillsft.pipeline.envs import EnvSpec

_DYN = re.compile(r"^dyn_(\d+)$")


def _section_list(raw: dict[str, Any], section: str, spec: "EnvSpec") -> list[dict[str, Any]]:
    if section == GENERAL:
        return raw.setdefault("general_skills", [])
    if section == MISTAKES:
        return raw.setdefault("common_mistakes", [])
    categories = raw.get(spec.bank_category_key)
    if not isinstance(categories, dict):
        categories = raw[spec.bank_category_key] = {}
    return categories.setdefault(section, [])


def _id_of(entry: dict[str, Any]) -> str:
    return str(entry.get("skill_id") or entry.get("mistake_id") or "")


def all_ids(raw: dict[str, Any], spec: "EnvSpec") -> list[str]:
    lists = [raw.get("general_skills") or [], raw.get("common_mistakes") or [],
             *(raw.get(spec.bank_category_key) or {}).values()]
    return [_id_of(entry) for entries in lists for entry in entries]


def next_dyn_number(raw: dict[str, Any], spec: "EnvSpec") -> int:
    found = [int(m.group(1)) for i in all_ids(raw, spec) if (m := _DYN.match(i))]
    return max(found, default=0) + 1


def apply_edits(raw: dict[str, Any], edits: Sequence[Edit], spec: "EnvSpec",
                evolution: dict[str, Any]) -> dict[str, Any]:
    """A new bank dict; `raw` is left as it was. Each ADD's `new_id` is set on its edit."""
    bank = copy.deepcopy(raw)
    number = next_dyn_number(bank, spec)
    for edit in edits:
        entries = _section_list(bank, edit.section, spec)
        if edit.op == "ADD":
            edit.new_id = f"dyn_{number:03d}"
            number += 1
            id_key = "mistake_id" if edit.section == MISTAKES else "skill_id"
            entries.append({id_key: edit.new_id, **edit.text})
            continue
        position = next(i for i, entry in enumerate(entries) if _id_of(entry) == edit.target_id)
        if edit.op == "RETIRE":
            del entries[position]
        else:
            entries[position] = {**entries[position], **edit.text}
    metadata = bank.get("metadata") if isinstance(bank.get("metadata"), dict) else {}
    bank["metadata"] = {**metadata, "evolution": evolution}
    return bank


def _title(entry: dict[str, Any] | None, edit: Edit) -> str:
    text = entry or edit.text
    return str(text.get("title") or text.get("description") or "")


def describe_changes(before: dict[str, Any], edits: Sequence[Edit], spec: "EnvSpec"
                     ) -> list[str]:
    """changes.md lines: per section, what was added, revised and retired, in words."""
    old = {_id_of(e): e for key in ("general_skills", "common_mistakes")
           for e in before.get(key) or []}
    for entries in (before.get(spec.bank_category_key) or {}).values():
        old.update({_id_of(e): e for e in entries})
    lines: list[str] = []
    order = [GENERAL, *spec.categories, MISTAKES]
    for section in sorted({e.section for e in edits}, key=lambda s: (s not in order,
                                                                   order.index(s) if s in order
                                                                   else 0, s)):
        label = {GENERAL: "General principles", MISTAKES: "Common mistakes"}.get(
            section, f"{spec.label(section)} skills")
        lines += ["", f"## {label}", ""]
        for edit in (e for e in edits if e.section == section):
            support = (f"{edit.trajectories} supporting "
                       f"{'trajectory' if edit.trajectories == 1 else 'trajectories'}")
            if edit.op == "ADD":
                lines.append(f"- added {edit.new_id} \"{_title(None, edit)}\" ({support})")
            elif edit.op == "RETIRE":
                lines.append(f"- retired {edit.target_id} \"{_title(old.get(edit.target_id), edit)}"
                             f"\": {edit.reason} ({support})")
            else:
                fields = ", ".join(sorted(edit.text))
                lines.append(f"- revised {edit.target_id} \"{_title(old.get(edit.target_id), edit)}"
                             f"\" ({fields}; {support})")
    return lines
