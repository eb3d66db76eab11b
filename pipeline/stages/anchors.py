"""Anchor states: one state reached in two or more attempts at the same task.

A *decision point* is one turn of the corpus seen from the environment's side: the state the
agent was in and the action it took there. What counts as "the same state" is a property of the
turn layout, not of an environment name (`STATE_RULES`):

- text layouts (ALFWorld, WebShop): turn k shows step k's observation and admissible list and
  is answered by step k+1's action; two states are equal when both the normalised observation
  and the admissible list are;
- the Search layout: turn i shows the question and every earlier search with what it
  retrieved, and is answered by step i's action; two states are equal when the question and the
  actions taken so far are.

The initial state of every attempt is an anchor by definition (all attempts at a task start
from it), whatever its text. Steps removed as loops by stage 1 are not in the episodes at all,
so they are never part of a state or an anchor.
"""

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from skillsft.pipeline.formats.conversations import Layout, SearchLayout, TextLayout
from skillsft.pipeline.formats.rollouts.episodes import EpisodeGroup
from skillsft.schemas import Step

INITIAL: tuple[str] = ("<initial state>",)


@dataclass(frozen=True)
class DecisionPoint:
    """State `key` at step `step` (index into the episode's steps), answered by `action`.

    `prefix` is how many steps a renderer needs to show this turn and its answer.
    """

    step: int
    key: Hashable
    action: str
    prefix: int


def text_points(task: str, steps: Sequence[Step]) -> list[DecisionPoint]:
    points = []
    for k in range(len(steps) - 1):
        action = steps[k + 1].action
        if action is None:
            break  # the layout rejects such a trajectory; nothing after it is a turn
        key = INITIAL if k == 0 else (steps[k].observation, tuple(steps[k].admissible_actions))
        points.append(DecisionPoint(k, key, action, k + 2))
    return points


def search_points(task: str, steps: Sequence[Step]) -> list[DecisionPoint]:
    points = []
    for i, step in enumerate(steps):
        if step.action is None:
            break
        key = INITIAL if i == 0 else (task, tuple(s.action for s in steps[:i]))
        points.append(DecisionPoint(i, key, step.action, i + 1))
    return points


# Per turn layout: how an episode's decision points and their states are read.
STATE_RULES: dict[type, Callable[[str, Sequence[Step]], list[DecisionPoint]]] = {
    TextLayout: text_points,
    SearchLayout: search_points,
}


def decision_points(layout: Layout, task: str, steps: Sequence[Step]) -> list[DecisionPoint]:
    return STATE_RULES[type(layout)](task, steps)


@dataclass(frozen=True)
class Anchors:
    """The anchor states of one group: id per state key, and each episode's decision points."""

    ids: dict[Hashable, str]  # state key -> anchor id, numbered in order of first appearance
    points: dict[str, list[DecisionPoint]]  # trajectory id -> its decision points

    def first_visits(self, trajectory_id: str) -> dict[Hashable, DecisionPoint]:
        """Where an episode first stands on each anchor."""
        visits: dict[Hashable, DecisionPoint] = {}
        for point in self.points[trajectory_id]:
            if point.key in self.ids:
                visits.setdefault(point.key, point)
        return visits


def find_anchors(layout: Layout, group: EpisodeGroup) -> Anchors:
    """States occurring in two or more episodes of the group, plus the initial state."""
    points = {e.trajectory_id: decision_points(layout, group.task, e.steps)
              for e in group.episodes}
    seen_in: dict[Hashable, set[str]] = {}
    order: list[Hashable] = []
    for trajectory_id, episode_points in points.items():
        for point in episode_points:
            if point.key not in seen_in:
                seen_in[point.key] = set()
                order.append(point.key)
            seen_in[point.key].add(trajectory_id)
    anchored = [key for key in order if key == INITIAL or len(seen_in[key]) >= 2]
    ids = {key: f"{group.group_id}#a{number}" for number, key in enumerate(anchored)}
    return Anchors(ids, points)
