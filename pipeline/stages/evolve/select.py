"""Select: check every merged edit against the bank and the memories, rank, keep the best few.

An edit is dropped, with its reason, when it names an id the bank does not have, a section the
environment does not have or one the user protected, lacks the text its entry needs, changes
nothing, or cites no memory of this round. Of the edits left, two on one id (or two adding the
same entry) conflict: the better supported wins. The rest are ranked by how many distinct
trajectories support them (each memory is one trajectory), ties by edit id, and the first
`max_edits` are selected; the others are `not_selected`.
"""

from collections.abc import Iterable, Mapping, Sequence

from skillsft.pipeline.stages.evolve.bank_view import fields_of
from skillsft.pipeline.stages.evolve.edits import OPS, Edit
from skillsft.pipeline.stages.evolve.options import EvolveOptions
from skillsft.schemas.evolve import Entry

# What an ADD needs to become an entry the block and SKILL.md can render.
REQUIRED = {"skill": ("title", "principle"), "mistake": ("description", "how_to_avoid")}


def _drop(edit: Edit, reason: str) -> None:
    edit.fate, edit.fate_reason = "dropped", reason


def check_edit(edit: Edit, bank: Mapping[str, Entry], memory_ids: set[str],
               sections: Sequence[str], protected: Iterable[str]) -> bool:
    """True when the edit can be applied; otherwise its fate says why not. Normalises the
    edit on the way: the section of a REVISE/RETIRE is its entry's, text keeps its fields."""
    if edit.op in ("REVISE", "RETIRE"):
        entry = bank.get(edit.target_id)
        if entry is None:
            _drop(edit, f"{edit.op} names {edit.target_id or '(no id)'}, which the current bank "
                  "does not have")
            return False
        edit.section = entry.section
    elif edit.section not in sections:
        _drop(edit, f"ADD to unknown section {edit.section or '(none)'}; expected one of "
              f"{', '.join(sections)}")
        return False
    if edit.section in set(protected):
        _drop(edit, f"section {edit.section} is protected (--protect {edit.section})")
        return False
    allowed = fields_of(edit.section)
    edit.text = {} if edit.op == "RETIRE" else {f: v for f, v in edit.text.items()
                                               if f in allowed}
    if edit.op == "ADD":
        missing = [f for f in REQUIRED["mistake" if "description" in allowed else "skill"]
                   if not edit.text.get(f)]
        if missing:
            _drop(edit, f"ADD lacks {', '.join(missing)}")
            return False
        edit.target_id = ""
    if edit.op == "REVISE" and all(bank[edit.target_id].text.get(f) == v
                                   for f, v in edit.text.items()):
        _drop(edit, f"REVISE of {edit.target_id} changes no text")
        return False
    cited = tuple(e for e in edit.evidence if e in memory_ids)
    if not cited:
        _drop(edit, "cites no memory of this round (cited: "
              f"{', '.join(edit.evidence[:3]) or 'none'})")
        return False
    edit.evidence = cited
    edit.trajectories = len(set(cited))
    return True


def _order(edit: Edit) -> tuple[int, int, str]:
    return -edit.trajectories, OPS.index(edit.op), edit.edit_id


def resolve_conflicts(valid: Sequence[Edit]) -> list[Edit]:
    """One edit per target id and per added entry; the losers' fate names the winner."""
    winners: dict[tuple[str, ...], Edit] = {}
    for edit in sorted(valid, key=_order):
        if edit.op == "ADD":
            key = ("add", edit.section, " ".join(next(iter(edit.text.values())).lower().split()))
        else:
            key = ("id", edit.target_id)
        winner = winners.get(key)
        if winner is None:
            winners[key] = edit
            continue
        edit.fate = "conflict"
        where = "entry" if edit.op == "ADD" else edit.target_id
        edit.fate_reason = (f"{winner.op} {winner.edit_id} on the same {where} has "
                            f"{winner.trajectories} supporting trajectories, this "
                            f"{edit.trajectories}")
    return sorted(winners.values(), key=_order)


def select_edits(finals: Sequence[Edit], bank: Mapping[str, Entry], memory_ids: set[str],
                 sections: Sequence[str], options: EvolveOptions) -> list[Edit]:
    """The selected edits, best supported first; every final edit gets its fate."""
    valid = [e for e in finals if check_edit(e, bank, memory_ids, sections, options.protect)]
    ranked = resolve_conflicts(valid)
    for rank, edit in enumerate(ranked, start=1):
        edit.rank = rank
        if rank <= options.max_edits:
            edit.fate, edit.fate_reason = "selected", ""
        else:
            edit.fate = "not_selected"
            edit.fate_reason = f"rank {rank}, beyond --max-edits {options.max_edits}"
    return [e for e in ranked if e.fate == "selected"]
