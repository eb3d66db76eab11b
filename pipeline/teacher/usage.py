"""What one answer says it used: prompt, cached prompt and completion tokens.

Read from the `usage` of a chat completion, live (the client's object) or from a Batch API
output line (a dict), in one place. Providers with prompt caching report the cached part of
the prompt as `usage.prompt_tokens_details.cached_tokens` and bill it at a lower rate
(pricing.py), so it is journaled with the answer. A server that sends no usage at all still
answered (the answer is kept); its tokens are estimated from the text, four characters a
token, and marked as estimated in the journal, and the user is told once per endpoint.
"""

import functools
import logging
from dataclasses import dataclass
from typing import Any

from skillsft.pipeline.formats.token_lengths import CHARS_PER_TOKEN

log = logging.getLogger("skillsft.teacher")



@dataclass(frozen=True)
class CallUsage:
    prompt_tokens: int
    completion_tokens: int
    cached_prompt_tokens: int = 0
    estimated: bool = False  # the server sent no usage: counted from the text


def _field(source: Any, name: str) -> Any:
    if source is None:
        return None
    return source.get(name) if isinstance(source, dict) else getattr(source, name, None)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def read_usage(usage: Any, prompt_text: str = "", answer_text: str | None = None) -> CallUsage:
    """The usage a completion reports; estimated from the texts when it reports none."""
    if usage is None or _field(usage, "prompt_tokens") is None:
        return CallUsage(len(prompt_text) // CHARS_PER_TOKEN,
                         len(answer_text or "") // CHARS_PER_TOKEN, 0, estimated=True)
    prompt = _count(_field(usage, "prompt_tokens"))
    cached = _count(_field(_field(usage, "prompt_tokens_details"), "cached_tokens"))
    return CallUsage(prompt, _count(_field(usage, "completion_tokens")), min(cached, prompt))


@functools.cache
def warn_missing_usage(endpoint: str, model: str) -> None:
    """One line per endpoint and model and process: what is estimated, and what to do."""
    log.warning("%s (model %s) sends no `usage` with its answers: their tokens and dollars are "
                "estimated from the text (%d characters a token); answers are kept as usual. "
                "Exact counts need a server that reports usage (OpenAI, vLLM and llama.cpp do; "
                "some proxies drop it)", endpoint, model, CHARS_PER_TOKEN)
