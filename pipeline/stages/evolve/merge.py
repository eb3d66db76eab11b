"""Merge: similar proposed edits become one, hierarchically, so no prompt grows with the corpus.

Level 0 sends the proposed edits `merge_batch` at a time; the teacher returns merged edits,
each naming the input numbers it stands for (`sources`). Every later level packs the previous
level's edits `merge_batch` at a time again, until one call held them all or a level merged
nothing more. An input no merged edit names is carried forward as it was, so nothing vanishes;
the evidence of a merged edit is the union of its sources' (never the model's word). Conflicts
left on one id are resolved afterwards, by evidence (select.py).
"""

from collections.abc import Sequence
from functools import partial

from skillsft.pipeline.errors import SkillsftError
from skillsft.pipeline.stages.aggregate import render_item
from skillsft.pipeline.stages.evolve.edits import Edit
from skillsft.pipeline.stages.evolve.options import EvolveOptions
from skillsft.pipeline.teacher.base import BatchStats, Teacher, TeacherRequest
from skillsft.pipeline.teacher.contexts import MergeContext
from skillsft.pipeline.teacher.kinds import EVOLVE_MERGE
from skillsft.schemas.answer_bounds import bounded_answer_model
from skillsft.schemas.evolve import MergeAnswer

MERGE_KIND = EVOLVE_MERGE.name
# The version lives in the kind table (teacher/kinds.py): bump it there when the prompt text
# below changes, since the version is part of every journal key.
PROMPT_VERSION = EVOLVE_MERGE.prompt_version
STAGE = "evolve"


class EvolveTeacherError(SkillsftError):
    """A reflect or merge call failed: the round would silently miss edits. `failed` holds
    (request id, error) of every failed call, for the stage's rejects file."""

    def __init__(self, message: str, failed: Sequence[tuple[str, str]] = ()) -> None:
        super().__init__(message)
        self.failed = tuple(failed)


_SYSTEM = """\
You merge proposed edits to the skill bank of an LLM agent in {environment}. You receive \
numbered edits (`n`), each an ADD of a new skill or mistake to a section, a REVISE of an \
entry (`target_id`) with new text, or a RETIRE of an entry, with the memory ids that support \
it.
Merge edits that make the same change (the same new skill or mistake added, the same entry \
revised or retired) into one edit with the clearest text. When edits disagree about one \
entry (one revises it, another retires it), keep the one with more supporting memories. Keep \
the edit fields as they are defined: ADD fills `section` and the entry's text, REVISE fills \
`target_id` and the full new text, RETIRE fills `target_id` and the `reason`.
Every output edit lists in `sources` the numbers of the input edits it stands for; list each \
input number in exactly one output. Return at most {max_edits} edits.
Answer with one JSON object and nothing else:
{{"edits": [{{"op": "ADD"|"REVISE"|"RETIRE", "section": str, "target_id": str, "title": str, \
"principle": str, "when_to_apply": str, "description": str, "why_it_happens": str, \
"how_to_avoid": str, "reason": str, "sources": [int]}}]}}
Leave the fields an edit does not use as empty strings."""

_USER = "Environment: {environment}\n\nEdits:\n{items}"


def build_request(level: int, batch: int, edits: Sequence[Edit], environment: str,
                  options: EvolveOptions) -> TeacherRequest[MergeAnswer]:
    items = tuple(edit.as_item(n + 1) for n, edit in enumerate(edits))
    per_item = max(160, (options.max_prompt_chars - len(_SYSTEM) - 400) // max(1, len(items)))
    lines = "\n".join(render_item(n + 1, item, per_item) for n, item in enumerate(items))
    system = _SYSTEM.format(environment=environment, max_edits=options.edits_per_call)
    return EVOLVE_MERGE.request(
        f"merge/L{level}/B{batch:04d}",
        ({"role": "system", "content": system},
                  {"role": "user", "content": _USER.format(environment=environment,
                                                           items=lines)}),
        answer_model=bounded_answer_model(MergeAnswer, (("edits", options.edits_per_call),)),
        context=partial(MergeContext, items, options.edits_per_call),
    )


def _support(edit: Edit) -> tuple[int, str]:
    return -len(set(edit.evidence)), edit.edit_id


def apply_answer(request_id: str, group: Sequence[Edit], answer: MergeAnswer, cap: int
                 ) -> list[Edit]:
    """The group after one merge answer: its merged edits, then the inputs no merged edit
    names, best supported first, while fewer than `cap` edits are kept; the inputs beyond that
    are `not_selected` (a merge call keeps at most `cap`, as an aggregation call does)."""
    level_batch = request_id.removeprefix("merge/")
    covered: set[int] = set()
    out: list[Edit] = []
    for number, draft in enumerate(answer.edits, start=1):
        picked = [n for n in dict.fromkeys(draft.sources)
                  if 1 <= n <= len(group) and n not in covered]
        if not picked:
            continue
        covered.update(picked)
        sources = [group[n - 1] for n in picked]
        evidence = tuple(dict.fromkeys(e for s in sources for e in s.evidence))
        merged = Edit.from_draft(draft, f"M/{level_batch}/E{number:02d}", "merged", evidence,
                                 tuple(s.edit_id for s in sources))
        if len(sources) == 1 and _same_change(merged, sources[0]):
            out.append(sources[0])
            continue
        for source in sources:
            source.fate, source.fate_reason = "merged", f"into {merged.edit_id}"
        out.append(merged)
    left = sorted((e for n, e in enumerate(group, start=1) if n not in covered), key=_support)
    room = max(0, cap - len(out))
    for edit in left[room:]:
        edit.fate = "not_selected"
        edit.fate_reason = f"left out by {request_id}, which keeps at most {cap} edits"
    return out + left[:room]


def _same_change(a: Edit, b: Edit) -> bool:
    return (a.op, a.section, a.target_id, a.text) == (b.op, b.section, b.target_id, b.text)


def merge_edits(proposed: Sequence[Edit], environment: str, options: EvolveOptions,
                teacher: Teacher) -> tuple[list[Edit], list[Edit], BatchStats, int]:
    """(the edits left after merging, every merged edit made on the way, usage, calls).

    Level 0 cuts the proposed edits into groups of `merge_batch`; every later level combines
    `merge_fan_in` answers (at most `edits_per_call` edits each, so a group never exceeds
    `merge_batch`), until one answer is left: ceil(n / batch) calls, then ceil(c / fan_in) per
    level, as in stage 2's aggregation. A group of one edit needs no call."""
    stats = BatchStats(stage=STAGE, model="", cost_usd=0.0, reused_cost_usd=0.0)
    made: list[Edit] = []
    calls = level = 0
    size, cap = options.merge_batch, options.edits_per_call
    groups = [list(proposed[i: i + size]) for i in range(0, len(proposed), size)]
    while len(groups) > 1 or (groups and len(groups[0]) > 1):
        asked = [(b, g) for b, g in enumerate(groups) if len(g) > 1]
        requests = [build_request(level, b, g, environment, options) for b, g in asked]
        results, part = teacher.run_batch(requests, stage=STAGE)
        stats.absorb(part)
        calls += len(requests)
        failed = [(r.request_id, result.error or "no answer")
                  for r, result in zip(requests, results, strict=True) if result.answer is None]
        if failed:
            raise EvolveTeacherError(
                f"{len(failed)} merge call(s) failed, first {failed[0][0]}: {failed[0][1]}; "
                "re-run to retry (finished calls are reused from the teacher journal)", failed)
        answers = {b: (r.request_id, result.answer)
                   for (b, _), r, result in zip(asked, requests, results, strict=True)}
        outputs = []
        for b, group in enumerate(groups):
            known = {id(e) for e in group}
            if b in answers:
                request_id, answer = answers[b]
                kept = apply_answer(request_id, group, answer, cap)
            else:
                kept = group
            made += [e for e in kept if id(e) not in known]
            outputs.append(kept)
        if len(outputs) == 1:
            return outputs[0], made, stats, calls
        fan_in = options.merge_fan_in
        groups = [[e for out in outputs[i: i + fan_in] for e in out]
                  for i in range(0, len(outputs), fan_in)]
        level += 1
    return (groups[0] if groups else []), made, stats, calls
