"""Skill banks (FORMATS.md section 5).

ALFWorld and WebShop banks key their per-category skills as `task_specific_skills`, Search
banks as `query_type_skills`; exactly one of the two is expected. `metadata` is free-form.
"""

from typing import Any

from pydantic import Field, model_validator

from skillsft.schemas.base import OpenModel


class Skill(OpenModel):
    skill_id: str
    title: str
    principle: str
    when_to_apply: str = ""


class CommonMistake(OpenModel):
    mistake_id: str
    description: str
    why_it_happens: str = ""
    how_to_avoid: str


class SkillBank(OpenModel):
    general_skills: list[Skill] = Field(default_factory=list)
    task_specific_skills: dict[str, list[Skill]] | None = None
    query_type_skills: dict[str, list[Skill]] | None = None
    common_mistakes: list[CommonMistake] = Field(default_factory=list)
    metadata: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_category_map(self) -> "SkillBank":
        if self.task_specific_skills is not None and self.query_type_skills is not None:
            raise ValueError("a skill bank has task_specific_skills or query_type_skills, not both")
        return self

    def category_skills(self) -> dict[str, list[Skill]]:
        """Per-category skills whichever key the bank uses."""
        return self.task_specific_skills or self.query_type_skills or {}
