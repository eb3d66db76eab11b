"""A responder for the local server that answers skillsft's stage prompts plausibly.

The server's default answer is the minimal instance of the requested JSON schema, which is
enough for memories and aggregation; a distillation answer must also carry exactly one thought
per asked step, which only the prompt says. This reads the indices from the prompt the way a
careful model would, so end-to-end runs over HTTP can succeed, while faults are still injected
by the server around it. Like the server's own answers, each thought carries the body's tag, so
the answer depends on the whole request.
"""

import json
import re
from typing import Any

from skillsft.testing.openai_server import body_tag, schema_answer

_ASKED = re.compile(r"exactly one thought for each step_index in \[([-\d, ]*)\]")


def stage_responder(body: dict[str, Any]) -> str:
    text = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
    asked = _ASKED.findall(text)
    if asked:
        indices = [int(i) for i in asked[-1].replace(" ", "").split(",") if i]
        tag = body_tag(body)
        thoughts = [{"step_index": i, "thought": f"Step {i} moves me closer to the goal. {tag}"}
                    for i in indices]
        return json.dumps({"thoughts": thoughts})
    return schema_answer(body)
