"""`skillsft evolve` end to end: the real command line, Luigi, the toy environment (lockroom)
and an evaluator script whose score depends on the bank's content, so the gate is seen
accepting and rejecting; the test server over HTTP; bad input, one line each."""

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from skillsft.cli import main
from skillsft.pipeline.envs import ENVS
from skillsft.tasks.targets import iter_manifests
from skillsft.testing.stage_responder import stage_responder
from tests.envs import lockroom
from tests.envs.lockroom import _step
from tests.support.fixtures import TEST_API_KEY

PLACES = ["walk to hall 1", "walk to kitchen 1", "walk to door 1"]
ACTIONS = ["pick up key 1", "unlock door 1 with key 1", *PLACES]
# A bank scores the categories it has skills for, less a little per entry: an entry that
# covers nothing new makes it worse. Each bank it scores is appended to the file argv[2].
EVALUATOR = """\
import json, sys
bank = json.load(open(sys.argv[1]))
skills = bank.get("task_specific_skills") or {}
entries = (len(bank.get("general_skills", [])) + sum(map(len, skills.values()))
           + len(bank.get("common_mistakes", [])))
open(sys.argv[2], "a").write(sys.argv[1] + "\\n")
print("scoring", sys.argv[1], file=sys.stderr)
print(json.dumps({"score": sum(1 for s in skills.values() if s) - 0.01 * entries}))
"""


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(ENVS, lockroom.NAME, lockroom.SPEC)


def episode(env: int, goal: str, moves: list[tuple[str, str, float, bool]]) -> str:
    start = (f"-= Lockroom =-\n\nYou are in a small house. Episode {env}.\n\n"
             f"Your task is to: {goal}.")
    steps = [_step("-1", "None", 0.0, False, start, PLACES)]
    steps += [_step(f"{n:02d}", action, reward, done, obs, ACTIONS)
              for n, (action, obs, reward, done) in enumerate(moves)]
    return f"=== Trajectory for Test 0, Env {env} ===\n" + "\n".join(steps)


def fetch_win(env: int) -> str:
    return episode(env, "fetch the key 1", [
        ("walk to kitchen 1", "You arrive at kitchen 1. You see a key 1.", 0.0, False),
        ("pick up key 1", "You pick up the key 1.", 10.0, True)])


def bring_win(env: int) -> str:
    return episode(env, "bring the key 1 to the door 1", [
        ("walk to kitchen 1", "You arrive at kitchen 1. You see a key 1.", 0.0, False),
        ("pick up key 1", "You pick up the key 1.", 0.0, False),
        ("walk to door 1", "You arrive at door 1 with the key.", 10.0, True)])


def write(folder: Path, texts: list[str]) -> Path:
    for env, text in enumerate(texts):
        (folder / f"env{env:03d}").mkdir(parents=True)
        (folder / f"env{env:03d}" / "test0.txt").write_text(text)
    return folder


def evaluator(tmp_path: Path) -> tuple[str, Path]:
    script = tmp_path / "evaluate.py"
    script.write_text(EVALUATOR)
    scored = tmp_path / "scored.txt"
    return f"{sys.executable} {script} {{bank}} {scored}", scored


def evolve(work: Path, bank: Path, rollouts: Path, *extra: str) -> int:
    return main(["evolve", lockroom.NAME, "--teacher", "offline", "--skill-bank", str(bank),
                 "--rollout-dir", str(rollouts), "--work-dir", str(work), *extra])


def entries(bank: dict) -> dict[str, dict]:
    found = {e["skill_id"]: e for e in bank["general_skills"]}
    for skills in bank["task_specific_skills"].values():
        found.update({e["skill_id"]: e for e in skills})
    found.update({e["mistake_id"]: e for e in bank["common_mistakes"]})
    return found


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_rounds_accept_reject_and_feed_the_next_round(registered, tmp_path, capsys) -> None:
    work = tmp_path / "work"
    first = write(tmp_path / "r1", [lockroom.rollout_text(0, "hall 1", True),
                                    lockroom.rollout_text(1, "kitchen 1", True),
                                    lockroom.rollout_text(2, "hall 1", False)])
    assert main(["run", lockroom.NAME, "--teacher", "offline", "--rollout-dir", str(first),
                 "--work-dir", str(work)]) == 0
    current = work / "skill_bank.json"
    gate, scored = evaluator(tmp_path)

    # round 1: two fetch wins teach a skill for a category the bank has none for: accepted
    fetch = write(tmp_path / "r2", [fetch_win(0), fetch_win(1)])
    assert evolve(work, current, fetch, "--gate-command", gate) == 0
    one = work / "evolution" / "round-001"
    decision = json.loads((one / "gate.json").read_text())
    assert decision["decision"] == "accepted"
    assert decision["candidate_score"] > decision["current_score"]
    accepted = one / "skill_bank.json"
    assert accepted.read_bytes() == (one / "candidate_skill_bank.json").read_bytes()
    before, after = json.loads(current.read_text()), json.loads(accepted.read_text())
    kept = entries(before)
    assert {k: v for k, v in entries(after).items() if k in kept} == kept  # untouched entries
    (added,) = after["task_specific_skills"]["fetch"]
    assert added["skill_id"] == "dyn_001"
    edits = lines(one / "edits.jsonl")
    assert [(e["op"], e["section"], e["fate"], e["new_id"]) for e in edits] == [
        ("ADD", "fetch", "applied", "dyn_001")]
    assert len(edits[0]["evidence"]) == edits[0]["trajectories"] == 2
    assert 'added dyn_001 "Walk Pick Routine"' in (one / "changes.md").read_text()
    assert "offline teacher" in (one / "changes.md").read_text()
    assert "Walk Pick Routine" in (one / "lockroom-skills" / "SKILL.md").read_text()
    assert "scoring" in (one / "gate-candidate.log").read_text()
    assert len(scored.read_text().splitlines()) == 2
    out = capsys.readouterr().out
    assert "edits: 1 applied" in out and "gate: accepted" in out

    # the same command again recomputes nothing and runs no evaluator
    assert evolve(work, current, fetch, "--gate-command", gate) == 0
    assert "nothing was recomputed" in capsys.readouterr().out
    assert len(scored.read_text().splitlines()) == 2

    # round 2 from the accepted bank: a second fetch skill covers nothing new: rejected; the
    # current bank (round 1's candidate) was scored already, so only the candidate is run
    bring = write(tmp_path / "r3", [bring_win(0), bring_win(1)])
    assert evolve(work, accepted, bring, "--gate-command", gate) == 0
    two = work / "evolution" / "round-002"
    decision = json.loads((two / "gate.json").read_text())
    assert decision["decision"] == "rejected" and decision["current_score_reused"] is True
    assert len(scored.read_text().splitlines()) == 3
    assert (two / "skill_bank.json").read_bytes() == accepted.read_bytes()
    (rejected,) = lines(two / "rejected_edits.jsonl")
    assert rejected["fate"] == "rejected_by_gate" and rejected["text"]["title"] == "Walk Routine"
    assert "not above" in rejected["fate_reason"]

    # round 3 sees round 2's rejected edit as one that did not help and does not propose it
    again = write(tmp_path / "r4", [bring_win(0), bring_win(1)])
    assert evolve(work, two / "skill_bank.json", again, "--gate-command", gate) == 0
    three = work / "evolution" / "round-003"
    assert lines(three / "edits.jsonl") == []
    assert json.loads((three / "gate.json").read_text())["decision"] == "no_edits"
    assert len(scored.read_text().splitlines()) == 3

    # without a gate every selected edit is applied, and the round says so
    assert evolve(tmp_path / "nogate", current, bring) == 0
    round_one = tmp_path / "nogate" / "evolution" / "round-001"
    assert json.loads((round_one / "gate.json").read_text())["decision"] == "no_gate"
    assert "No gate ran" in (round_one / "changes.md").read_text()


def bank_file(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "bank.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(("data", "expected"), [
    ({"general_skills": [], "query_type_skills": {}}, "has 'query_type_skills' but lockroom"),
    ({"general_skills": "none"}, "general_skills"),
    ({"task_specific_skills": {"cooking": []}}, "unknown lockroom categories ['cooking']"),
])
def test_a_bank_that_cannot_be_current_is_one_line_and_exit_2(registered, tmp_path, capsys,
                                                               data, expected) -> None:
    rollouts = write(tmp_path / "new", [fetch_win(0)])
    assert evolve(tmp_path / "work", bank_file(tmp_path, data), rollouts) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err and "bank.json" in err
    assert not (tmp_path / "work" / "evolution").exists()


def test_bad_folders_and_gate_commands_are_refused_before_any_work(registered, tmp_path,
                                                                   capsys) -> None:
    bank = bank_file(tmp_path, {"general_skills": []})
    empty = tmp_path / "empty"
    empty.mkdir()
    assert evolve(tmp_path / "work", bank, empty) == 2
    assert "empty" in capsys.readouterr().err
    rollouts = write(tmp_path / "new", [fetch_win(0)])
    for command, said in (("/no/such/evaluator {bank}", "cannot start '/no/such/evaluator'"),
                          (f"{sys.executable} -c pass", "has no {bank}")):
        assert evolve(tmp_path / "work", bank, rollouts, "--gate-command", command) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and said in err
    assert evolve(tmp_path / "work", bank, rollouts, "--protect", "kitchen") == 2
    assert "no such section" in capsys.readouterr().err
    assert not (tmp_path / "work" / "evolution").exists()


@pytest.mark.parametrize(("body", "said"), [
    ("raise SystemExit(3)", "exited with status 3"),
    ("print('score: 1')", 'printed no {"score": <number>} line'),
    ("import time; time.sleep(60)", "longer than --gate-timeout 1s"),
])
def test_a_failing_evaluator_is_one_error_and_keeps_the_candidate(registered, tmp_path, capsys,
                                                                   body, said) -> None:
    bank = bank_file(tmp_path, {"general_skills": [], "task_specific_skills": {},
                                "common_mistakes": []})
    rollouts = write(tmp_path / "new", [fetch_win(0), fetch_win(1)])
    broken = tmp_path / "broken.py"
    broken.write_text(body + "\n")
    work = tmp_path / "work"
    code = evolve(work, bank, rollouts, "--gate-command", f"{sys.executable} {broken} {{bank}}",
                  "--gate-timeout", "1")
    assert code == 1
    err = capsys.readouterr().err
    failed = [line for line in err.splitlines() if "gate failed" in line]
    assert len(failed) == 1 and said in failed[0] and "gate-" in failed[0]
    folder = work / "evolution" / "round-001"
    assert (folder / "candidate_skill_bank.json").is_file()
    assert not (folder / "skill_bank.json").exists()
    candidate_manifest = dict(iter_manifests(folder))["candidate_skill_bank.json"]

    # fixed, the same round gates the kept candidate; reflect is not run again
    gate, _ = evaluator(tmp_path)
    assert evolve(work, bank, rollouts, "--gate-command", gate) == 0
    assert dict(iter_manifests(folder))["candidate_skill_bank.json"] == candidate_manifest
    assert json.loads((folder / "gate.json").read_text())["decision"] == "accepted"


def test_over_http_edits_are_journaled_checked_and_never_paid_twice(
        registered, tmp_path, server_factory, monkeypatch) -> None:
    """The test server answers reflect with an ADD, a REVISE of the bank's first entry and a
    RETIRE of an id the bank does not have; the RETIRE is dropped with its reason, listed."""
    monkeypatch.setenv("OPENAI_API_KEY", TEST_API_KEY)
    server = server_factory(responder=stage_responder)
    bank = bank_file(tmp_path, {
        "general_skills": [{"skill_id": "gen_001", "title": "Plan First",
                            "principle": "Plan the steps.", "when_to_apply": "Always."}],
        "task_specific_skills": {"unlock": [], "fetch": []}, "common_mistakes": []})
    rollouts = write(tmp_path / "new", [fetch_win(0), fetch_win(1),
                                        lockroom.rollout_text(2, "hall 1", False)])
    work = tmp_path / "work"
    argv = ["evolve", lockroom.NAME, "--teacher", "openai", "--base-url", server.base_url,
            "--skill-bank", str(bank), "--rollout-dir", str(rollouts), "--work-dir", str(work),
            "--memories-per-call", "2"]
    assert main(argv) == 0
    folder = work / "evolution" / "round-001"
    edits = lines(folder / "edits.jsonl")
    retire = [e for e in edits if e["op"] == "RETIRE"]  # one per reflect call, then merged
    final = [e for e in retire if e["fate"] != "merged"]
    assert len(retire) == 3 and len(final) == 1 and final[0]["fate"] == "dropped"
    assert "missing_999, which the current bank does not have" in final[0]["fate_reason"]
    assert sorted(final[0]["sources"]) == sorted(e["edit_id"] for e in retire if e != final[0])
    assert any(e["fate"] == "applied" and e["op"] == "REVISE" and e["target_id"] == "gen_001"
               for e in edits)
    rejects = lines(folder / "evolve_rejects.jsonl")
    assert any("missing_999" in r["detail"] for r in rejects)
    candidate = json.loads((folder / "skill_bank.json").read_text())
    revised = candidate["general_skills"][0]
    assert revised["principle"] == "Check the goal again before every action."
    added = {candidate["task_specific_skills"]["fetch"][0]["skill_id"],
             candidate["common_mistakes"][0]["mistake_id"]}
    assert added == {"dyn_001", "dyn_002"}
    usage = dict(iter_manifests(folder))["candidate_skill_bank.json"]["teacher"]
    assert sum(u["calls_new"] for u in usage) >= 3  # two reflect calls and a merge
    assert (work / "journal").is_dir()

    requests = server.stats.total
    assert main([*argv, "--force", "memories"]) == 0  # everything recomputed, from the journal
    assert server.stats.total == requests
    for path in work.rglob("*"):
        if path.is_file():
            assert TEST_API_KEY.encode() not in path.read_bytes(), path
    assert os.environ["OPENAI_API_KEY"] == TEST_API_KEY


def split_sample(sample: Path, root: Path) -> tuple[Path, Path]:
    """The bundled ALFWorld sample in two rounds: env000-003, then env004-007."""
    first, second = root / "round1", root / "round2"
    for env in sorted(p.name for p in sample.iterdir() if p.is_dir()):
        shutil.copytree(sample / env, (first if env < "env004" else second) / env)
    return first, second


SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rollouts" / "alfworld"


def test_the_alfworld_sample_in_two_rounds_with_the_offline_teacher(tmp_path, capsys) -> None:
    first, second = split_sample(SAMPLE, tmp_path)
    work = tmp_path / "work"
    common = ["--teacher", "offline", "--include-mixed"]
    assert main(["run", "alfworld", *common, "--rollout-dir", str(first),
                 "--work-dir", str(work)]) == 0
    current = work / "skill_bank.json"
    assert main(["evolve", "alfworld", *common, "--skill-bank", str(current),
                 "--rollout-dir", str(second), "--work-dir", str(work)]) == 0
    folder = work / "evolution" / "round-001"
    edits = lines(folder / "edits.jsonl")
    applied = [e for e in edits if e["fate"] == "applied"]
    assert 1 <= len(applied) <= 4 and all(e["evidence"] for e in applied)
    assert [e["new_id"] for e in applied if e["op"] == "ADD"] == [
        f"dyn_{n:03d}" for n in range(1, 1 + sum(e["op"] == "ADD" for e in applied))]
    before, after = json.loads(current.read_text()), json.loads((folder / "skill_bank.json")
                                                                .read_text())
    touched = {e["target_id"] for e in applied}
    assert {k: v for k, v in entries(before).items() if k not in touched} == {
        k: v for k, v in entries(after).items() if k in entries(before) and k not in touched}
    assert "smoke test" in (folder / "changes.md").read_text()
    # the evolved bank is a bank stage 3 reads: the corpus is rebuilt with it
    assert main(["run", "alfworld", *common, "--skill-bank", str(folder / "skill_bank.json"),
                 "--rollout-dir", str(first), "--work-dir", str(work)]) == 0
    assert json.loads((work / "alfworld_sft_data.json").read_text())


def test_a_corpus_rebuild_pays_only_for_blocks_that_changed(tmp_path, server_factory,
                                                            monkeypatch) -> None:
    """Distillation's journal key is the rendered prompt, whose skill block holds the general
    principles, the task's category skills and the mistakes: with those two sections
    protected, a rebuild pays exactly for the trajectories of the categories edits touched."""
    monkeypatch.setenv("OPENAI_API_KEY", TEST_API_KEY)
    server = server_factory(responder=stage_responder)
    first, _ = split_sample(SAMPLE, tmp_path)
    second = tmp_path / "round2"  # the new rollouts of round 2: every env again, so edits
    shutil.rmtree(second)         # touch categories round 1 distilled
    shutil.copytree(SAMPLE, second)
    work = tmp_path / "work"
    common = ["--teacher", "openai", "--base-url", server.base_url, "--include-mixed"]
    assert main(["run", "alfworld", *common, "--rollout-dir", str(first),
                 "--work-dir", str(work)]) == 0
    distilled = json.loads((work / "distilled_trajectories.json").read_text())
    assert main(["evolve", "alfworld", *common, "--skill-bank", str(work / "skill_bank.json"),
                 "--rollout-dir", str(second), "--work-dir", str(work), "--protect", "general",
                 "--protect", "mistakes"]) == 0
    folder = work / "evolution" / "round-001"
    changed = {e["section"] for e in lines(folder / "edits.jsonl") if e["fate"] == "applied"}
    assert changed and not changed & {"general", "mistakes"}
    assert main(["run", "alfworld", *common, "--skill-bank", str(folder / "skill_bank.json"),
                 "--rollout-dir", str(first), "--work-dir", str(work)]) == 0
    (usage,) = dict(iter_manifests(work))["distilled_trajectories.json"]["teacher"]
    expected = sum(c["extra_info"]["task_type"] in changed for c in distilled)
    assert usage["calls_new"] == expected > 0
    assert usage["calls_from_journal"] == len(distilled) - expected
    assert (f"`distill`: {expected} of {len(distilled)} requests were new"
            in (work / "report.md").read_text())
