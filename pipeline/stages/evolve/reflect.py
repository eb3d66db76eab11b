"""Reflect: the teacher reads new memories against the current bank and proposes edits.

Memories are sent `memories_per_call` at a time, so a prompt never grows with the number of
rollouts; each call also shows the whole current bank (entries with ids, clipped) and the edits
of earlier rounds that the gate rejected, as "edits that did not help". The answer model is
`ReflectAnswer` bounded to `edits_per_call` edits; every edit cites memory ids. What the
teacher is told about the environment (`PromptProfile.reflect_rules`, the placeholder words,
the category noun) is data on the `EnvSpec`.
"""

from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from skillsft.pipeline.stages.aggregate import memory_category, render_item
from skillsft.pipeline.stages.evolve.bank_view import sections_of
from skillsft.pipeline.stages.evolve.options import EvolveOptions
from skillsft.pipeline.teacher.base import TeacherRequest
from skillsft.pipeline.teacher.contexts import ReflectContext
from skillsft.pipeline.teacher.kinds import EVOLVE_REFLECT
from skillsft.schemas.answer_bounds import bounded_answer_model
from skillsft.schemas.evolve import Entry, ReflectAnswer
from skillsft.schemas.memory import Memory

if TYPE_CHECKING:
    from skillsft.pipeline.envs import EnvSpec

REFLECT_KIND = EVOLVE_REFLECT.name
# The version lives in the kind table (teacher/kinds.py): bump it there when the prompt text
# below changes, since the version is part of every journal key.
PROMPT_VERSION = EVOLVE_REFLECT.prompt_version
ENTRY_CHARS = 240  # one bank entry in the prompt
REJECTED_CHARS = 200  # one earlier rejected edit in the prompt


_SYSTEM = """\
You maintain the skill bank of an LLM agent in {environment}. The bank has sections: \
`general` (principles for every {noun}), one section per {noun} ({categories}) and \
`mistakes` (common mistakes). You receive the current bank, every entry with its id, and \
numbered memories of new episodes: a success's goal and planning pattern, or a failure's goal \
and mistakes.
Propose the edits these memories show the bank needs, and nothing else:
- ADD a skill the bank lacks (`section` general or a {noun}; `title` in Title Case of three \
to five words, `principle` of one or two sentences, `when_to_apply` of one sentence) or a \
mistake it lacks (`section` mistakes; `description`, `why_it_happens`, `how_to_avoid`);
- REVISE an entry the memories show to be wrong or incomplete (`target_id`, and its full new \
text in the same fields);
- RETIRE an entry the memories contradict (`target_id`; say why in `reason`).
Every edit gives a short `reason` and cites in `evidence` the ids of the memories that support \
it; an edit no memory supports must not be proposed. Use only the bank's and the memories' \
ids as given. Write in natural English: no bracketed placeholders, no instance names, no \
concrete values. Placeholders in the memories read as: {placeholder_words}.
{env_rules}Do not propose again an edit listed under "Edits that did not help".
Return at most {max_edits} edits, the best supported first; return none when the bank already \
covers the memories.
Answer with one JSON object and nothing else:
{{"edits": [{{"op": "ADD"|"REVISE"|"RETIRE", "section": str, "target_id": str, "title": str, \
"principle": str, "when_to_apply": str, "description": str, "why_it_happens": str, \
"how_to_avoid": str, "reason": str, "evidence": [str]}}]}}
Leave the fields an edit does not use as empty strings."""

_USER = ("Environment: {environment}\n\nCurrent bank:\n{bank}\n\nMemories:\n{memories}\n\n"
         "Edits that did not help:\n{rejected}")
_PROMPT_OVERHEAD = len(_SYSTEM) + len(_USER) + 1500


def memory_item(memory: Memory, spec: "EnvSpec") -> dict[str, Any]:
    """A memory as the prompt shows it: its id, outcome, category, goal and lesson."""
    guidelines = memory.content.strategic_guidelines
    item: dict[str, Any] = {"id": memory.memory_id, "outcome": memory.tags.outcome,
                            "category": memory_category(memory, spec),
                            "goal": memory.content.task_meta.original_goal}
    if memory.tags.outcome == "Success" and guidelines.planning_pattern:
        item["pattern"] = guidelines.planning_pattern
    if memory.tags.outcome == "Failure":
        item["mistakes"] = [{"trigger_condition": m.trigger_condition, "bad_action": m.bad_action}
                            for m in guidelines.mistakes_to_avoid]
    return item


def prompt_item(item: dict[str, Any]) -> dict[str, Any]:
    """The item with its mistakes as one string, so clipping (render_item) bounds it too."""
    if "mistakes" not in item:
        return item
    said = "; ".join(f"{m['bad_action']} (when: {m['trigger_condition']})"
                     for m in item["mistakes"])
    return {**item, "mistakes": said}


def entry_line(entry: Entry) -> str:
    text = " | ".join(value for value in entry.text.values() if value)
    line = f"{entry.entry_id} [{entry.section}] {text}"
    return line if len(line) <= ENTRY_CHARS else line[: ENTRY_CHARS - 3] + "..."


def rejected_line(edit: dict[str, Any]) -> str:
    where = edit.get("target_id") or edit.get("section", "")
    text = " | ".join(v for v in edit.get("text", {}).values() if v)
    line = f"{edit.get('op')} {where}: {text} ({edit.get('fate_reason', 'did not help')})"
    return line if len(line) <= REJECTED_CHARS else line[: REJECTED_CHARS - 3] + "..."


def build_requests(memories: Sequence[Memory], bank: Sequence[Entry], spec: "EnvSpec",
                   options: EvolveOptions, rejected: Sequence[dict[str, Any]] = ()
                   ) -> list[TeacherRequest[ReflectAnswer]]:
    """One request per `memories_per_call` memories, in the memories' order."""
    profile = spec.prompts
    words = dict(profile.placeholders) if profile else {}
    noun = profile.category_noun if profile else "task category"
    rules = "".join(f"{rule}\n" for rule in (profile.reflect_rules if profile else ()))
    shown_rejected = tuple(rejected[-options.rejected_shown:]) if options.rejected_shown else ()
    system = _SYSTEM.format(
        environment=spec.memory_environment_tag, noun=noun, categories=", ".join(spec.categories),
        placeholder_words="; ".join(f"{k} = {v}" for k, v in words.items()) or "(none)",
        env_rules=rules, max_edits=options.edits_per_call)
    bank_text = "\n".join(entry_line(e) for e in bank) or "(empty)"
    rejected_text = "\n".join(f"- {rejected_line(e)}" for e in shown_rejected) or "(none)"
    room = options.max_prompt_chars - _PROMPT_OVERHEAD - len(bank_text) - len(rejected_text)
    per_item = max(120, room // options.memories_per_call - 8)
    size = options.memories_per_call
    requests = []
    for number, start in enumerate(range(0, len(memories), size)):
        items = tuple(memory_item(m, spec) for m in memories[start: start + size])
        lines = "\n".join(render_item(i + 1, prompt_item(item), per_item)
                           for i, item in enumerate(items))
        user = _USER.format(environment=spec.memory_environment_tag, bank=bank_text,
                            memories=lines, rejected=rejected_text)
        requests.append(EVOLVE_REFLECT.request(
            f"reflect/B{number:04d}",
            ({"role": "system", "content": system}, {"role": "user", "content": user}),
            answer_model=bounded_answer_model(ReflectAnswer, (("edits", options.edits_per_call),)),
            context=partial(ReflectContext, spec.memory_environment_tag, tuple(bank), items,
                            shown_rejected, sections_of(spec), options.edits_per_call, words),
        ))
    return requests
