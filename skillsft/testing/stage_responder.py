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


_BANK_ENTRY = re.compile(r"^(\S+) \[(\S+)\] ", re.M)
_NUMBERED = re.compile(r"^(\d+)\. (\{.*\})$", re.M)
_EDIT_FIELDS = ("title", "principle", "when_to_apply", "description", "why_it_happens",
                "how_to_avoid")


def reflect_answer(text: str) -> str:
    """Edits a model might propose from a reflect prompt: a skill for the first memory's
    category citing its memories, a mistake citing every memory shown, a revision of the
    bank's first entry, and one edit naming an id the bank does not have."""
    memories = text.split("Memories:", 1)[-1].split("Edits that did not help:", 1)[0]
    items = [json.loads(line) for _, line in _NUMBERED.findall(memories)]
    ids = [item["id"] for item in items if "id" in item]
    entries = _BANK_ENTRY.findall(text.split("Current bank:", 1)[-1].split("Memories:", 1)[0])
    blank = dict.fromkeys(_EDIT_FIELDS, "")
    edits = []
    if items and items[0].get("category"):
        category = items[0]["category"]
        edits.append({**blank, "op": "ADD", "section": category, "target_id": "",
                      "title": "Confirm The Goal Object", "when_to_apply": "Before acting.",
                      "principle": f"Confirm the object the task names ({len(ids)} episodes).",
                      "reason": "the new episodes show it",
                      "evidence": [i["id"] for i in items if i.get("category") == category]})
    edits.append({**blank, "op": "ADD", "section": "mistakes", "target_id": "",
                  "description": f"Acting before reading the observation ({len(ids)} episodes)",
                  "how_to_avoid": "Read the observation before choosing the next action.",
                  "reason": "seen in the new episodes", "evidence": ids[:4]})
    if entries:
        entry_id, section = entries[0]
        edits.append({**blank, "op": "REVISE", "section": section, "target_id": entry_id,
                      "principle": "Check the goal again before every action.",
                      "reason": "the new episodes refine it", "evidence": ids[:2]})
    edits.append({**blank, "op": "RETIRE", "section": "", "target_id": "missing_999",
                  "reason": "no longer needed", "evidence": ids[:1]})
    return json.dumps({"edits": [e for e in edits if e["evidence"]]})


def merge_answer(text: str) -> str:
    """Every numbered edit back, edits making one change (same op, section, target and
    title or description) merged."""
    groups: dict[str, dict[str, Any]] = {}
    for number, line in _NUMBERED.findall(text):
        item = json.loads(line)
        key = "/".join(str(item.get(k, "")) for k in ("op", "section", "target_id", "title",
                                                       "description"))
        merged = groups.setdefault(key, {**dict.fromkeys(_EDIT_FIELDS, ""), "sources": []})
        merged.update({k: item.get(k, "") or merged.get(k, "") for k in
                       ("op", "section", "target_id", "reason", *_EDIT_FIELDS)})
        merged["sources"].append(int(number))
    return json.dumps({"edits": list(groups.values())})


def stage_responder(body: dict[str, Any]) -> str:
    text = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
    if "You maintain the skill bank of an LLM agent" in text:
        return reflect_answer(text)
    if "You merge proposed edits to the skill bank" in text:
        return merge_answer(text)
    asked = _ASKED.findall(text)
    if asked:
        indices = [int(i) for i in asked[-1].replace(" ", "").split(",") if i]
        tag = body_tag(body)
        thoughts = [{"step_index": i, "thought": f"Step {i} moves me closer to the goal. {tag}"}
                    for i in indices]
        return json.dumps({"thoughts": thoughts})
    return schema_answer(body)
