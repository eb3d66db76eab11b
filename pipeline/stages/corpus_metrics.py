"""What the corpus does with its skills: skill use in thoughts, the experience block's weight.

- Skill use: a distilled thought *applies a shown skill* when it names one of the skill titles
  its own prompt showed (case-insensitive), or, as a looser second measure, when it shares at
  least `OVERLAP_WORDS` content words (four letters or more, not stop words, not words of the
  task itself) with one shown skill's title and principle together. Both shares are reported,
  with this definition, so a reader knows how much to trust them.
- Block share: the retrieved-experience block's characters over the instruction's characters,
  per record.
- Lengths: instruction characters. Token lengths against the training cutoff (`--cutoff-len`)
  are pipeline/formats/token_lengths.py's, the same figure the card gives.
"""

import re
from collections.abc import Iterable
from dataclasses import dataclass

from skillsft.pipeline.formats.render import BLOCK_TITLE

OVERLAP_WORDS = 3
_STOP = frozenset(re.findall(r"\w+", (
    "that this with from have what when where which while there their then them they into "
    "only also before after each every first next your just more than some will would should "
    "could been being does done goal task step steps")))
_TITLE = re.compile(r"^- \*\*(?P<title>[^*]+)\*\*: (?P<text>.+)$", re.M)
_THINK = re.compile(r"<think>(?P<thought>.*?)</think>", re.S)


def experience_block(text: str) -> str:
    """The retrieved-experience block inside an instruction ('' when there is none): the title
    and the `###` sections that follow it."""
    start = text.find(BLOCK_TITLE)
    if start < 0:
        return ""
    chunks = text[start:].split("\n\n")
    kept = [chunks[0]]
    for chunk in chunks[1:]:
        if not chunk.startswith("### "):
            break
        kept.append(chunk)
    return "\n\n".join(kept)


@dataclass(frozen=True)
class ShownSkill:
    title: str
    words: frozenset[str]


def shown_skills(block: str) -> list[ShownSkill]:
    """Skills (and mistakes, whose bold lead is `Don't`) listed in a block, with their words."""
    skills = []
    for found in _TITLE.finditer(block):
        title = found.group("title").strip()
        if title.lower() in {"don't", "instead"}:
            continue
        skills.append(ShownSkill(title, frozenset(content_words(f"{title} {found.group('text')}"))))
    return skills


def content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]{4,}", text.lower()) if w not in _STOP}


def thoughts_of(turns: Iterable[dict[str, str]]) -> list[str]:
    """The `<think>` text of every assistant turn of a ShareGPT conversation."""
    found = []
    for turn in turns:
        if turn.get("from") == "gpt":
            match = _THINK.search(turn.get("value", ""))
            found.append(match.group("thought").strip() if match else "")
    return found


@dataclass
class SkillUse:
    thoughts: int = 0
    with_block: int = 0  # thoughts whose prompt showed at least one skill
    by_title: int = 0
    by_overlap: int = 0

    def share(self, count: int) -> float:
        return round(count / self.with_block, 4) if self.with_block else 0.0


def skill_use(conversations: Iterable[dict]) -> SkillUse:
    """Per ShareGPT conversation (system + turns), how many thoughts apply a shown skill."""
    use = SkillUse()
    for conversation in conversations:
        turns = conversation.get("conversations", [])
        first_human = next((t.get("value", "") for t in turns if t.get("from") == "human"), "")
        block = experience_block(conversation.get("system", "")) or experience_block(first_human)
        skills = shown_skills(block)
        task = content_words(str(conversation.get("extra_info", {}).get("task", "")))
        for thought in thoughts_of(turns):
            use.thoughts += 1
            if not skills:
                continue
            use.with_block += 1
            lowered = thought.lower()
            if any(s.title.lower() in lowered for s in skills):
                use.by_title += 1
            words = content_words(thought) - task
            if any(len(words & s.words) >= OVERLAP_WORDS for s in skills):
                use.by_overlap += 1
    return use


@dataclass
class InstructionLengths:
    records: int
    block_share_mean: float
    block_share_max: float
    chars_p50: int
    chars_max: int


class InstructionLengthTally:
    """`instruction_lengths` one instruction at a time, for a corpus read as a stream: holds
    two numbers per instruction, not the instructions."""

    def __init__(self) -> None:
        self.records = 0
        self.shares: list[float] = []
        self.chars: list[int] = []

    def add(self, text: str) -> None:
        self.records += 1
        if text:
            self.shares.append(len(experience_block(text)) / len(text))
        self.chars.append(len(text))

    def result(self) -> InstructionLengths:
        chars = sorted(self.chars)
        shares = self.shares
        return InstructionLengths(
            records=self.records,
            block_share_mean=round(sum(shares) / len(shares), 4) if shares else 0.0,
            block_share_max=round(max(shares), 4) if shares else 0.0,
            chars_p50=chars[len(chars) // 2] if chars else 0,
            chars_max=chars[-1] if chars else 0,
        )


def instruction_lengths(instructions: Iterable[str]) -> InstructionLengths:
    tally = InstructionLengthTally()
    for text in instructions:
        tally.add(text)
    return tally.result()
