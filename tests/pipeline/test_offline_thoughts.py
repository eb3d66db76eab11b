"""The offline teacher's thoughts: never contradicting the observation, varying with the
situation, on every turn of the bundled samples and of the shared sample rollouts."""

import importlib.util
import re
from collections import Counter
from pathlib import Path

import pytest

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.formats.conversations import RenderOptions
from skillsft.pipeline.formats.rollouts.selection import SelectionOptions
from skillsft.pipeline.stages.corpus_metrics import thoughts_of
from skillsft.pipeline.stages.distill import DistillOptions, distill
from skillsft.pipeline.stages.parse import parse_rollouts
from skillsft.pipeline.teacher.offline import OfflineTeacher
from skillsft.schemas.skill_bank import SkillBank

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "examples" / "rollouts"


def _load_thought_claims():
    """scripts/thought_claims.py, the claim-by-claim check (a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("thought_claims",
                                                  REPO_ROOT / "scripts" / "thought_claims.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


find_contradictions = _load_thought_claims().find_contradictions
SHARED = {"alfworld": "alfworld-sample", "webshop": "webshop-react-sample"}


def _every_turn(env: str, rollout_dir: Path) -> list[tuple[str, str, str, str]]:
    """(goal, observation, action, thought) for every turn of every trajectory, failures too."""
    spec = get_env(env)
    # Every episode counts (the shared WebShop sample has one episode per env).
    every = SelectionOptions(include_mixed=True, min_trajs_per_env=1, label_min_outcomes=1,
                             n_success_envs=10_000, n_fail_envs=10_000)
    records = parse_rollouts(rollout_dir, spec, every, workers=1).records
    result = distill(records, spec, DistillOptions(include_failed=True),
                     OfflineTeacher(show_progress=False), SkillBank())
    assert result.records, f"no conversation from {rollout_dir}"
    by_id = {f"{r.env_id}/{i}": (r, t) for r in records for i, t in enumerate(r.trajectories)}
    contradictions, turns = [], []
    for conversation in result.records:
        info = conversation.extra_info
        record, steps = by_id[info.trajectory_id]
        drafts = spec.turn_layout().build_turns(record.task, "", steps, info.trajectory_id,
                                                RenderOptions(), Counter())
        said = thoughts_of(t.model_dump(by_alias=True) for t in conversation.conversations)
        triples = [(d.observation, d.action, t) for d, t in zip(drafts, said, strict=True)]
        contradictions += find_contradictions(record.task, triples, spec.action_semantics)
        turns += [(record.task, *triple) for triple in triples]
    assert not contradictions, contradictions[:3]
    return turns


def _assert_varied(turns: list[tuple[str, str, str, str]]) -> None:
    # Two turns in the same situation may read alike; different situations must not collapse
    # into a handful of templates.
    situations = {(goal, obs, action) for goal, obs, action, _ in turns}
    thoughts = {thought for *_, thought in turns}
    assert len(thoughts) >= 0.9 * len(situations), (len(thoughts), len(situations))


@pytest.mark.parametrize("env", ["alfworld", "webshop", "search"])
def test_bundled_samples_every_turn_is_consistent_and_varied(env: str) -> None:
    _assert_varied(_every_turn(env, EXAMPLES / env))


@pytest.mark.parametrize("env", sorted(SHARED))
def test_shared_samples_every_turn_is_consistent_and_varied(env: str, shared_rollouts: Path
                                                            ) -> None:
    rollout_dir = shared_rollouts / SHARED[env]
    if not rollout_dir.is_dir():
        pytest.skip(f"{rollout_dir} is not available")
    _assert_varied(_every_turn(env, rollout_dir))


def test_the_checker_catches_the_old_template_while_holding_the_object() -> None:
    """The thought the issue quotes, after the pick-up, is flagged; the same words before the
    pick-up (nothing in hand, nothing in sight) are not."""
    spec = get_env("alfworld")
    old = "I have not found what I need here yet, so I go to desk 1 to check it next."
    turns = [
        ("You are in the middle of a room.", "go to shelf 1", old),
        ("On the shelf 1, you see a bowl 1.", "take bowl 1 from shelf 1", "I take the bowl."),
        ("You pick up the bowl 1 from the shelf 1.", "go to desk 1", old),
        ("On the desk 1, you see a desklamp 1.", "use desklamp 1", "The task is complete."),
    ]
    found = find_contradictions("look at bowl under the desklamp", turns, spec.action_semantics)
    assert [(c.step, c.claim) for c in found] == [(2, "not_found")]
    wrong_done = [*turns[:3], ("On the desk 1.", "go to bed 1", "The task is complete."),
                  ("On the bed 1.", "use desklamp 1", "ok")]
    found = find_contradictions("look at bowl under the desklamp", wrong_done,
                                spec.action_semantics)
    assert (3, "done") in [(c.step, c.claim) for c in found]


def test_thoughts_differ_when_the_situation_differs() -> None:
    """`go to` reads differently searching, carrying the object, and returning."""
    from skillsft.pipeline.teacher.contexts import DistillContext
    from skillsft.pipeline.teacher.offline.thoughts import solve_distill

    history = [
        {"observation": "You are in the middle of a room.", "action": "go to shelf 1"},
        {"observation": "On the shelf 1, you see a pen 1.", "action": "go to desk 1"},
        {"observation": "On the desk 1, you see nothing.", "action": "go to shelf 1"},
        {"observation": "On the shelf 1, you see a mug 1.", "action": "take mug 1 from shelf 1"},
        {"observation": "You pick up the mug 1 from the shelf 1.", "action": "go to desk 1"},
    ]
    answer = solve_distill(DistillContext(
        goal="put some mug on desk", history=tuple(history), complete=True,
        semantics=get_env("alfworld").action_semantics, skill_titles=(),
        steps=tuple({"index": i, "action": h["action"]} for i, h in enumerate(history))))
    texts = [t.thought for t in answer.thoughts]
    assert "have not found a mug" in texts[0]
    assert "return to shelf 1" in texts[2]
    assert re.search(r"mug in hand.*desk 1, where the goal wants it", texts[4])
    assert len(set(texts)) == len(texts)
