"""Luigi parameters that carry whole objects: an options object, or the task that feeds this one.

An options object travels as one parameter, serialised as sorted JSON (so it is part of the
task id, and `luigi --module ... --distill '{"render": {"history": 3}}'` works; a field marked
`Opt(omit_at_default=True)` is left out while at its default, so adding it moved no task id);
the task reads typed fields from it instead of one Luigi parameter per knob. An upstream task
travels as a task-instance parameter, so each task carries only its own options and the graph
is composed by whoever builds it (skillsft/graph.py), not inherited through a ladder of mixins.
"""

import json
from typing import Any

import luigi
from luigi.task_register import Register

from skillsft.pipeline.options import from_jsonable, from_values, identity_jsonable


def _dumps(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def _identity(task: luigi.Task) -> dict[str, Any]:
    """A task as its family and significant parameters: what makes its task id, so the id of a
    task depends on its upstream's id and on nothing insignificant upstream (parsed back, the
    insignificant parameters take their defaults)."""
    return {"family": task.get_task_family(),
            "params": task.to_str_params(only_significant=True)}


class OptionsParameter(luigi.Parameter):
    """One options object (a dataclass or pydantic model of `pipeline/`), as JSON."""

    def __init__(self, options_cls: type, **kwargs: Any) -> None:
        self.options_cls = options_cls
        # Nested options built out (AggregateOptions' bank shape), as the command line does.
        kwargs.setdefault("default", from_values(options_cls, {}))
        super().__init__(**kwargs)

    def parse(self, x: str) -> Any:
        return from_jsonable(self.options_cls, json.loads(x)) if x else self.options_cls()

    def serialize(self, x: Any) -> str:
        return _dumps(identity_jsonable(x))

    def normalize(self, x: Any) -> Any:
        if isinstance(x, str):
            return self.parse(x)
        if isinstance(x, dict):
            return from_jsonable(self.options_cls, x)
        return x


class TaskInstanceParameter(luigi.Parameter):
    """Another task instance (the upstream this one reads), as its family and parameters."""

    def parse(self, x: str) -> luigi.Task | None:
        if not x:
            return None
        data = json.loads(x)
        return Register.get_task_cls(data["family"]).from_str_params(data["params"])

    def serialize(self, x: luigi.Task | None) -> str:
        if x is None:
            return ""
        return _dumps(_identity(x))

    def normalize(self, x: Any) -> Any:
        return self.parse(x) if isinstance(x, str) else x


class TaskListParameter(luigi.Parameter):
    """Several upstream task instances, in order."""

    def parse(self, x: str) -> tuple[luigi.Task, ...]:
        single = TaskInstanceParameter()
        return tuple(single.parse(_dumps(item)) for item in json.loads(x)) if x else ()

    def serialize(self, x: tuple[luigi.Task, ...]) -> str:
        return _dumps([_identity(t) for t in x])

    def normalize(self, x: Any) -> Any:
        return self.parse(x) if isinstance(x, str) else tuple(x)
