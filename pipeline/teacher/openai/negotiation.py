"""Which response mode an (endpoint, model) accepts: learned once, kept in the work dir.

Servers differ: OpenAI takes `json_schema`; llama.cpp's servers answer it with a 500 but take
`{"type": "json_object", "schema": ...}`; some take only `json_object`; some nothing. Before the
first paid request the teacher sends one tiny probe per mode, best first, with a schema the
natural answer to the probe prompt does not fit: a mode counts as enforcing only when the reply
fits the schema anyway. A weaker mode is accepted when the server does not refuse it (the
schema then travels in the prompt). The probes are journaled like any request, and what was
learned is written to `response_modes.json` beside the journal, so other worker processes and
later runs start in the right mode without probing.

A refusal is any 4xx/5xx whose body talks about the response format, not only a 400:
llama-cpp-python answers an unknown `response_format.type` with a 500.
"""

import os
import re
import time
from pathlib import Path
from typing import Any

import openai
import orjson
from pydantic import BaseModel, ConfigDict

from skillsft.pipeline.teacher.claims import exclusive_beside
from skillsft.pipeline.teacher.openai.endpoints import redact_url, url_digest
from skillsft.pipeline.teacher.openai.structured import ENFORCING_MODES, ResponseMode

FORMAT_REFUSAL = re.compile(
    r"response_format|json_schema|json_object|structured output|grammar", re.IGNORECASE
)

PROBE_PROMPT = "Say hello to the user in one short sentence."
PROBE_MAX_TOKENS = 24


class ProbeAnswer(BaseModel):
    """What the probe asks for; a friendly greeting in prose does not fit it."""

    model_config = ConfigDict(extra="forbid")

    probe_ok: bool


def is_format_refusal(exc: openai.APIStatusError) -> bool:
    """A 4xx/5xx (other than 429) whose body is about the response format."""
    if exc.status_code == 429:
        return False
    body = exc.body if exc.body is not None else ""
    text = f"{exc.message} {orjson.dumps(body, default=str).decode(errors='replace')}"
    return bool(FORMAT_REFUSAL.search(text))


def mode_is_confirmed(mode: ResponseMode, answer_valid: bool) -> bool:
    """An enforcing mode must have shaped the probe's answer; a weaker one needs no proof."""
    return answer_valid or mode not in ENFORCING_MODES


class ModeStore:
    """`response_modes.json`: {"<url digest>|<model>": {"mode", "endpoint", "model", "time"}}.

    Written whole and atomically (temp file + rename) under an exclusive claim (claims.py), so
    concurrent workers never see half a file nor lose each other's entries; the endpoint is
    stored redacted."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    @staticmethod
    def key(endpoint: str, model: str) -> str:
        return f"{url_digest(endpoint)}|{model}"

    def read(self) -> dict[str, Any]:
        try:
            data = orjson.loads(self.path.read_bytes())
        except (FileNotFoundError, orjson.JSONDecodeError):
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, endpoint: str, model: str) -> ResponseMode | None:
        entry = self.read().get(self.key(endpoint, model))
        return entry.get("mode") if isinstance(entry, dict) else None

    def put(self, endpoint: str, model: str, mode: ResponseMode) -> None:
        with exclusive_beside(self.path):
            data = self.read()
            data[self.key(endpoint, model)] = {
                "mode": mode, "endpoint": redact_url(endpoint), "model": model,
                "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            temporary.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
            os.replace(temporary, self.path)
