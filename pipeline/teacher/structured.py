"""Getting a pydantic answer out of a chat completion, whatever the server supports.

Three response modes, best first. `json_schema` sends the answer model's schema as
`response_format`; `json_object` asks only for JSON; `text` asks nothing of the server. In the
two weaker modes the schema travels in a system message instead, and in `text` mode the JSON is
dug out of the reply (code fences, prose around it). Whatever the mode, the answer is validated
with pydantic; a problem is described in words the model can act on, for the re-ask.
"""

import functools
import json
from collections.abc import Sequence
from typing import Any, Literal, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

ResponseMode = Literal["json_schema", "json_object", "text"]
RESPONSE_MODES: tuple[ResponseMode, ...] = ("json_schema", "json_object", "text")

Messages = tuple[dict[str, str], ...]
AnswerT = TypeVar("AnswerT", bound=BaseModel)


@functools.cache
def answer_schema(answer_model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema, built once per model class (pydantic rebuilds it on every call,
    which at thousands of requests is a measurable share of a run's CPU). Read-only."""
    return answer_model.model_json_schema()


def response_format(mode: ResponseMode, answer_model: type[BaseModel]) -> dict[str, Any] | None:
    """The `response_format` parameter for a mode (None: send none)."""
    if mode == "json_schema":
        return {
            "type": "json_schema",
            "json_schema": {"name": answer_model.__name__, "schema": answer_schema(answer_model)},
        }
    if mode == "json_object":
        return {"type": "json_object"}
    return None


def messages_for_mode(
    messages: Sequence[dict[str, str]], mode: ResponseMode, answer_model: type[BaseModel]
) -> list[dict[str, str]]:
    """Add the schema as an instruction when the server will not enforce it itself."""
    if mode == "json_schema":
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


def extract_json(text: str) -> Any:
    """Parse the reply as JSON, else the first balanced {...} inside it (fences, prose)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
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
