"""One round's candidate bank: reflect, merge, select and update as one stage function.

Its unit is the memory (`inputs`: the new memories read); its one record is the candidate bank
(raw JSON). `extras["edits"]` holds every proposed and merged edit with its fate as of
selection; the gate (gate.py, run by the next task) settles the fates of the selected ones.
A failed reflect or merge call raises `EvolveTeacherError`, since a round that silently missed
a batch of memories would mislead; its answered calls stay in the journal.
"""

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from skillsft.pipeline.stages.evolve import reflect
from skillsft.pipeline.stages.evolve.bank_view import entries, entries_by_id, sections_of
from skillsft.pipeline.stages.evolve.edits import Edit
from skillsft.pipeline.stages.evolve.merge import STAGE, EvolveTeacherError, merge_edits
from skillsft.pipeline.stages.evolve.options import EvolveOptions
from skillsft.pipeline.stages.evolve.select import select_edits
from skillsft.pipeline.stages.evolve.update import apply_edits
from skillsft.pipeline.stages.result import StageResult, stage_counts
from skillsft.pipeline.teacher.base import BatchStats, Teacher
from skillsft.schemas.memory import Memory
from skillsft.schemas.reject import Reject
from skillsft.schemas.skill_bank import SkillBank

if TYPE_CHECKING:
    from skillsft.pipeline.envs import EnvSpec


def reflect_edits(memories: Sequence[Memory], bank: SkillBank, spec: "EnvSpec",
                  options: EvolveOptions, teacher: Teacher,
                  rejected: Sequence[dict[str, Any]]
                  ) -> tuple[list[Edit], BatchStats | None, int]:
    """Every edit the reflect calls propose, with their usage and how many calls were made."""
    requests = reflect.build_requests(memories, list(entries(bank)), spec, options, rejected)
    if not requests:
        return [], None, 0
    results, stats = teacher.run_batch(requests, stage=STAGE)
    failed = [(r.request_id, result.error or "no answer")
              for r, result in zip(requests, results, strict=True) if result.answer is None]
    if failed:
        raise EvolveTeacherError(
            f"{len(failed)} reflect call(s) failed, first {failed[0][0]}: {failed[0][1]}; re-run "
            "to retry (finished calls are reused from the teacher journal)", failed)
    proposed = []
    for batch, result in enumerate(results):
        for number, draft in enumerate(result.answer.edits, start=1):
            proposed.append(Edit.from_draft(draft, f"P/B{batch:04d}/E{number:02d}", "proposed"))
    return proposed, stats, len(requests)


def propose_candidate(
    memories: Sequence[Memory], raw_bank: dict[str, Any], spec: "EnvSpec",
    options: EvolveOptions, teacher: Teacher, *, rejected: Sequence[dict[str, Any]] = (),
    evolution: dict[str, Any] | None = None, bank_name: str = "skill_bank.json",
) -> StageResult[dict[str, Any]]:
    """The candidate bank for validated memories and a validated bank (see module docstring);
    `evolution` goes into the candidate's `metadata.evolution`."""
    bank = SkillBank.model_validate(raw_bank)
    proposed, reflect_stats, reflect_calls = reflect_edits(memories, bank, spec, options,
                                                           teacher, rejected)
    finals, made, merge_stats, merge_calls = merge_edits(
        proposed, spec.memory_environment_tag, options, teacher)
    memory_ids = {m.memory_id for m in memories}
    selected = select_edits(finals, entries_by_id(bank), memory_ids, sections_of(spec), options)
    applied = [{"edit": e.edit_id, "op": e.op, "section": e.section,
                "id": e.target_id or "(new)"} for e in selected]
    candidate = apply_edits(raw_bank, selected, spec, {
        **(evolution or {}), "teacher": teacher.name, "edits": applied})
    for edit, entry in zip(selected, candidate["metadata"]["evolution"]["edits"], strict=True):
        entry["id"] = edit.new_id or edit.target_id
    every = [*proposed, *made]
    fates = Counter(e.fate for e in every)
    rejects = [Reject(stage=STAGE, file=bank_name, reason=f"edit_{e.fate}",
                      detail=f"{e.edit_id} {e.op} {e.target_id or e.section}: {e.fate_reason}")
               for e in every if e.fate in ("dropped", "conflict")]
    counts = {
        "memories": len(memories),
        "reflect_calls": reflect_calls,
        "merge_calls": merge_calls,
        "edits_proposed": len(proposed),
        "edits_merged": len(made),
        "edits_after_merge": len(finals),
        "edits_dropped": fates["dropped"],
        "edits_conflict": fates["conflict"],
        "edits_not_selected": fates["not_selected"],
        "edits_selected": len(selected),
    }
    teacher_usage = [s for s in (reflect_stats, merge_stats if merge_calls else None) if s]
    return StageResult([candidate], rejects,
                       stage_counts(counts, inputs=len(memories), outputs=1, rejected=0),
                       unit="memory records", teacher=teacher_usage,
                       extras={"edits": every, "selected": selected})
