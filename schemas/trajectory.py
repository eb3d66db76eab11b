"""Processed trajectories (FORMATS.md section 3): stage 1 output and "bring your own JSON" input."""

from typing import Literal

from pydantic import Field

from skillsft.schemas.base import StrictModel

EnvType = Literal["all_success", "all_fail", "mixed"]
Outcome = Literal["Success", "Failure"]


class Step(StrictModel):
    """One step of an ALFWorld/WebShop episode.

    `observation` is what the agent saw after `action` (for `Step -1`, the initial state),
    with the writer's boilerplate and the admissible list removed. `metadata` keeps writer lines
    such as `Raw Model Output` so they never leak into the observation.
    """

    step_id: str
    action: str | None
    observation: str
    admissible_actions: list[str] = Field(default_factory=list)
    reward: float = 0.0
    done: bool = False
    metadata: dict[str, str] = Field(default_factory=dict)


class SearchStep(Step):
    """One step of a Search-QA episode.

    `action` is the full action tag (`<search>q</search>` or `<answer>a</answer>`),
    `observation` the retrieved information ("" when the step retrieved nothing) and
    `memory_context` the history text the agent saw before taking this step.
    """

    memory_context: str = ""


class TrajectorySet(StrictModel):
    """One env folder: the task and the kept episodes (each a list of steps)."""

    env_id: str
    task: str
    type: EnvType
    trajectories: list[list[Step]]


class SearchTrajectorySet(StrictModel):
    """One Search-QA question with its single episode and outcome."""

    env_id: str
    task: str
    type: EnvType
    data_source: str = "unknown"
    outcome: Outcome
    reward: float
    trajectories: list[list[SearchStep]]
