"""The skill bank as a skill document an agent loads at run time (SKILL.md layout).

Agent-skill loaders read a folder `<name>/SKILL.md`: YAML front matter with `name` and a
`description` that tells the loader *when* to pull the document into context, then markdown
the agent reads. The bank otherwise only ever reaches a model inside SFT prompts; this makes
the same knowledge usable by agents that were never fine-tuned on it.

Layout of the body: how to use the document, the general principles, one section per task
category (in the environment's category order; categories the environment does not know come
after, by name) with each skill's principle and when to apply it, and the common mistakes with
why they happen and what to do instead.

A title the bank repeats (the released WebShop and Search banks do, across categories) is
listed once, where it first appears; the later skills of that title are kept in that entry as
"also for <category>" lines, so no principle is lost and no heading is duplicated.
Deterministic: the same bank gives the same bytes.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from skillsft.pipeline.formats.render import sentence
from skillsft.schemas.skill_bank import CommonMistake, Skill, SkillBank

if TYPE_CHECKING:
    from skillsft.pipeline.envs import EnvSpec

DOCUMENT_FILE = "SKILL.md"
MAX_DESCRIPTION = 1024  # what skill loaders accept


def skill_name(spec: "EnvSpec") -> str:
    """Lowercase letters, digits and hyphens: the form skill loaders require for `name`."""
    return skill_name_of(spec.name)


def skill_name_of(env: str) -> str:
    """`skill_name` from the environment's name alone (the folder the document lives in)."""
    return f"{env}-skills"


def document_path(output_dir: str | Path, spec: "EnvSpec") -> Path:
    return Path(output_dir) / skill_name(spec) / DOCUMENT_FILE


@dataclass
class Entry:
    """One heading: a skill, plus same-titled skills met later (category label, skill)."""

    skill: Skill
    also: list[tuple[str, Skill]] = field(default_factory=list)


def yaml_string(text: str) -> str:
    """A double-quoted YAML scalar (a JSON string is one), safe for any text."""
    return json.dumps(" ".join(text.split()), ensure_ascii=False)


def description(spec: "EnvSpec", bank: SkillBank, labels: list[str]) -> str:
    display = spec.title or spec.name
    text = (
        f"Strategies learned from {display} agent rollouts. Load this when {spec.skill_scope}, "
        "before choosing the next action or when stuck: it holds "
        f"{len(bank.general_skills)} general principles, skills for "
        f"{', '.join(labels) or 'no specific'} tasks, and {len(bank.common_mistakes)} common "
        "mistakes to avoid."
    )
    return text[:MAX_DESCRIPTION]


def ordered_categories(spec: "EnvSpec", bank: SkillBank) -> list[str]:
    present = {c for c, skills in bank.category_skills().items() if skills}
    known = [c for c in spec.categories if c in present]
    return known + sorted(present - set(known))


def skill_lines(entry: Entry) -> list[str]:
    skill = entry.skill
    lines = [f"### {skill.title.strip()}", "", sentence(skill.principle)]
    if skill.when_to_apply.strip():
        lines += ["", f"*When to apply:* {sentence(skill.when_to_apply)}"]
    for label, other in entry.also:
        line = f"- Also for {label}: {sentence(other.principle)}"
        if other.when_to_apply.strip():
            line += f" *When to apply:* {sentence(other.when_to_apply)}"
        lines += ["", line]
    return lines + [""]


def mistake_lines(number: int, mistake: CommonMistake) -> list[str]:
    lines = [f"{number}. **Mistake:** {sentence(mistake.description)}"]
    if mistake.why_it_happens.strip():
        lines.append(f"   **Why it happens:** {sentence(mistake.why_it_happens)}")
    lines.append(f"   **Instead:** {sentence(mistake.how_to_avoid)}")
    return lines


def render_skill_document(bank: SkillBank, spec: "EnvSpec") -> str:
    """SKILL.md text for one environment's bank."""
    entries: dict[str, Entry] = {}
    sections: list[tuple[str, list[Entry]]] = []

    def place(label: str, skills: list[Skill]) -> list[Entry]:
        placed = []
        for skill in skills:
            key = " ".join(skill.title.split()).casefold()
            if key in entries:
                entries[key].also.append((label, skill))
                continue
            entries[key] = Entry(skill)
            placed.append(entries[key])
        return placed

    general = place("all tasks", bank.general_skills)
    categories = ordered_categories(spec, bank)
    labels = [spec.label(c) for c in categories]
    for category, label in zip(categories, labels, strict=True):
        sections.append((label, place(label, bank.category_skills()[category])))

    display = spec.title or spec.name
    lines = [
        "---",
        f"name: {skill_name(spec)}",
        f"description: {yaml_string(description(spec, bank, labels))}",
        "---",
        "",
        f"# {display} skills",
        "",
        "Read the general principles first, then the section for the kind of task at hand, and "
        "check the common mistakes before committing to an action.",
        "",
    ]
    if general:
        lines += ["## General principles", ""]
        for entry in general:
            lines += skill_lines(entry)
    for label, placed in sections:
        if not placed:
            continue
        lines += [f"## {label} tasks", "",
                  f"Use these when the task is a {label.lower()} task.", ""]
        for entry in placed:
            lines += skill_lines(entry)
    if bank.common_mistakes:
        lines += ["## Common mistakes", ""]
        for number, mistake in enumerate(bank.common_mistakes, start=1):
            lines += mistake_lines(number, mistake)
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"
