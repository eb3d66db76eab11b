"""The offline teacher's thoughts: short, situation-bound reasoning for runs without an API key.

A thought is an opening that reads the current observation (what is here, what just changed)
and a reason for the action that depends on the agent's state: what it holds (from the
environment's action tables), whether the goal's object is in sight, whether a place was seen
before, what earlier searches returned. Nothing it says may contradict the observation
(scripts/thought_claims.py checks every turn of the samples), and two steps in
different situations read differently. It is still a rule-based smoke-test teacher: the corpus
it writes is labelled as such wherever it appears.

Tables here are keyed by action and observation shapes, never by environment name.
"""

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from skillsft.pipeline.envs.action_semantics import ActionSemantics
from skillsft.pipeline.teacher.contexts import DistillContext
from skillsft.pipeline.teacher.offline.causal import type_of
from skillsft.pipeline.teacher.offline.thought_checks import (
    goal_target,
    goal_words,
    held_before_each_step,
)
from skillsft.schemas.distill_answers import DistillAnswer, StepThought


@dataclass(frozen=True)
class Moment:
    """What the agent knows before one action."""

    goal: str
    observation: str
    action: str
    held: str
    target: str  # the goal's object type ("tomato"), "" when unknown
    visible_target: bool
    visited: frozenset[str]  # places gone to before this step
    earlier_queries: tuple[str, ...]
    earlier_observations: tuple[str, ...]
    chosen: tuple[str, ...]  # options selected on the product page open now
    final: bool
    first: bool


def _word(text: str) -> str:
    return type_of(text.strip())


# -- openings: what the observation shows ------------------------------------------------------

_ASIN = re.compile(r"\bB0[0-9A-Z]{8}\b")
_DOC = re.compile(r"Doc \d+\s*\(Title:")
_LISTED = re.compile(r"\ban? ([a-z]+ \d+)")


def _opening(m: Moment) -> str:
    obs = " ".join(m.observation.split())
    low = obs.lower()
    if not obs:
        return ""
    if obs.rstrip(".") == "Nothing happens":
        return "My last action had no effect."
    for pattern, text in _STATE_CHANGES:
        found = pattern.search(obs)
        if found:
            return text.format(**{k: v.strip() for k, v in found.groupdict().items()})
    place = re.search(r"\b(?:on|in) the ([a-z]+ \d+), you see (.+)", obs, re.I)
    if place:
        items = _LISTED.findall(place.group(2))
        if not items:
            return f"The {place.group(1)} is empty."
        if m.visible_target and not m.held:
            return f"The {place.group(1)} has a {m.target} among {len(items)} item(s)."
        thing = f"no {m.target}" if m.target and not m.visible_target else "nothing I need yet"
        if m.held:
            thing = f"{len(items)} item(s)"
        return f"The {place.group(1)} holds {thing}."
    if low.startswith("you are in the middle of a room"):
        return f"I am in a room with {len(_LISTED.findall(obs))} places to look."
    closed = re.search(r"\bthe ([a-z]+ \d+) is closed\b", low)
    if closed:
        return f"The {closed.group(1)} is closed."
    segments = [part.strip() for part in obs.split("[SEP]")]
    price = next((i for i, part in enumerate(segments) if part.startswith("Price:")), None)
    if "buy now" in low and price:
        title = " ".join(segments[price - 1].split()[:6])
        return f"The page for '{title}' ({segments[price].removeprefix('Price: ')}) is open."
    asins = _ASIN.findall(obs)
    if asins:
        first = segments.index(asins[0]) + 1 if asins[0] in segments else 0
        title = " ".join(segments[first].split()[:5]) if 0 < first < len(segments) else ""
        lead = f", the first being '{title}'" if title else ""
        return f"The results list {len(set(asins))} product(s){lead}."
    docs = _DOC.findall(obs)
    if docs:
        return f"The search returned {len(docs)} passage(s)."
    if "search" in low and "instruction" in low:
        return "I am on the shop's search page."
    return ""


_STATE_CHANGES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.I), t) for p, t in (
        (r"you pick up the (?P<obj>.+?) from the (?P<place>.+?)\.", "I now hold the {obj}."),
        (r"you (?:move|put) the (?P<obj>.+?) (?:to|in|on) the (?P<place>.+?)\.",
         "The {obj} is now on the {place}."),
        (r"you heat the (?P<obj>.+?) using", "The {obj} is now hot."),
        (r"you cool the (?P<obj>.+?) using", "The {obj} is now cool."),
        (r"you clean the (?P<obj>.+?) using", "The {obj} is now clean."),
        (r"you turn on the (?P<obj>.+?)\.", "The {obj} is now on."),
        (r"you open the (?P<obj>.+?)\.", "The {obj} is open now."),
        (r"you close the (?P<obj>.+?)\.", "The {obj} is closed now."),
        (r"you are carrying: (?P<obj>.+?)\.?$", "I am carrying {obj}."),
    )
)


# -- reasons: why this action, in this situation ----------------------------------------------

Reason = Callable[[Moment, re.Match[str]], str]


def _go(m: Moment, found: re.Match[str]) -> str:
    place = found.group("place")
    kind = _word(place)
    words = goal_words(m.goal)
    if m.held and _word(m.held).split()[-1] in words:
        held = _word(m.held)
        if kind in words:
            return f"With the {held} in hand, I take it to {place}, where the goal wants it."
        if kind in _TOOL_WORDS and _TOOL_WORDS[kind] & words:
            return f"The goal needs the {held} changed, and {place} can do that, so I go there."
        return f"I carry the {held} on to {place}, the next place the task needs."
    if m.visible_target:
        return f"A {m.target} is here, but the task needs {place} first, so I go there."
    if place in m.visited:
        return f"I return to {place}, which I already saw earlier, to continue the task."
    if kind in words:
        return f"The goal names the {kind}, so I go to {place} to see it."
    if kind in _TOOL_WORDS and _TOOL_WORDS[kind] & words:
        return f"The task will need {place} later, so I go there now."
    target = f"a {m.target}" if m.target else "what the goal needs"
    return f"I have not found {target} yet, so I check {place} next."


_TOOL_WORDS = {
    "microwave": {"hot", "heat", "heated"}, "fridge": {"cool", "cold", "cooled"},
    "sinkbasin": {"clean", "cleaned"}, "desklamp": {"lamp", "desklamp", "light"},
    "floorlamp": {"lamp", "floorlamp", "light"},
}


def _take(m: Moment, found: re.Match[str]) -> str:
    obj, place = found.group("obj"), found.group("place")
    if _word(obj).split()[-1] in goal_words(m.goal):
        return f"The {obj} here is the kind of object the goal asks for, so I pick it up."
    return f"I pick up the {obj} from {place}, since the task needs it moved."


def _put(m: Moment, found: re.Match[str]) -> str:
    obj, place = found.group("obj"), found.group("place")
    if _word(place) in goal_words(m.goal):
        return f"I am holding the {obj} at {place}, the goal's destination, so I put it here."
    return f"I put the {obj} on {place} to free my hands for the rest of the task."


def _change(m: Moment, found: re.Match[str]) -> str:
    verb, obj, tool = found.group("verb").lower(), found.group("obj"), found.group("tool")
    state = {"heat": "hot", "cool": "cool", "clean": "clean"}.get(verb, verb + "ed")
    return f"The goal wants the {_word(obj)} {state}, and I am at {tool}, so I {verb} it here."


def _open(m: Moment, found: re.Match[str]) -> str:
    thing = found.group("obj")
    target = f"the {m.target}" if m.target else "what I need"
    return f"The {thing} is closed and may hold {target}, so I open it."


def _use(m: Moment, found: re.Match[str]) -> str:
    lamp = found.group("obj")
    if m.held:
        return f"I am holding the {_word(m.held)}, so I switch on {lamp} to see it in the light."
    return f"I switch on {lamp} now, so the light is ready when I bring the {m.target or 'object'}."


def _search_shop(m: Moment, found: re.Match[str]) -> str:
    query = found.group("query")
    if m.earlier_queries:
        return f"My earlier search did not give a clear match, so I search again for '{query}'."
    return f"I search for '{query}', which names the request's key attributes."


def _product(m: Moment, found: re.Match[str]) -> str:
    count = len(set(_ASIN.findall(m.observation)))
    among = f" among the {count} listed" if count > 1 else ""
    item = found.group("item").upper()
    return f"Product {item} looks closest to the request{among}, so I open it."


def _option(m: Moment, found: re.Match[str]) -> str:
    option = found.group("option")
    if option.lower() in m.goal.lower():
        return f"The request asks for {option}, so I select that option."
    return f"I select {option}, the option closest to what the request describes."


def _buy(m: Moment, _: re.Match[str]) -> str:
    if m.chosen:
        return f"With {' and '.join(m.chosen)} selected, this product fits the request; I buy it."
    return "This product fits the request as it is, with no option to set, so I buy it."


def _search_qa(m: Moment, found: re.Match[str]) -> str:
    query = found.group("query")
    if not m.earlier_queries:
        return f"I do not know this yet, so I search for '{query}'."
    new = set(re.findall(r"[a-z]+", query.lower())) - goal_words(m.goal)
    seen = " ".join(m.earlier_observations).lower()
    lead = sorted(w for w in new if len(w) > 3 and w in seen)
    if lead:
        return (f"The passages so far point to {' '.join(lead[:3])}, so I follow that lead with "
                f"'{query}'.")
    return f"The passages so far do not settle the question, so I search for '{query}'."


def _answer(m: Moment, found: re.Match[str]) -> str:
    answer = found.group("answer")
    seen = " ".join((*m.earlier_observations, m.observation)).lower()
    if answer.strip().lower() in seen:
        return f"The retrieved passages state {answer}, which answers the question, so I give it."
    return f"No passage states it outright, but {answer} fits what I found best, so I answer it."


def _done(m: Moment, _: re.Match[str]) -> str:
    return "What the goal asks for is now in place, so I declare the task done."


REASONS: tuple[tuple[re.Pattern[str], Reason], ...] = tuple(
    (re.compile(pattern, re.I | re.S), reason) for pattern, reason in (
        (r"done", _done),
        (r"go to (?P<place>.+)", _go),
        (r"take (?P<obj>.+?) from (?P<place>.+)", _take),
        (r"(?:put|move) (?P<obj>.+?) (?:in/on|in|on|to) (?P<place>.+)", _put),
        (r"(?P<verb>clean|heat|cool) (?P<obj>.+?) with (?P<tool>.+)", _change),
        (r"open (?P<obj>.+)", _open),
        (r"close (?P<obj>.+)", lambda m, f: f"I no longer need {f.group('obj')} open, so I "
                                            "close it."),
        (r"use (?P<obj>.+)", _use),
        (r"examine (?P<obj>.+)", lambda m, f: f"I examine {f.group('obj')} to learn its state."),
        (r"look", lambda m, f: "I look around to see which places are left to check."),
        (r"inventory", lambda m, f: "I check what I am carrying before moving on."),
        (r"search\[(?P<query>.+)\]", _search_shop),
        (r"click\[buy now\]", _buy),
        (r"click\[< prev\]", lambda m, f: "I have what I needed from this page, so I go back."),
        (r"click\[next >\]", lambda m, f: "No product on this page fits the request well, so "
                                          "I look at the next page."),
        (r"click\[back to search\]", lambda m, f: "This is not the right product, so I go "
                                                  "back to search again."),
        (r"click\[(?P<page>description|features|reviews|attributes)\]",
         lambda m, f: f"I open the {f.group('page')} to check the product against the request."),
        (r"click\[(?P<item>b0[0-9a-z]{8})\]", _product),
        (r"click\[(?P<option>.+)\]", _option),
        (r"<search>(?P<query>.*)</search>", _search_qa),
        (r"<answer>(?P<answer>.*)</answer>", _answer),
    )
)


def reason(m: Moment) -> str:
    for pattern, why in REASONS:
        found = pattern.fullmatch(m.action.strip())
        if found:
            return why(m, found)
    return f"Of the actions available, {m.action} moves me closest to the goal, so I take it."


def thought(m: Moment, skill: str) -> str:
    parts = [_opening(m)]
    if m.first:
        parts.append(f"My goal: {m.goal}.")
        if skill:
            parts.append(f"I follow the skill '{skill}' I was given.")
    text = reason(m)
    parts.append(text[:1].upper() + text[1:])
    return " ".join(p for p in parts if p)


# -- the solver ---------------------------------------------------------------------------------


def _chosen_options(actions: Sequence[str]) -> tuple[str, ...]:
    """Options clicked since the last product was opened (WebShop-shaped clicks)."""
    chosen: list[str] = []
    for action in actions:
        found = re.fullmatch(r"click\[(.+)\]", action.strip(), re.I)
        if not found:
            if action.startswith("search["):
                chosen = []
            continue
        value = found.group(1)
        if re.fullmatch(r"b0[0-9a-z]{8}", value, re.I):
            chosen = []
        elif value.lower() not in _NAVIGATION:
            chosen.append(value)
    return tuple(chosen)


_NAVIGATION = frozenset({"buy now", "< prev", "next >", "back to search", "description",
                         "features", "reviews", "attributes"})


def solve_distill(context: DistillContext) -> DistillAnswer:
    """Deterministic thoughts from the request's own data; the same context, the same answer.

    The context carries the whole trajectory so far (`history`: observation, action per step)
    so the agent's state is known even in a later window."""
    goal = context.goal.strip().rstrip(".")
    history = context.history
    semantics: ActionSemantics | None = context.semantics
    actions = [h["action"] for h in history]
    after = [h["observation"] for h in history[1:]] + [""]
    held = held_before_each_step(actions, after, semantics)
    target = goal_target(goal, actions)
    skills = context.skill_titles
    last = len(history) - 1 if context.complete else -1
    thoughts = []
    for step in context.steps:
        i = step["index"]
        observation = history[i]["observation"]
        visited = frozenset(re.sub(r"^go to ", "", a) for a in actions[:i] if a.startswith("go to"))
        queries = tuple(a for a in actions[:i] if re.match(r"^(<search>|search\[)", a))
        listed = {_word(x) for x in _LISTED.findall(observation.lower())}
        moment = Moment(
            goal=goal, observation=observation, action=step["action"], held=held[i],
            target=target, visible_target=bool(target) and target in listed and not held[i],
            visited=visited, earlier_queries=queries,
            earlier_observations=tuple(h["observation"] for h in history[:i]),
            chosen=_chosen_options(actions[:i]),
            final=i == last, first=i == 0)
        thoughts.append(StepThought(step_index=i, thought=thought(moment, skills[0] if skills
                                                                  else "")))
    return DistillAnswer(thoughts=thoughts)
