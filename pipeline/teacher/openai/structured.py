"""Getting a pydantic answer out of a chat completion, whatever the server supports.

Four response modes, best first:

- `json_schema`: OpenAI's structured outputs, `{"type": "json_schema", "json_schema": {"name",
  "strict": true, "schema"}}`; the schema is made strict-compatible (`strict_schema`).
- `json_object_schema`: llama.cpp / llama-cpp-python's form, `{"type": "json_object",
  "schema": {...}}`, which those servers turn into a decoding grammar.
- `json_object`: only "some JSON"; the schema travels in a system message.
- `text`: nothing asked of the server; the schema travels in a system message and the JSON is
  dug out of the reply (code fences, prose around it).

Reasoning models (R1 distills, QwQ, Qwen3 thinking) may open a reply with a `<think>...</think>`
block, and in the weaker modes nothing stops them; the JSON inside that block is the model
thinking aloud, not its answer, so the answer is looked for only after the block
(`answer_part`). The journal keeps the reply as the server sent it; a server's separate
`reasoning_content` field is never read as the answer (the teacher reads `content` only).

Whatever the mode, the answer is validated with pydantic; a problem is described in words the
model can act on, for the re-ask.

An answer model may describe, for one request, a tighter schema than pydantic's own by defining
a classmethod `teacher_schema()` (distillation: one required property per asked step), so a
grammar-constrained server cannot produce a wrong shape at all.
"""

import copy
import functools
import json
import re
from collections.abc import Sequence
from typing import Any, Literal, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

ResponseMode = Literal["json_schema", "json_object_schema", "json_object", "text"]
RESPONSE_MODES: tuple[ResponseMode, ...] = (
    "json_schema", "json_object_schema", "json_object", "text"
)
# Modes in which the server itself enforces the schema; in the others it goes in the prompt.
ENFORCING_MODES: frozenset[ResponseMode] = frozenset({"json_schema", "json_object_schema"})

Messages = tuple[dict[str, str], ...]
AnswerT = TypeVar("AnswerT", bound=BaseModel)

# Annotations that only describe; dropped so the schema stays small and within strict mode.
_DESCRIPTIVE = ("default", "title", "examples")
# Checks OpenAI's strict mode does not accept (llama.cpp grammars do, so only the json_schema
# mode goes without them); pydantic still checks them on every answer.
_NOT_IN_OPENAI_STRICT = ("minLength", "maxLength")
# Keys whose value maps names to schemas (not a schema itself).
_SCHEMA_MAPS = ("properties", "$defs", "definitions")


@functools.cache
def answer_schema(answer_model: type[BaseModel]) -> dict[str, Any]:
    """The schema sent to the teacher for this answer model, strict-compatible, built once per
    model class (pydantic rebuilds it on every call, which at thousands of requests is a
    measurable share of a run's CPU). Read-only."""
    custom = getattr(answer_model, "teacher_schema", None)
    schema = custom() if callable(custom) else answer_model.model_json_schema()
    return strict_schema(schema)


@functools.cache
def openai_strict_schema(answer_model: type[BaseModel]) -> dict[str, Any]:
    """`answer_schema` minus the keywords OpenAI's strict mode refuses."""
    return _without(copy.deepcopy(answer_schema(answer_model)), _NOT_IN_OPENAI_STRICT)


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema as OpenAI's strict mode wants it: every object closed
    (`additionalProperties: false`) with every property required, no `default`/`title`.

    A property that was optional keeps accepting what it accepted (an optional field that is
    nullable stays nullable); the model is merely asked to always write it, which the pydantic
    model accepts too."""
    return _strict(_without(copy.deepcopy(schema), _DESCRIPTIVE))


def _children(node: dict[str, Any]) -> list[Any]:
    """The sub-schemas of a schema node."""
    found: list[Any] = []
    for key, value in node.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            found.extend(value.values())
        elif isinstance(value, dict):
            found.append(value)
        elif isinstance(value, list):
            found.extend(item for item in value if isinstance(item, dict))
    return found


def _without(node: dict[str, Any], keywords: Sequence[str]) -> dict[str, Any]:
    for keyword in keywords:
        node.pop(keyword, None)
    for child in _children(node):
        _without(child, keywords)
    return node


def _strict(node: dict[str, Any]) -> dict[str, Any]:
    if node.get("type") == "object" or "properties" in node:
        node["additionalProperties"] = False
        node["required"] = list(node.get("properties", {}))
    for child in _children(node):
        _strict(child)
    return node


def response_format(mode: ResponseMode, answer_model: type[BaseModel]) -> dict[str, Any] | None:
    """The `response_format` parameter for a mode (None: send none)."""
    if mode == "json_schema":
        return {
            "type": "json_schema",
            "json_schema": {
                "name": answer_model.__name__,
                "strict": True,
                "schema": openai_strict_schema(answer_model),
            },
        }
    if mode == "json_object_schema":
        return {"type": "json_object", "schema": answer_schema(answer_model)}
    if mode == "json_object":
        return {"type": "json_object"}
    return None


def messages_for_mode(
    messages: Sequence[dict[str, str]], mode: ResponseMode, answer_model: type[BaseModel]
) -> list[dict[str, str]]:
    """Add the schema as an instruction when the server will not enforce it itself."""
    if mode in ENFORCING_MODES:
        return list(messages)
    schema = json.dumps(answer_schema(answer_model), separators=(",", ":"))
    instruction = {
        "role": "system",
        "content": "Reply with one JSON object, and nothing else, that validates against this "
        f"JSON schema: {schema}",
    }
    return [*messages, instruction]


class AnswerProblem(ValueError):
    """Why a reply is not a usable answer; `kind` feeds the failure counters."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


# Tags reasoning models wrap their thinking in; case-insensitive.
_REASONING_TAGS = ("think", "thinking", "reasoning")
_REASONING_CLOSE = re.compile(r"</\s*(?:" + "|".join(_REASONING_TAGS) + r")\s*>", re.I)
_REASONING_OPEN = re.compile(r"\s*<\s*(?:" + "|".join(_REASONING_TAGS) + r")\s*>", re.I)


def answer_part(text: str) -> str:
    """The reply without its reasoning: what follows the last closing tag. A reply that closes a
    block it never opened (templates that put `<think>` in the prompt) is cut the same way; a
    reply that opens a block and never closes it has no answer yet (AnswerProblem)."""
    if "<" not in text:  # the usual reply: nothing to cut, nothing searched
        return text
    closes = list(_REASONING_CLOSE.finditer(text))
    if closes:
        return text[closes[-1].end():]
    if _REASONING_OPEN.match(text):
        raise AnswerProblem(
            "unfinished_reasoning",
            "the reply is a <think> block that never ends, with no answer after it; close "
            "the reasoning with </think> and put the JSON object after it")
    return text


def extract_json(text: str) -> Any:
    """Parse the answer as JSON, else the first balanced {...} inside it (fences, prose); the
    answer is what follows any reasoning block (`answer_part`). A reply that is JSON as a whole
    is the answer as it is, whatever its strings say."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    answer = answer_part(text)
    if answer is not text:
        try:
            return orjson.loads(answer)
        except orjson.JSONDecodeError:
            text = answer
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start >= 0:
        try:
            value, _ = decoder.raw_decode(text, start)
            return value
        except json.JSONDecodeError:
            start = text.find("{", start + 1)
    raise AnswerProblem("invalid_json", "the reply contains no complete JSON object")


def parse_answer(
    raw_text: str | None, finish_reason: str | None, answer_model: type[AnswerT]
) -> AnswerT:
    """Validate one raw reply; raises AnswerProblem saying what is wrong."""
    if finish_reason == "length":
        raise AnswerProblem(
            "truncated", "the reply was cut off at the token limit (finish_reason=length)"
        )
    if not raw_text or not raw_text.strip():
        raise AnswerProblem("empty", "the reply was empty")
    data = extract_json(raw_text)
    try:
        return answer_model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or '<root>'}: {error['msg']}"
            for error in exc.errors()[:10]
        )
        raise AnswerProblem("schema", f"the JSON does not match the schema ({problems})") from exc


def reask_messages(messages: Messages, raw_text: str | None, problem: AnswerProblem) -> Messages:
    """The conversation continued with the bad reply and what to fix."""
    correction = (
        f"Your previous reply could not be used: {problem.detail}. Reply again with only the "
        "complete JSON object that matches the required schema."
    )
    if problem.kind == "truncated":
        correction += " Keep it shorter so that it fits."
    return (
        *messages,
        {"role": "assistant", "content": raw_text or ""},
        {"role": "user", "content": correction},
    )
