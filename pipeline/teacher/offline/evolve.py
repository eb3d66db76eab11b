"""The offline teacher's bank edits: deterministic, from the memories alone; a smoke test.

Reflect: a success's planning pattern becomes the skill the offline aggregation would write
(skills.py); when its category has no skill of that title it is an ADD, when it has one with
other text and two or more memories agree it is a REVISE. A failure's mistake the bank does not
hold (by its normalised wording) is an ADD to `mistakes`. Edits the gate rejected earlier are
not proposed again. Merge: edits making the same change (op, section, id, normalised title)
become one. The answers carry no model's judgement; the round's report says so.
"""

from typing import Any

from skillsft.pipeline.teacher.contexts import MergeContext, ReflectContext
from skillsft.pipeline.teacher.offline.skills import _key, _mistake_from_item, _skill_from_item
from skillsft.schemas.evolve import (
    GENERAL,
    MISTAKES,
    EditDraft,
    MergeAnswer,
    MergedEditDraft,
    ReflectAnswer,
)

_FIELDS = ("title", "principle", "when_to_apply", "description", "why_it_happens",
           "how_to_avoid")


def _text_key(text: dict[str, Any]) -> str:
    return _key(str(text.get("title") or text.get("description") or ""))


def _rejected(ctx: ReflectContext) -> set[tuple[str, str]]:
    return {(str(e.get("op")), str(e.get("target_id") or e.get("section"))
             + "/" + _text_key(e.get("text") or {})) for e in ctx.rejected}


def solve_reflect(ctx: ReflectContext) -> ReflectAnswer:
    by_key = {(e.section, _text_key(e.text)): e for e in ctx.bank if e.section != GENERAL}
    groups: dict[tuple[str, str, str], tuple[dict[str, str], list[str]]] = {}
    for item in ctx.memories:
        if item.get("pattern") and item.get("category") in ctx.sections:
            key, skill = _skill_from_item({"goal": item["goal"], "pattern": item["pattern"]},
                                          ctx.placeholder_words)
            text = skill.model_dump(include={"title", "principle", "when_to_apply"})
            known = by_key.get((item["category"], key))
            if known is None:
                slot = ("ADD", item["category"], key)
            elif known.text.get("principle") != text["principle"]:
                slot = ("REVISE", known.entry_id, key)
            else:
                continue
            groups.setdefault(slot, (text, []))[1].append(item["id"])
        for mistake in item.get("mistakes", []):
            key, draft = _mistake_from_item(mistake, ctx.placeholder_words)
            if (MISTAKES, key) in by_key:
                continue
            text = draft.model_dump(include={"description", "why_it_happens", "how_to_avoid"})
            groups.setdefault(("ADD", MISTAKES, key), (text, []))[1].append(item["id"])
    rejected = _rejected(ctx)
    edits = []
    for (op, where, key), (text, evidence) in groups.items():
        cited = list(dict.fromkeys(evidence))
        if (op == "REVISE" and len(cited) < 2) or (op, f"{where}/{key}") in rejected:
            continue
        section, target = (where, "") if op == "ADD" else ("", where)
        reason = (f"{len(cited)} new memories show it and the bank lacks it" if op == "ADD" else
                  f"{len(cited)} new memories solve it another way")
        edits.append(EditDraft(op=op, section=section, target_id=target, reason=reason,  # type: ignore[arg-type]
                               evidence=cited, **text))
    edits.sort(key=lambda e: (-len(e.evidence), e.op, e.section, e.target_id,
                              _text_key(e.model_dump())))
    return ReflectAnswer(edits=edits[: ctx.max_edits])


def solve_merge(ctx: MergeContext) -> MergeAnswer:
    groups: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for item in ctx.items:
        slot = (item["op"], item.get("section", ""), item.get("target_id", ""),
                "" if item["op"] == "RETIRE" else _text_key(item))
        groups.setdefault(slot, []).append(item)
    merged = []
    for items in groups.values():
        first = items[0]
        merged.append(MergedEditDraft(
            op=first["op"], section=first.get("section", ""),
            target_id=first.get("target_id", ""), reason=first.get("reason") or "merged",
            sources=[i["n"] for i in items], **{f: first.get(f, "") for f in _FIELDS}))
    merged.sort(key=lambda e: (-len(e.sources), e.sources[0]))
    return MergeAnswer(edits=merged[: ctx.max_edits])
