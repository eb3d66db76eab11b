"""Stage 2b: memories -> one skill bank (FORMATS.md section 5), at any corpus size.

Three tracks are reduced independently: general skills from every success pattern, one
per-category track from that category's patterns (and its failures' mistakes, so a category
with only failures still gets skills), and common mistakes from every failure. Each track is
reduced hierarchically: level 0 sends batches of at most `batch_size` items; every later level
merges the previous level's answers `fan_in` at a time (`batch_size // max_outputs_per_call`
answers, so a merge prompt never holds more than `batch_size` items) until one answer remains.
No prompt grows with the corpus, and the number of calls is predictable (`planned_calls`).
All tracks of one level go to the teacher as one batch, so they run concurrently.

Ids (`gen_001`, `cle_001`, `err_001`) are assigned here after generation; a category without
memories gets an empty list and no call.
"""

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

import orjson

from skillsft.pipeline.envs import EnvSpec
from skillsft.pipeline.envs.prompt_profiles import BankShape, CountRange, PromptProfile
from skillsft.pipeline.errors import SkillsftError
from skillsft.pipeline.options import Opt
from skillsft.pipeline.stages.bank_checks import check_bank
from skillsft.pipeline.stages.result import StageResult, stage_counts
from skillsft.pipeline.teacher.base import (
    BatchStats,
    Teacher,
    TeacherRequest,
)
from skillsft.schemas.answer_bounds import bounded_answer_model
from skillsft.schemas.memory import Memory
from skillsft.schemas.memory_answers import MistakesAnswer, SkillsAnswer
from skillsft.schemas.reject import Reject
from skillsft.schemas.skill_bank import CommonMistake, Skill, SkillBank

SKILLS_KIND = "aggregate_skills"
MISTAKES_KIND = "aggregate_mistakes"
# Bump when the prompt text below changes: the version is part of every journal key.
PROMPT_VERSIONS = {SKILLS_KIND: "aggregate-skills-v2", MISTAKES_KIND: "aggregate-mistakes-v2"}
STAGE = "aggregate"


class AggregationError(SkillsftError):
    """A teacher call of the reduction failed, so the bank would silently miss a subtree.

    `failed` holds (request id, error) of every call of the level that failed, so the stage can
    list each one in its rejects file."""

    def __init__(self, message: str, failed: Sequence[tuple[str, str]] = ()) -> None:
        super().__init__(message)
        self.failed = tuple(failed)

    def rejects(self, file: str) -> list[Reject]:
        """One rejects line per failed call; `file` names the memory files read."""
        return [Reject(stage="aggregate", file=file, reason="teacher_error", step=request_id,
                       detail=f"aggregation call {request_id}: {message}")
                for request_id, message in self.failed]


@dataclass(frozen=True)
class AggregateOptions:
    # K: the most items one prompt holds, at every level
    batch_size: Annotated[int, Opt("max items merged per teacher call", kind="positive_int")] = 40
    max_outputs_per_call: int = 10  # skills or mistakes one answer may keep
    max_prompt_chars: int = 24_000  # every rendered prompt stays under this
    shape: BankShape | None = None  # the bank's section sizes; None: the environment's default

    @property
    def fan_in(self) -> int:
        """How many answers one merge call combines (their items still fit in one batch)."""
        return max(2, self.batch_size // self.max_outputs_per_call)

    @property
    def item_chars(self) -> int:
        return max(80, (self.max_prompt_chars - _PROMPT_OVERHEAD) // self.batch_size - 8)


@dataclass(frozen=True)
class Track:
    name: str  # "general", "category:clean", "mistakes"
    kind: str
    scope: str  # what the items are about, for the prompt
    items: tuple[dict[str, Any], ...]
    count: CountRange = CountRange(5, 5)  # how many entries the section should end with
    rule: str = ""  # what sets this section apart, for the prompt


@dataclass(frozen=True)
class AggregateContext:
    """One reduction call: the offline teacher merges `items` from this alone."""

    track: str
    level: int
    items: tuple[dict[str, Any], ...]
    max_outputs: int
    placeholder_words: dict[str, str] = field(default_factory=dict)


def planned_calls(n_items: int, options: AggregateOptions) -> int:
    """Calls one track of n items costs: ceil(n/K) at level 0, then ceil(c/fan_in) per level."""
    if n_items == 0:
        return 0
    calls = level = math.ceil(n_items / options.batch_size)
    while level > 1:
        level = math.ceil(level / options.fan_in)
        calls += level
    return calls


# ---------------------------------------------------------------------------------------------
# Prompts

_SKILLS_SYSTEM = """\
You distil reusable skills for an LLM agent from experience in {environment}. You receive \
numbered items, each either a solved task's planning pattern (`goal`, `pattern`) or an already \
distilled skill (`title`, `principle`, `when_to_apply`, `support`).
{scope_rule}
Merge duplicates and near-duplicates and generalise over concrete objects, places and values. \
Write every skill in natural English: no bracketed placeholders such as [Object_1], no \
instance names ('mug 1'), no concrete values, answers or product titles. Placeholders in the \
items read as: {placeholder_words}.
Each skill has a `title` in Title Case of three to five words, a `principle` of one or two \
sentences giving the actionable insight, and a `when_to_apply` of one sentence naming the \
situation that calls for it; each skill must make sense on its own.
{count_rule}
Answer with one JSON object and nothing else:
{{"skills": [{{"title": str, "principle": str, "when_to_apply": str, "support": int}}]}}
`support` is how many input items a skill covers (add up the supports of merged skills)."""

_MISTAKES_SYSTEM = """\
You distil the common mistakes of an LLM agent in {environment} from failed episodes. You \
receive numbered items, each either a mistake (`trigger_condition`, `bad_action`) or an \
already distilled mistake (`description`, `why_it_happens`, `how_to_avoid`, `support`).
{scope_rule}
Merge duplicates and near-duplicates and generalise them. Write in natural English: no \
bracketed placeholders such as [Location], no instance names, never a quoted answer or value. \
Placeholders in the items read as: {placeholder_words}.
Each mistake has a `description` of one sentence, a `why_it_happens` of one sentence and a \
`how_to_avoid` of one or two sentences.
{count_rule}
Answer with one JSON object and nothing else:
{{"mistakes": [{{"description": str, "why_it_happens": str, "how_to_avoid": str, \
"support": int}}]}}
`support` is how many input items a mistake covers (add up the supports of merged ones)."""

_USER = "Environment: {environment}\nScope: {scope}\n\nItems:\n{items}"
# Room for the instructions, the scope rule and the placeholder glossary of any environment.
_PROMPT_OVERHEAD = max(len(_SKILLS_SYSTEM), len(_MISTAKES_SYSTEM)) + len(_USER) + 1200


def _clip(value: Any, limit: int) -> Any:
    if isinstance(value, str) and len(value) > limit:
        return value[: limit - 3] + "..."
    return value


def render_item(number: int, item: dict[str, Any], limit: int) -> str:
    """One numbered compact-JSON line; long strings are clipped so the line fits `limit`."""
    per_field = max(20, limit // max(1, len(item)))
    clipped = {key: _clip(value, per_field) for key, value in item.items()}
    return f"{number}. {orjson.dumps(clipped).decode()}"


def count_rule(track: Track, final: bool, options: AggregateOptions) -> str:
    """The last call of a track asks for the section's size; earlier calls only cap it."""
    noun = "skills" if track.kind == SKILLS_KIND else "mistakes"
    if final:
        return (f"Return {track.count.wording()} {noun}, the best supported first; when the "
                f"items support fewer distinct {noun}, return fewer rather than inventing any.")
    return f"Return at most {options.max_outputs_per_call} {noun}, the best supported first."


def build_request(track: Track, level: int, batch: int, items: Sequence[dict[str, Any]],
                  environment: str, options: AggregateOptions, final: bool = False,
                  profile: PromptProfile | None = None) -> TeacherRequest[Any]:
    words = profile.placeholders if profile else {}
    template = _SKILLS_SYSTEM if track.kind == SKILLS_KIND else _MISTAKES_SYSTEM
    system = template.format(
        environment=environment, scope_rule=track.rule,
        placeholder_words="; ".join(f"{k} = {v}" for k, v in words.items()) or "(none)",
        count_rule=count_rule(track, final, options))
    lines = "\n".join(render_item(i + 1, item, options.item_chars) for i, item in enumerate(items))
    user = _USER.format(environment=environment, scope=track.scope, items=lines)
    max_outputs = track.count.high if final else options.max_outputs_per_call
    return TeacherRequest(
        request_id=f"{track.name}/L{level}/B{batch:04d}",
        kind=track.kind,
        messages=({"role": "system", "content": system}, {"role": "user", "content": user}),
        answer_model=(
            bounded_answer_model(SkillsAnswer, (("skills", options.max_outputs_per_call),))
            if track.kind == SKILLS_KIND
            else bounded_answer_model(MistakesAnswer, (("mistakes", options.max_outputs_per_call),))
        ),
        prompt_version=PROMPT_VERSIONS[track.kind],
        offline_context=AggregateContext(track.name, level, tuple(items), max_outputs,
                                         dict(words)),
    )


# ---------------------------------------------------------------------------------------------
# Tracks from memories, the level-by-level reduction, and the bank


def memory_category(memory: Memory, spec: EnvSpec) -> str:
    meta = memory.content.task_meta
    return spec.classify_task(meta.original_goal, memory.tags.data_source or meta.data_source)


def build_tracks(memories: Sequence[Memory], spec: EnvSpec, shape: BankShape | None = None
                 ) -> tuple[list[Track], Counter[str]]:
    """The items each track reduces; counts memories per category and outcome.

    General and per-category skills come from success patterns only, common mistakes from
    failures only, as in the released banks: a failure's lesson never becomes a category skill.
    """
    shape = shape or spec.bank_shape
    noun = spec.prompts.category_noun if spec.prompts else "task category"
    general: list[dict[str, Any]] = []
    mistakes: list[dict[str, Any]] = []
    per_category: dict[str, list[dict[str, Any]]] = {c: [] for c in spec.categories}
    counts: Counter[str] = Counter()
    for memory in memories:
        category = memory_category(memory, spec)
        outcome = memory.tags.outcome.lower()
        counts[f"{category}:{outcome}"] += 1
        goal = memory.content.task_meta.original_goal
        guidelines = memory.content.strategic_guidelines
        if memory.tags.outcome == "Success" and guidelines.planning_pattern:
            item = {"goal": goal, "pattern": guidelines.planning_pattern}
            general.append(item)
            per_category.setdefault(category, []).append(item)
        for mistake in guidelines.mistakes_to_avoid if memory.tags.outcome == "Failure" else ():
            mistakes.append(mistake.model_dump(include={"trigger_condition", "bad_action"}))
        if not (guidelines.planning_pattern or guidelines.mistakes_to_avoid):
            counts["memories_without_pattern_or_mistakes"] += 1
    tracks = [Track("general", SKILLS_KIND, f"general principles for every {noun}",
                    tuple(general), shape.general,
                    f"Write general principles that hold for every {noun}, drawn from the "
                    "successes' planning patterns.")]
    tracks += [Track(f"category:{c}", SKILLS_KIND, f"skills for {spec.label(c)} tasks",
                     tuple(items), shape.per_category,
                     f"Write skills specific to {spec.label(c)} tasks, drawn from this "
                     f"{noun}'s successes: what is particular to it, not what holds for "
                     "every task.")
               for c, items in per_category.items()]
    tracks.append(Track("mistakes", MISTAKES_KIND, "common mistakes across all tasks",
                        tuple(mistakes), shape.mistakes,
                        "Deduplicate and generalise the failures' mistakes into the common "
                        "mistakes of every task."))
    return tracks, counts


def _outputs(answer: Any) -> list[dict[str, Any]]:
    drafts = answer.skills if isinstance(answer, SkillsAnswer) else answer.mistakes
    return [d.model_dump() for d in drafts]


def reduce_tracks(
    tracks: Sequence[Track], environment: str, teacher: Teacher, options: AggregateOptions,
    profile: PromptProfile | None = None,
) -> tuple[dict[str, list[dict[str, Any]]], BatchStats, dict[str, int]]:
    """Reduce every track to one answer's drafts, level by level (see module docstring)."""
    stats = BatchStats(stage=STAGE, model="", cost_usd=0.0, reused_cost_usd=0.0)
    finals: dict[str, list[dict[str, Any]]] = {t.name: [] for t in tracks}
    calls: Counter[str] = Counter()
    by_name = {t.name: t for t in tracks}
    size = options.batch_size
    pending = {t.name: [list(t.items[i: i + size]) for i in range(0, len(t.items), size)]
               for t in tracks if t.items}
    level = 0
    while pending:
        keys = [(name, b) for name, groups in pending.items() for b in range(len(groups))]
        requests = [build_request(by_name[name], level, b, pending[name][b], environment,
                                  options, final=len(pending[name]) == 1, profile=profile)
                    for name, b in keys]
        results, part = teacher.run_batch(requests, stage=STAGE)
        stats.absorb(part)
        answers: dict[str, list[list[dict[str, Any]]]] = {name: [] for name in pending}
        failed = [(request.request_id, result.error or "no answer")
                  for request, result in zip(requests, results, strict=True)
                  if result.answer is None]
        if failed:
            request_id, error = failed[0]
            raise AggregationError(
                f"{len(failed)} aggregation call(s) failed, first {request_id}: {error}; re-run "
                "to retry (finished calls are reused from the teacher journal)", failed)
        for (name, _), result in zip(keys, results, strict=True):
            calls[name] += 1
            limit = by_name[name].count.high if len(pending[name]) == 1 else (
                options.max_outputs_per_call)
            answers[name].append(_outputs(result.answer)[:limit])
        pending = {}
        for name, outputs in answers.items():
            if len(outputs) == 1:
                finals[name] = outputs[0]
                continue
            fan_in = options.fan_in
            pending[name] = [[d for out in outputs[i: i + fan_in] for d in out]
                             for i in range(0, len(outputs), fan_in)]
        level += 1
    return finals, stats, dict(calls)


def _numbered(prefix: str, index: int) -> str:
    return f"{prefix}_{index:03d}"


def aggregate_memories(
    memories: Sequence[Memory], spec: EnvSpec, options: AggregateOptions | None,
    teacher: Teacher,
) -> StageResult[SkillBank]:
    """The skill bank (the one record of the result) for validated memories of one
    environment (see skill_bank_io for loading memory files with per-record rejects). Its unit
    is the memory; a failed teacher call raises `AggregationError`, since a bank missing a
    subtree would mislead."""
    options = options or AggregateOptions()
    shape = options.shape or spec.bank_shape
    tracks, distribution = build_tracks(memories, spec, shape)
    finals, stats, calls = reduce_tracks(tracks, spec.memory_environment_tag, teacher, options,
                                         spec.prompts)
    general = [Skill(skill_id=_numbered("gen", i + 1), title=d["title"], principle=d["principle"],
                     when_to_apply=d["when_to_apply"]) for i, d in enumerate(finals["general"])]
    per_category = {
        c: [Skill(skill_id=_numbered(c[:3], i + 1), title=d["title"], principle=d["principle"],
                  when_to_apply=d["when_to_apply"])
            for i, d in enumerate(finals.get(f"category:{c}", []))]
        for c in spec.categories
    }
    mistakes = [CommonMistake(mistake_id=_numbered("err", i + 1), description=d["description"],
                              why_it_happens=d["why_it_happens"], how_to_avoid=d["how_to_avoid"])
                for i, d in enumerate(finals["mistakes"])]
    metadata = {
        "source": teacher.name,
        "model": stats.model,
        "total_memories_analyzed": len(memories),
        "category_distribution": {
            c: {"success": distribution[f"{c}:success"], "failure": distribution[f"{c}:failure"]}
            for c in spec.categories
        },
        "prompt_versions": dict(PROMPT_VERSIONS),
        "batch_size": options.batch_size,
        "max_outputs_per_call": options.max_outputs_per_call,
        "teacher_calls": sum(calls.values()),
        "bank_shape": shape.as_dict(),
    }
    bank = SkillBank(general_skills=general, common_mistakes=mistakes, metadata=metadata,
                     **{spec.bank_category_key: per_category})
    check = check_bank(bank, spec.categories, shape)
    bank.metadata = {**metadata, "shape_check": check.as_metadata()}
    counts = {"bank_placeholder_slips": len(check.placeholder_slips),
              "bank_sections_off_shape": len(check.off_shape),
              "memories": len(memories), "teacher_calls": sum(calls.values()),
              "general_skills": len(general), "common_mistakes": len(mistakes),
              **{f"skills_{c}": len(s) for c, s in per_category.items()},
              **{k: v for k, v in distribution.items() if ":" not in k}}
    return StageResult([bank], [], stage_counts(counts, inputs=len(memories), outputs=1,
                                                rejected=0),
                       unit="memory records", teacher=[stats],
                       extras={"calls_per_track": calls})
