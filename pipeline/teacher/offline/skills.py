"""The offline teacher's skill bank: deterministic merging by a normalised key.

Planning patterns become skills in plain English (placeholders turned into words with the
environment's glossary, which the request carries), mistakes are grouped by their wording, and
the most supported come first. Nothing is invented: a small corpus gives a small bank, and the
bank post-check (pipeline/stages/bank_checks.py) reports the shortfall.
"""

import re
from collections.abc import Sequence
from typing import Any

import orjson

from skillsft.pipeline.envs.prompt_profiles import naturalise
from skillsft.pipeline.teacher.contexts import AggregateContext
from skillsft.schemas.memory_answers import MistakeDraft, MistakesAnswer, SkillDraft, SkillsAnswer

_PARENTHESISED = re.compile(r"\([^)]*\)")
_NON_WORD = re.compile(r"[^a-z\[\]_ ]+")


def _key(text: str, words: int = 8) -> str:
    cleaned = _NON_WORD.sub(" ", _PARENTHESISED.sub(" ", text.lower()))
    return " ".join(cleaned.split()[:words])


def _routine_title(pattern: str) -> str:
    verbs: list[str] = []
    for phrase in pattern.split("->"):
        words = phrase.split()
        verb = words[0].title() if words else ""
        if verb and verb not in verbs and verb not in {"Go", "Navigate", "Search"}:
            verbs.append(verb)
    return " ".join([*verbs[:3], "Then", *verbs[3:4]] if len(verbs) > 3 else
                    [*(verbs or ["Goal"]), "Routine"])


def _as_steps(pattern: str, words: dict[str, str]) -> str:
    """`Go to [Location] -> Take [Object_1]` -> `go to a likely location, then take the target
    object`: a pattern as one plain-English instruction."""
    phrases = [naturalise(p.strip(), words) for p in pattern.split("->") if p.strip()]
    phrases = [p[:1].lower() + p[1:] for p in phrases]
    if len(phrases) > 1:
        phrases[-1] = "and finally " + phrases[-1]
    return ", then ".join(phrases[:-1]) + (", " if len(phrases) > 1 else "") + phrases[-1]


def _skill_from_item(item: dict[str, Any], words: dict[str, str]) -> tuple[str, SkillDraft]:
    if "title" in item:
        draft = SkillDraft.model_validate(item)
        return _key(draft.title), draft
    goal = naturalise(str(item.get("goal", "")).rstrip("."), words)
    pattern = str(item.get("pattern", ""))
    title = _routine_title(pattern)
    steps = _as_steps(pattern, words) if pattern else "work towards the goal"
    return _key(title), SkillDraft(
        title=title, principle=f"{steps[:1].upper()}{steps[1:]}.",
        when_to_apply=f"When the task is like '{goal}'." if goal else "")


# How to avoid a mistake, by what its text mentions; first match wins.
_ADVICE: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"admissible|nothing happens", re.I),
     "Choose the next action from the admissible list, copied exactly"),
    (re.compile(r"repeat|again|loop|same", re.I),
     "Keep track of what was already tried and pick an unexplored option instead"),
    (re.compile(r"wrong|does not match|mismatch", re.I),
     "Before committing, check every requirement of the task against what is on screen"),
    (re.compile(r"budget|step limit|remaining step", re.I),
     "Plan the remaining goal steps early and execute them before the step budget runs out"),
    (re.compile(r"evidence|retriev", re.I),
     "Search again with a more specific query until a passage supports the answer"),
)


def _mistake_from_item(item: dict[str, Any], words: dict[str, str]) -> tuple[str, MistakeDraft]:
    if "description" in item:
        draft = MistakeDraft.model_validate(item)
        return _key(draft.description), draft
    bad = naturalise(str(item.get("bad_action", "")), words)
    trigger = naturalise(str(item.get("trigger_condition", "")), words)
    advice = next((text for rx, text in _ADVICE if rx.search(f"{bad} {trigger}")),
                  "Check the situation above and choose an action that advances the goal")
    return _key(bad), MistakeDraft(
        description=bad, why_it_happens=trigger, how_to_avoid=advice)


def _merge(pairs: Sequence[tuple[str, Any]], max_outputs: int) -> list[Any]:
    groups: dict[str, list[Any]] = {}
    for key, draft in pairs:
        groups.setdefault(key, []).append(draft)
    merged = []
    for drafts in groups.values():
        best = min(drafts, key=lambda d: (-d.support, orjson.dumps(d.model_dump())))
        merged.append(best.model_copy(update={"support": sum(d.support for d in drafts)}))
    merged.sort(key=lambda d: (-d.support, orjson.dumps(d.model_dump())))
    return merged[:max_outputs]


def solve_skills(ctx: AggregateContext) -> SkillsAnswer:
    drafts = [_skill_from_item(i, ctx.placeholder_words) for i in ctx.items]
    return SkillsAnswer(skills=_merge(drafts, ctx.max_outputs))


def solve_mistakes(ctx: AggregateContext) -> MistakesAnswer:
    drafts = [_mistake_from_item(i, ctx.placeholder_words) for i in ctx.items]
    return MistakesAnswer(mistakes=_merge(drafts, ctx.max_outputs))
