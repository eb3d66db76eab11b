"""Answer models bounded for one request: list lengths (and allowed step indices) the request
already fixes, said in the schema the teacher is sent and checked again on the answer.

A grammar-constrained server (llama.cpp's `json_object` + `schema`) writes exactly what the
schema admits, so an unbounded list lets a weak model repeat items until the token limit cuts
the answer off; with `maxItems` set to what the request can need (a trajectory of 3 steps has at
most 3 refined steps; an aggregation call returns at most its `max_outputs`) it cannot. The
same limits are validated, so a server that does not enforce the schema is held to them too
(and the re-ask names the problem). `maxItems` and `enum` are within OpenAI's strict mode.
"""

from functools import lru_cache
from typing import Any

from pydantic import BaseModel, model_validator

Limits = tuple[tuple[str, int], ...]  # (top-level list field, max items), sorted


def _bound(node: dict[str, Any], max_items: int) -> None:
    """Set maxItems on an array schema, or on the array branch of a nullable anyOf."""
    if node.get("type") == "array":
        node["maxItems"] = max_items
    for branch in node.get("anyOf", []):
        _bound(branch, max_items)


@lru_cache(maxsize=4096)
def bounded_answer_model(
    base: type[BaseModel], limits: Limits, step_indices: tuple[int, ...] = ()
) -> type[BaseModel]:
    """`base` with at most `n` items in each listed field, and, when `step_indices` is given,
    every `step_index` in the schema restricted to them. Keeps `base`'s name."""

    def teacher_schema(cls: type[BaseModel]) -> dict[str, Any]:
        schema = base.model_json_schema()
        for name, max_items in limits:
            _bound(schema["properties"][name], max_items)
        if step_indices:
            for definition in schema.get("$defs", {}).values():
                if "step_index" in definition.get("properties", {}):
                    definition["properties"]["step_index"] = {
                        "type": "integer", "enum": list(step_indices)}
        return schema

    def check_limits(self: BaseModel) -> BaseModel:
        for name, max_items in limits:
            value = getattr(self, name)
            if value is not None and len(value) > max_items:
                raise ValueError(f"{name} has {len(value)} items; at most {max_items} fit this "
                                 "request")
        return self

    return type(base.__name__, (base,), {
        "__module__": base.__module__,
        "teacher_schema": classmethod(teacher_schema),
        "_check_limits": model_validator(mode="after")(check_limits),
    })
