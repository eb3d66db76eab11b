"""The request kinds the teacher layer answers, in one table: per kind, the answer model a
reply must fit, the prompt version (part of every journal key), and the type of the context
the offline teacher answers from (contexts.py; its solvers are listed per kind in
teacher/offline/solvers.py).

Stages build their requests with `RequestKind.request` and read answers with
`RequestKind.answer`, so a stage names a kind, never the teacher that answers it; the prompt
text stays with its stage. Bump a kind's prompt version when that stage's prompt text
changes: the golden prompts (tests/golden) show when it did.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from skillsft.pipeline.teacher.base import TeacherRequest, TeacherResult
from skillsft.pipeline.teacher.contexts import (
    AggregateContext,
    DistillContext,
    MemoryContext,
    MergeContext,
    ReflectContext,
)
from skillsft.schemas.distill_answers import DistillAnswer
from skillsft.schemas.evolve import MergeAnswer, ReflectAnswer
from skillsft.schemas.memory_answers import MemoryAnswer, MistakesAnswer, SkillsAnswer


@dataclass(frozen=True)
class RequestKind:
    name: str
    answer_model: type[BaseModel]  # requests may ask for a stricter subclass (answer_bounds)
    prompt_version: str
    context_type: type  # what the offline teacher's solver for this kind reads

    def request(
        self, request_id: str, messages: Sequence[dict[str, str]], *,
        context: Callable[[], Any], answer_model: type[BaseModel] | None = None,
    ) -> TeacherRequest[Any]:
        """A request of this kind. `context` builds the offline context; it is called only by
        the teacher that needs it (the offline one, and the dry run's stand-in answers)."""
        model = answer_model or self.answer_model
        if not issubclass(model, self.answer_model):
            raise TypeError(f"{self.name} requests are answered by {self.answer_model.__name__} "
                            f"or a subclass, not {model.__name__}")
        return TeacherRequest(request_id=request_id, kind=self.name, messages=tuple(messages),
                              answer_model=model, prompt_version=self.prompt_version,
                              offline_context=context)

    def answer(self, result: TeacherResult[Any]) -> Any:
        """The result's answer as this kind's model, or None when the request failed."""
        if result.answer is not None and not isinstance(result.answer, self.answer_model):
            raise TypeError(f"a {self.name} result holds a {type(result.answer).__name__}")
        return result.answer


MEMORY = RequestKind("memory", MemoryAnswer, "memory-v3", MemoryContext)
AGGREGATE_SKILLS = RequestKind("aggregate_skills", SkillsAnswer, "aggregate-skills-v2",
                               AggregateContext)
AGGREGATE_MISTAKES = RequestKind("aggregate_mistakes", MistakesAnswer, "aggregate-mistakes-v2",
                                 AggregateContext)
DISTILL = RequestKind("distill", DistillAnswer, "distill-v2", DistillContext)
# skillsft evolve (pipeline/stages/evolve/): edits proposed from new memories, then merged
EVOLVE_REFLECT = RequestKind("evolve_reflect", ReflectAnswer, "evolve-reflect-v1",
                             ReflectContext)
EVOLVE_MERGE = RequestKind("evolve_merge", MergeAnswer, "evolve-merge-v1", MergeContext)

KINDS: dict[str, RequestKind] = {
    kind.name: kind for kind in (MEMORY, AGGREGATE_SKILLS, AGGREGATE_MISTAKES, DISTILL,
                                   EVOLVE_REFLECT, EVOLVE_MERGE)
}
