"""Where a request's conversation stands, read from the journal alone.

A conversation is the request's messages, then for every invalid answer the re-ask that quotes
it. Following it through the journal tells a teacher what is left to do: nothing (a valid
answer, a journal hit), the next message list to send (the first ask, or a re-ask after a
validation failure), or what to do with a conversation whose answers were invalid up to the
re-ask limit. The live and the batch teacher follow conversations with this one function and
differ only there, each saying so with `when_exhausted`:

- `ask_again` (live): an exhausted conversation starts afresh from its first message, so the
  next run that is allowed to retry the request (the failure rules of failures.py decide)
  holds a new conversation within that run.
- `fail` (batch): an exhausted conversation is a final failure. A batch round that restarted
  it would get the answer a round (up to 24 h) later, just as invalid, and every later round
  would restart it again: paid for each time.

Either way a step is never a call whose answer is on disk: its key has no response yet.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from skillsft.pipeline.teacher.base import TeacherRequest, TeacherResult
from skillsft.pipeline.teacher.journal import Journal
from skillsft.pipeline.teacher.openai.structured import (
    AnswerProblem,
    Messages,
    parse_answer,
    reask_messages,
)

KeyFor = Callable[[Messages, TeacherRequest[Any]], str]
WhenExhausted = Literal["ask_again", "fail"]


@dataclass
class Step:
    """What the conversation needs next: a call with these messages (journal key `key`), after
    `attempt` answers that cost these tokens."""

    messages: Messages
    key: str
    attempt: int  # answers so far
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0


@dataclass
class Followed:
    """The outcome of following one conversation: `result` when it has ended, else `step`."""

    result: TeacherResult[Any] | None
    step: Step | None
    keys_used: list[str] = field(default_factory=list)


def follow(
    journal: Journal, request: TeacherRequest[Any], key_for: KeyFor, reask_limit: int, *,
    when_exhausted: WhenExhausted, first_key: str | None = None,
) -> Followed:
    """Follow `request` through the journal as far as it goes (`first_key`: the key of its
    first ask, when the caller has it already)."""
    messages: Messages = request.messages
    attempt = prompt_tokens = completion_tokens = cached = 0
    keys: list[str] = []
    key = first_key or key_for(messages, request)
    while True:
        record = journal.latest_response(key)
        if record is None:
            return Followed(None, Step(messages, key, attempt, prompt_tokens, completion_tokens,
                                       cached), keys)
        keys.append(key)
        prompt_tokens += record.prompt_tokens
        completion_tokens += record.completion_tokens
        cached += record.cached_prompt_tokens
        attempt += 1
        try:
            answer = parse_answer(record.raw_text, record.finish_reason, request.answer_model)
        except AnswerProblem as problem:
            if attempt <= reask_limit:
                messages = reask_messages(messages, record.raw_text, problem)
                key = key_for(messages, request)
                continue
            if when_exhausted == "ask_again":
                return Followed(None, Step(request.messages, keys[0], 0), keys)
            error = f"{problem.kind}: {problem.detail} (after {attempt} answers)"
            return Followed(
                TeacherResult(request.request_id, None, error=error,
                              raw_text=record.raw_text, from_journal=True,
                              prompt_tokens=prompt_tokens,
                              completion_tokens=completion_tokens, attempts=attempt,
                              cached_prompt_tokens=cached),
                None, keys)
        return Followed(
            TeacherResult(request.request_id, answer, raw_text=record.raw_text,
                          from_journal=True, prompt_tokens=prompt_tokens,
                          completion_tokens=completion_tokens, attempts=attempt,
                          cached_prompt_tokens=cached),
            None, keys)
