"""Where a request's conversation stands, read from the journal alone.

A conversation is the request's messages, then for every invalid answer the re-ask that quotes
it. Following it through the journal tells a batch round what is left to do: nothing (a valid
answer), the next message list to send (the first ask, or a re-ask after a validation
failure), or a final failure (invalid answers up to the re-ask limit). Batch rounds never
restart an exhausted conversation: the answer would only come back a round later, just as
invalid, and a re-run would restart it forever.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from skillsft.pipeline.teacher.base import TeacherRequest, TeacherResult
from skillsft.pipeline.teacher.journal import Journal
from skillsft.pipeline.teacher.openai.structured import (
    AnswerProblem,
    Messages,
    parse_answer,
    reask_messages,
)

KeyFor = Callable[[Messages, TeacherRequest[Any]], str]


@dataclass
class Step:
    """What the conversation needs next: a call with these messages (journal key `key`)."""

    messages: Messages
    key: str
    attempt: int  # answers so far


@dataclass
class Followed:
    """The outcome of following one conversation: `result` when it has ended, else `step`."""

    result: TeacherResult[Any] | None
    step: Step | None
    keys_used: list[str] = field(default_factory=list)


def follow(
    journal: Journal, request: TeacherRequest[Any], key_for: KeyFor, reask_limit: int
) -> Followed:
    messages: Messages = request.messages
    attempt = prompt_tokens = completion_tokens = 0
    keys: list[str] = []
    while True:
        key = key_for(messages, request)
        record = journal.latest_response(key)
        if record is None:
            return Followed(None, Step(messages, key, attempt), keys)
        keys.append(key)
        prompt_tokens += record.prompt_tokens
        completion_tokens += record.completion_tokens
        attempt += 1
        try:
            answer = parse_answer(record.raw_text, record.finish_reason, request.answer_model)
        except AnswerProblem as problem:
            if attempt > reask_limit:
                error = f"{problem.kind}: {problem.detail} (after {attempt} answers)"
                return Followed(
                    TeacherResult(request.request_id, None, error=error,
                                  raw_text=record.raw_text, from_journal=True,
                                  prompt_tokens=prompt_tokens,
                                  completion_tokens=completion_tokens, attempts=attempt),
                    None, keys)
            messages = reask_messages(messages, record.raw_text, problem)
            continue
        return Followed(
            TeacherResult(request.request_id, answer, raw_text=record.raw_text,
                          from_journal=True, prompt_tokens=prompt_tokens,
                          completion_tokens=completion_tokens, attempts=attempt),
            None, keys)
