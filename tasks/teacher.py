"""The teacher plan as a Luigi parameter. What the plan holds and how a stage's teacher is built
from it is the teacher layer's (pipeline/teacher/plan.py); this is only the wiring."""

from typing import Any

from skillsft.pipeline.teacher.plan import TeacherPlan
from skillsft.tasks.options_param import OptionsParameter


class TeacherParameter(OptionsParameter):
    """The command's resolved teacher plan as one Luigi parameter: never the key."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(TeacherPlan, **kwargs)
