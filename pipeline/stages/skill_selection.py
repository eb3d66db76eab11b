"""Which skills a record's retrieved-experience block shows: its category's, or retrieved.

- `category` (the default): every skill of the task's category, the released corpus's layout;
  the corpus is byte-identical to what it was before this option existed.
- `retrieve`: general principles always, plus the `top_k` task-specific skills (from any
  category) most similar to the task whose similarity is at least `threshold`, as the SkillRL
  paper retrieves per task; the least similar chosen skills are dropped while the block is
  longer than `max_block_chars`.

Similarity is cosine over embeddings when an embedding model is given
(pipeline/teacher/openai/embeddings.py, journaled), else a lexical score that needs no network:
the share of the task's content words that the skill's text contains (coverage, in [0, 1]).
"""

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Protocol, cast

from skillsft.pipeline.formats.render import BlockOptions, render_block
from skillsft.pipeline.options import Opt, declared, from_values
from skillsft.schemas.skill_bank import Skill, SkillBank

if TYPE_CHECKING:
    from skillsft.pipeline.envs import EnvSpec

SKILL_MODES = ("category", "retrieve")


@dataclass(frozen=True)
class SkillSelection:
    mode: Annotated[str, Opt(
        "skills per record: the task category's (default) or retrieved per task", name="skills",
        choices=("category", "retrieve"))] = "category"
    top_k: Annotated[int, Opt("with --skills retrieve: task-specific skills per record "
                              "(default 6)", name="top_k_skills", kind="positive_int")] = 6
    threshold: Annotated[float, Opt("with --skills retrieve: least similarity a skill needs "
                                    "(default 0.4)", name="skill_threshold", kind="share")] = 0.4
    max_block_chars: Annotated[int, Opt(
        "with --skills retrieve: cap on the retrieved-experience block (default 6000)",
        kind="positive_int")] = 6000
    embedding_model: Annotated[str, Opt(  # "" = the lexical scorer
        "with --skills retrieve: rank skills by this /v1/embeddings model (default: a lexical "
        "scorer, no network)")] = ""

    def __post_init__(self) -> None:
        if self.mode not in SKILL_MODES:
            raise ValueError(f"skills mode {self.mode!r}: expected one of {SKILL_MODES}")

    def shapes_output(self) -> bool:
        """The category mode reads none of the other fields: a default run's fingerprint
        leaves them out (so it is the same as before the option existed)."""
        return self.mode != "category"

    @classmethod
    def from_params(cls, params: dict[str, str]) -> "SkillSelection":
        """From a distill manifest's parameters: its shaping values as text, by option name
        (absent in category mode: the default). Names, types and defaults are the fields'."""
        given = {d.name: d.type(params[d.name]) for d in declared(cls) if d.name in params}
        return cast(SkillSelection, from_values(cls, given))

    def describe(self) -> str:
        """One line for the report and the dataset card."""
        if self.mode == "category":
            return "category (every skill of the task's category)"
        scorer = f"embeddings ({self.embedding_model})" if self.embedding_model else "lexical"
        return (f"retrieve (general always + top {self.top_k} task-specific skills with "
                f"similarity >= {self.threshold}, {scorer} scorer, block <= "
                f"{self.max_block_chars} chars)")


class Scorer(Protocol):
    def prepare(self, texts: Sequence[str]) -> None: ...

    def similarity(self, task: str, skill: str) -> float: ...


_STOP = frozenset(re.findall(r"\w+", (
    "a an and are as at be by for from in is it of on or some the to with i am need want "
    "looking find buy put them it its their what which who when where")))


def _words(text: str) -> set[str]:
    return {w.rstrip("s") if len(w) > 4 else w
            for w in re.findall(r"[a-z0-9]{3,}", text.lower()) if w not in _STOP}


class LexicalScorer:
    """Coverage of the task's content words by the skill's words; no network."""

    def prepare(self, texts: Sequence[str]) -> None:
        del texts

    def similarity(self, task: str, skill: str) -> float:
        wanted = _words(task)
        return len(wanted & _words(skill)) / len(wanted) if wanted else 0.0


class EmbeddingScorer:
    """Cosine similarity of embeddings; `prepare` embeds every text once (journaled)."""

    def __init__(self, client: "object") -> None:
        self.client = client
        self.vectors: dict[str, list[float]] = {}

    def prepare(self, texts: Sequence[str]) -> None:
        unique = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        if unique:
            self.vectors.update(zip(unique, self.client.embed(unique), strict=True))

    def similarity(self, task: str, skill: str) -> float:
        self.prepare([task, skill])
        a, b = self.vectors[task], self.vectors[skill]
        norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
        return sum(x * y for x, y in zip(a, b, strict=True)) / norm if norm else 0.0


def scorer_for(embeddings: object | None) -> Scorer:
    """Embeddings when the teacher layer gave a client for them, else the lexical scorer."""
    return LexicalScorer() if embeddings is None else EmbeddingScorer(embeddings)


def skill_text(skill: Skill) -> str:
    return f"{skill.title}. {skill.principle} {skill.when_to_apply}".strip()


def task_specific(bank: SkillBank) -> list[Skill]:
    """Every category's skills once, in bank order."""
    seen: dict[str, Skill] = {}
    for skills in bank.category_skills().values():
        for skill in skills:
            seen.setdefault(skill.skill_id, skill)
    return list(seen.values())


def retrieve(bank: SkillBank, task: str, selection: SkillSelection,
             scorer: Scorer) -> list[tuple[float, Skill]]:
    """The top-k task-specific skills at or above the threshold, most similar first."""
    scored = [(scorer.similarity(task, skill_text(s)), s) for s in task_specific(bank)]
    scored.sort(key=lambda pair: (-pair[0], pair[1].skill_id))
    return [(score, s) for score, s in scored if score >= selection.threshold][: selection.top_k]


def retrieved_block(bank: SkillBank, spec: "EnvSpec", category: str, task: str,
                    selection: SkillSelection, scorer: Scorer,
                    options: BlockOptions | None = None) -> tuple[str, list[Skill]]:
    """The block for one task in `retrieve` mode, and the task-specific skills it shows."""
    chosen = [skill for _, skill in retrieve(bank, task, selection, scorer)]
    while True:
        view = bank.model_copy(update={spec.bank_category_key: {category: chosen}})
        block = render_block(view, spec, category, options)
        if len(block) <= selection.max_block_chars or not chosen:
            return block, chosen
        chosen = chosen[:-1]
