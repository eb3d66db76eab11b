"""Skill-bank evolution, step by step: select's checks and ranking, update's byte-for-byte
copy and dyn ids, the hierarchical merge's bound, and the gate's evaluator contract."""

import copy
import sys
from pathlib import Path

import orjson
import pytest

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.stages.evolve import reflect
from skillsft.pipeline.stages.evolve.bank_view import entries, entries_by_id, sections_of
from skillsft.pipeline.stages.evolve.edits import Edit
from skillsft.pipeline.stages.evolve.gate import (
    GateCommandError,
    GateError,
    ScoreBook,
    parse_score,
    run_evaluator,
)
from skillsft.pipeline.stages.evolve.merge import merge_edits
from skillsft.pipeline.stages.evolve.options import EvolveOptions
from skillsft.pipeline.stages.evolve.select import select_edits
from skillsft.pipeline.stages.evolve.update import apply_edits
from skillsft.pipeline.teacher.offline import OfflineTeacher
from skillsft.schemas.skill_bank import SkillBank

ALFWORLD = get_env("alfworld")
RELEASED = Path(__file__).resolve().parents[2].parent / "shared/data/skillrl-memory/alfworld"


def small_bank() -> dict:
    return {
        "general_skills": [{"skill_id": "gen_001", "title": "Plan First",
                            "principle": "Plan the steps.", "when_to_apply": "Always."}],
        "task_specific_skills": {
            "heat": [{"skill_id": "hea_001", "title": "Use The Microwave",
                      "principle": "Heat it in the microwave.", "when_to_apply": "Heat tasks.",
                      "extra_key": [1, 2]},
                     {"skill_id": "dyn_007", "title": "Open Before Heating",
                      "principle": "Open the microwave first.", "when_to_apply": ""}]},
        "common_mistakes": [{"mistake_id": "err_001", "description": "Looping.",
                             "why_it_happens": "No memory.", "how_to_avoid": "Track visits."}],
        "metadata": {"source": "hand made"},
    }


def edit(edit_id: str, op: str, *, section: str = "", target: str = "",
         evidence: tuple[str, ...] = ("m1",), **text: str) -> Edit:
    return Edit(edit_id, "proposed", op, section, target, dict(text), "because", evidence)


def select(edits: list[Edit], bank: dict, options: EvolveOptions | None = None) -> list[Edit]:
    view = entries_by_id(SkillBank.model_validate(bank))
    return select_edits(edits, view, {"m1", "m2", "m3", "m4"}, sections_of(ALFWORLD),
                        options or EvolveOptions())


def test_select_drops_bad_edits_with_reasons_resolves_conflicts_and_caps() -> None:
    bank = small_bank()
    unknown = edit("P/1", "RETIRE", target="cle_009")
    protected = edit("P/2", "ADD", section="general", title="New", principle="Do it.")
    nowhere = edit("P/3", "ADD", section="kitchen", title="New", principle="Do it.")
    uncited = edit("P/4", "ADD", section="heat", title="Cool", principle="Wait.",
                   evidence=("mem_not_this_round",))
    weak = edit("P/5", "RETIRE", target="hea_001", evidence=("m1",))
    strong = edit("P/6", "REVISE", target="hea_001", principle="Use the stove.",
                  evidence=("m1", "m2", "m2", "m3"))
    same = edit("P/7", "REVISE", target="err_001", how_to_avoid="Track visits.")
    adds = [edit(f"P/A{i}", "ADD", section="mistakes", description=f"Mistake {i}.",
                 how_to_avoid="Avoid it.", evidence=tuple(f"m{j}" for j in range(1, i + 1)))
            for i in range(1, 5)]
    finals = [unknown, protected, nowhere, uncited, weak, strong, same, *adds]
    chosen = select(finals, bank, EvolveOptions(max_edits=3, protect=("general",)))

    assert unknown.fate == "dropped" and "cle_009" in unknown.fate_reason
    assert protected.fate == "dropped" and "protected" in protected.fate_reason
    assert nowhere.fate == "dropped" and "unknown section kitchen" in nowhere.fate_reason
    assert uncited.fate == "dropped" and "cites no memory" in uncited.fate_reason
    assert same.fate == "dropped" and "changes no text" in same.fate_reason
    assert weak.fate == "conflict" and "P/6" in weak.fate_reason
    assert strong.section == "heat" and strong.trajectories == 3  # m2 counted once
    # ranked by distinct trajectories: A4 (4), then P/6 and A3 (3), A3 loses the REVISE tie on op
    assert [e.edit_id for e in chosen] == ["P/A4", "P/A3", "P/6"]
    assert {e.edit_id: e.fate for e in adds} == {"P/A1": "not_selected", "P/A2": "not_selected",
                                                 "P/A3": "selected", "P/A4": "selected"}


def test_update_keeps_untouched_entries_byte_for_byte_and_continues_dyn_ids() -> None:
    bank = small_bank()
    before = copy.deepcopy(bank)
    revise = edit("P/1", "REVISE", target="hea_001", principle="Use the stove.",
                  evidence=("m1", "m2"))
    retire = edit("P/2", "RETIRE", target="gen_001")
    add_skill = edit("P/3", "ADD", section="clean", title="Rinse In The Sink",
                     principle="Rinse it in the sink.", when_to_apply="Clean tasks.")
    add_mistake = edit("P/4", "ADD", section="mistakes", description="Skipping the sink.",
                       how_to_avoid="Go to the sink first.")
    chosen = select([revise, retire, add_skill, add_mistake], bank)
    candidate = apply_edits(bank, chosen, ALFWORLD, {"round": 1})

    assert bank == before, "the current bank was modified"
    assert candidate["general_skills"] == []
    heat = candidate["task_specific_skills"]["heat"]
    assert heat[0] == {**before["task_specific_skills"]["heat"][0],
                       "principle": "Use the stove."}  # same id, same position, extra key kept
    assert heat[1] == before["task_specific_skills"]["heat"][1]
    assert candidate["task_specific_skills"]["clean"][0]["skill_id"] in ("dyn_008", "dyn_009")
    new_ids = sorted(e.new_id for e in chosen if e.op == "ADD")
    assert new_ids == ["dyn_008", "dyn_009"]  # continuing dyn_007
    assert candidate["common_mistakes"][0] == before["common_mistakes"][0]
    assert candidate["metadata"] == {"source": "hand made", "evolution": {"round": 1}}
    SkillBank.model_validate(candidate)


@pytest.mark.skipif(not (RELEASED / "claude_style_skills.json").is_file(),
                    reason="needs ../shared/data/skillrl-memory (the released ALFWorld bank)")
def test_a_released_bank_works_as_the_current_bank() -> None:
    raw = jsonio.load(RELEASED / "claude_style_skills.json")
    add = edit("P/1", "ADD", section="cool", title="Close The Fridge",
               principle="Close the fridge after cooling.")
    chosen = select([add], raw)
    candidate = apply_edits(raw, chosen, ALFWORLD, {"round": 1})
    assert chosen[0].new_id == "dyn_001"
    for key in ("general_skills", "common_mistakes"):
        assert orjson.dumps(candidate[key]) == orjson.dumps(raw[key])
    for category, skills in raw["task_specific_skills"].items():
        kept = candidate["task_specific_skills"][category][: len(skills)]
        assert orjson.dumps(kept) == orjson.dumps(skills)
    assert candidate["task_specific_skills"]["cool"][-1]["skill_id"] == "dyn_001"


class CountingTeacher(OfflineTeacher):
    """The offline teacher, recording every batch it was asked (to see prompt sizes)."""

    def __init__(self) -> None:
        super().__init__(show_progress=False)
        self.batches: list[list] = []

    def run_batch(self, requests, *, stage):
        self.batches.append(list(requests))
        return super().run_batch(requests, stage=stage)


def test_merge_is_hierarchical_and_bounded_whatever_the_number_of_edits() -> None:
    options = EvolveOptions(merge_batch=6, edits_per_call=3)
    words = ("doors", "keys", "lamps", "sinks", "fridges", "drawers", "shelves", "tables")
    # 48 edits, 16 distinct changes, three copies each side by side: 8 calls at level 0, then
    # 4, 2, 1 (fan-in 2); every call sees at most 6 edits
    proposed = [edit(f"P/{i:02d}", "ADD", section="mistakes" if i < 24 else "heat",
                     description=f"Forgetting the {words[i // 3 % 8]}.", how_to_avoid="Avoid it.",
                     evidence=(f"m{i}", f"m{i // 3}")) for i in range(48)]
    teacher = CountingTeacher()
    finals, made, _, calls = merge_edits(proposed, "ALFWorld", options, teacher)
    assert calls == 8 + 4 + 2 + 1 == sum(len(b) for b in teacher.batches)
    assert all(len(r.offline_context().items) <= 6 for b in teacher.batches for r in b)
    assert 1 <= len(finals) <= 3
    level0 = [e for e in made if e.edit_id.startswith("M/L0/")]
    assert len(level0) == 16 and all(len(e.sources) == 3 for e in level0)
    # the copies' evidence is united, never lost: m0, m1, m2 and m0 (its i // 3) for doors
    doors = next(e for e in level0 if e.sources == ("P/00", "P/01", "P/02"))
    assert doors.evidence == ("m0", "m1", "m2")
    # every edit is accounted for: merged into another, left out by a call, or final
    for item in [*proposed, *made]:
        assert item in finals or item.fate in ("merged", "not_selected"), item
    assert any("keeps at most 3 edits" in e.fate_reason for e in made)


def test_reflect_prompts_stay_bounded_and_show_rejected_edits() -> None:
    bank = SkillBank.model_validate(small_bank())
    memories = []
    from skillsft.schemas.memory import Memory

    for i in range(45):
        memories.append(Memory.model_validate({
            "memory_id": f"mem_{i:03d}", "contextual_description": "d", "origin_env_id": f"e{i}",
            "tags": {"environment": "AlfWorld", "outcome": "Failure"},
            "content": {"task_meta": {"original_goal": "heat some egg and put it in table."},
                        "strategic_guidelines": {"mistakes_to_avoid": [
                            {"trigger_condition": "x" * 900, "bad_action": "y" * 900}]}}}))
    rejected = [{"op": "ADD", "section": "mistakes", "text": {"description": "Bad idea."},
                 "fate_reason": "candidate scored 1, not above current 2"}]
    options = EvolveOptions(memories_per_call=20)
    requests = reflect.build_requests(memories, list(entries(bank)), ALFWORLD, options, rejected)
    assert len(requests) == 3
    for request in requests:
        text = "".join(m["content"] for m in request.messages)
        assert len(text) <= options.max_prompt_chars
        assert "ADD mistakes: Bad idea. (candidate scored 1, not above current 2)" in text
        assert "hea_001 [heat] Use The Microwave" in text


def script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "evaluator.py"
    path.write_text(body)
    return f"{sys.executable} {path} {{bank}}"


def test_the_evaluator_contract_and_each_way_it_can_fail(tmp_path: Path) -> None:
    bank = tmp_path / "bank.json"
    bank.write_text("{}")
    log = tmp_path / "gate.log"
    good = script(tmp_path, 'import sys\nprint("warming up")\nprint(\'{"score": 0.75}\')\n'
                  'print("bye", file=sys.stderr)\n')
    assert run_evaluator(good, bank, log, timeout=60) == 0.75
    assert "warming up" in log.read_text() and "bye" in log.read_text()

    assert parse_score('{"score": true}\n{"score": "1"}\nnot json') is None
    assert parse_score('{"score": 2}\n{"other": 1}') == 2.0

    with pytest.raises(GateCommandError, match="cannot start"):
        run_evaluator("/nonexistent/evaluator {bank}", bank, log, timeout=60)
    with pytest.raises(GateCommandError, match="has no {bank}"):
        run_evaluator(f"{sys.executable} -c pass", bank, log, timeout=60)
    with pytest.raises(GateError, match="exited with status 3"):
        run_evaluator(script(tmp_path, "raise SystemExit(3)\n"), bank, log, timeout=60)
    with pytest.raises(GateError, match="printed no"):
        run_evaluator(script(tmp_path, 'print("score: 1")\n'), bank, log, timeout=60)
    with pytest.raises(GateError, match="longer than --gate-timeout"):
        run_evaluator(script(tmp_path, "import time\ntime.sleep(30)\n"), bank, log, timeout=0.5)


def test_a_bank_is_scored_once_per_command(tmp_path: Path) -> None:
    bank = tmp_path / "bank.json"
    bank.write_text('{"general_skills": []}')
    counter = tmp_path / "runs.txt"
    command = script(tmp_path, f"open({str(counter)!r}, 'a').write('x')\n"
                     'print(\'{"score": 1}\')\n')
    book = ScoreBook(tmp_path / "scores.jsonl")
    first, known = book.score(bank, command, tmp_path / "a.log", 60)
    again, known_again = book.score(bank, command, tmp_path / "b.log", 60)
    assert (first.score, known, again.score, known_again) == (1.0, False, 1.0, True)
    assert counter.read_text() == "x"


@pytest.mark.parametrize("env", ["alfworld", "search", "webshop"])
def test_evolve_prompts_match_their_golden_rendering(env: str) -> None:
    """The reflect and merge prompts of each environment, rendered from its bundled sample
    (its own profile's rules and words), as golden files; regenerate as test_prompts.py says."""
    from skillsft.pipeline.stages.aggregate import aggregate_memories
    from skillsft.pipeline.stages.evolve.merge import build_request as merge_request
    from skillsft.pipeline.stages.memories import MemoryOptions, generate_memories
    from tests.pipeline.test_prompts import GOLDEN, UPDATE, _records, rendered

    spec = get_env(env)
    offline = OfflineTeacher(show_progress=False)
    memories = generate_memories(_records(env), spec, MemoryOptions(), offline).records
    bank = aggregate_memories(memories, spec, None, offline).records[0]
    rejected = [{"op": "ADD", "section": "mistakes", "target_id": "",
                 "text": {"description": "Giving up early."},
                 "fate_reason": "candidate scored 0.4, not above current 0.5"}]
    reflect_request = reflect.build_requests(memories, list(entries(bank)), spec,
                                             EvolveOptions(), rejected)[0]
    first = next(iter(entries(bank)))
    proposed = [edit("P/B0000/E01", "REVISE", target=first.entry_id, principle="Plan first.",
                     evidence=(memories[0].memory_id,)),
                edit("P/B0000/E02", "ADD", section="mistakes", description="Giving up early.",
                     how_to_avoid="Try the remaining options.",
                     evidence=tuple(m.memory_id for m in memories[:2]))]
    requests = {"evolve_reflect": reflect_request,
                "evolve_merge": merge_request(0, 0, proposed, spec.memory_environment_tag,
                                              EvolveOptions())}
    system = reflect_request.messages[0]["content"]
    assert all(rule in system for rule in spec.prompts.reflect_rules)
    stale = []
    for name, request in requests.items():
        path = GOLDEN / env / f"{name}.txt"
        if UPDATE:
            path.write_text(rendered(request))
        elif not path.is_file() or path.read_text() != rendered(request):
            stale.append(str(path))
    assert not stale, f"prompt renderings changed: {stale}; bump the prompt version"
