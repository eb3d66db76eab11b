"""One chat request, as the journal knows it and as the server receives it.

The live teacher and the Batch API teacher ask the same questions, so both take from here the
two things that define a request: its journal key (what identifies the answer: model, messages,
generation parameters, answer schema, prompt version; never the response mode, so an answer is
found again whichever mode asked for it) and its body in a response mode. A live call sends
`body_bytes(...)` as its request body, and a batch line carries the very same bytes as its
`body`: the two cannot drift apart, and a batch item gets the strict `json_schema` (or the mode
negotiated for the endpoint) exactly as a live call would.
"""

from collections.abc import Mapping
from typing import Any

import orjson
from pydantic import BaseModel

from skillsft.pipeline.teacher.base import TeacherRequest
from skillsft.pipeline.teacher.journal import request_key
from skillsft.pipeline.teacher.openai.structured import (
    Messages,
    ResponseMode,
    answer_schema,
    messages_for_mode,
    response_format,
)


def chat_key(model: str, parameters: Mapping[str, Any], messages: Messages,
             request: TeacherRequest[Any]) -> str:
    """The journal key of one call of `request`'s conversation (its first ask or a re-ask)."""
    return request_key(
        model=model, messages=messages, parameters=parameters,
        answer_schema=answer_schema(request.answer_model),
        prompt_version=request.prompt_version,
    )


def chat_body(model: str, messages: Messages, parameters: Mapping[str, Any],
              mode: ResponseMode, answer_model: type[BaseModel]) -> dict[str, Any]:
    """The chat-completions body in `mode`: the schema as `response_format` where the server
    enforces it, else as an instruction appended to the messages."""
    body: dict[str, Any] = {
        "model": model,
        "messages": messages_for_mode(messages, mode, answer_model),
        **parameters,
    }
    format_parameter = response_format(mode, answer_model)
    if format_parameter is not None:
        body["response_format"] = format_parameter
    return body


def body_bytes(body: Mapping[str, Any]) -> bytes:
    """The body as sent: compact JSON, keys in the order `chat_body` made them."""
    return orjson.dumps(body)
