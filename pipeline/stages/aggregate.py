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

Two things are never left to the model. `support` (how many items a draft summarises) is
counted here: each draft's support is bounded by the supports of the items its call merged
(level-0 items count one each), whatever number the model wrote. And a call that fails for good
costs its batch, not the run: its items are dropped from that track with a reason (one reject
line per memory they came from, counted as rejected by the failure rule), the other calls of
the level go on. Dropping, not carrying the items up unmerged, keeps every merge prompt within
`batch_size` items and the number of levels bounded.
"""

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import orjson

from skillsft.pipeline.envs import EnvSpec
from skillsft.pipeline.envs.prompt_profiles import BankShape, CountRange, PromptProfile
from skillsft.pipeline.options import Opt
from skillsft.pipeline.stages.bank_checks import check_bank
from skillsft.pipeline.stages.result import StageResult, stage_counts
from skillsft.pipeline.teacher.base import (
    BatchStats,
    Teacher,
    TeacherRequest,
)
from skillsft.pipeline.teacher.contexts import AggregateContext
from skillsft.pipeline.teacher.kinds import AGGREGATE_MISTAKES, AGGREGATE_SKILLS
from skillsft.pipeline.workdir import MEMORIES
from skillsft.schemas.answer_bounds import bounded_answer_model
from skillsft.schemas.memory import Memory
from skillsft.schemas.memory_answers import MistakesAnswer, SkillsAnswer
from skillsft.schemas.reject import Reject
from skillsft.schemas.skill_bank import CommonMistake, Skill, SkillBank

SKILLS_KIND = AGGREGATE_SKILLS.name
MISTAKES_KIND = AGGREGATE_MISTAKES.name
_KINDS = {SKILLS_KIND: AGGREGATE_SKILLS, MISTAKES_KIND: AGGREGATE_MISTAKES}
# The versions live in the kind table (teacher/kinds.py): bump them there when the prompt text
# below changes, since the version is part of every journal key.
PROMPT_VERSIONS = {name: kind.prompt_version for name, kind in _KINDS.items()}
STAGE = "aggregate"


@dataclass(frozen=True)
class FailedCall:
    """A reduction call that failed: its items are left out of its track's section."""

    request_id: str
    track: str
    error: str
    retryable: bool  # the next run asks again (teacher/failures.py)
    items: int
    memories: frozenset[int]  # indexes of the memories the items came from

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
    sources: tuple[int, ...] = ()  # per item, the index of the memory it came from


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
    kind = _KINDS[track.kind]
    listed = "skills" if track.kind == SKILLS_KIND else "mistakes"
    context = AggregateContext(track.name, level, tuple(items), max_outputs, dict(words))
    return kind.request(
        f"{track.name}/L{level}/B{batch:04d}",
        ({"role": "system", "content": system}, {"role": "user", "content": user}),
        context=lambda: context,
        answer_model=bounded_answer_model(kind.answer_model,
                                          ((listed, options.max_outputs_per_call),)),
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
    # per track: (item, index of the memory it came from)
    general: list[tuple[dict[str, Any], int]] = []
    mistakes: list[tuple[dict[str, Any], int]] = []
    per_category: dict[str, list[tuple[dict[str, Any], int]]] = {c: [] for c in spec.categories}
    counts: Counter[str] = Counter()
    for index, memory in enumerate(memories):
        category = memory_category(memory, spec)
        outcome = memory.tags.outcome.lower()
        counts[f"{category}:{outcome}"] += 1
        goal = memory.content.task_meta.original_goal
        guidelines = memory.content.strategic_guidelines
        if memory.tags.outcome == "Success" and guidelines.planning_pattern:
            item = {"goal": goal, "pattern": guidelines.planning_pattern}
            general.append((item, index))
            per_category.setdefault(category, []).append((item, index))
        for mistake in guidelines.mistakes_to_avoid if memory.tags.outcome == "Failure" else ():
            mistakes.append(
                (mistake.model_dump(include={"trigger_condition", "bad_action"}), index))
        if not (guidelines.planning_pattern or guidelines.mistakes_to_avoid):
            counts["memories_without_pattern_or_mistakes"] += 1

    def track(name: str, kind: str, scope: str, pairs: list[tuple[dict[str, Any], int]],
              count: CountRange, rule: str) -> Track:
        return Track(name, kind, scope, tuple(item for item, _ in pairs), count, rule,
                     tuple(source for _, source in pairs))

    tracks = [track("general", SKILLS_KIND, f"general principles for every {noun}",
                    general, shape.general,
                    f"Write general principles that hold for every {noun}, drawn from the "
                    "successes' planning patterns.")]
    tracks += [track(f"category:{c}", SKILLS_KIND, f"skills for {spec.label(c)} tasks",
                     pairs, shape.per_category,
                     f"Write skills specific to {spec.label(c)} tasks, drawn from this "
                     f"{noun}'s successes: what is particular to it, not what holds for "
                     "every task.")
               for c, pairs in per_category.items()]
    tracks.append(track("mistakes", MISTAKES_KIND, "common mistakes across all tasks",
                        mistakes, shape.mistakes,
                        "Deduplicate and generalise the failures' mistakes into the common "
                        "mistakes of every task."))
    return tracks, counts


def _outputs(answer: SkillsAnswer | MistakesAnswer, items: Sequence[dict[str, Any]]
             ) -> list[dict[str, Any]]:
    """The answer's drafts, each support bounded by what the call merged: the items' supports
    summed (an item without one, a level-0 pattern or mistake, counts one)."""
    merged = sum(int(item.get("support", 1)) for item in items)
    drafts = answer.skills if isinstance(answer, SkillsAnswer) else answer.mistakes
    return [{**d.model_dump(), "support": min(d.support, merged)} for d in drafts]


@dataclass
class _Group:
    """The items one call of a level merges, and the memories they came from."""

    items: list[dict[str, Any]]
    memories: frozenset[int]


def reduce_tracks(
    tracks: Sequence[Track], environment: str, teacher: Teacher, options: AggregateOptions,
    profile: PromptProfile | None = None,
) -> tuple[dict[str, list[dict[str, Any]]], BatchStats, dict[str, int], list[FailedCall]]:
    """Reduce every track to one answer's drafts, level by level (see module docstring); the
    calls that failed are returned, their items left out."""
    stats = BatchStats(stage=STAGE, model="", cost_usd=0.0, reused_cost_usd=0.0)
    finals: dict[str, list[dict[str, Any]]] = {t.name: [] for t in tracks}
    calls: Counter[str] = Counter()
    failed: list[FailedCall] = []
    by_name = {t.name: t for t in tracks}
    size = options.batch_size
    pending = {t.name: [_Group(list(t.items[i: i + size]), frozenset(t.sources[i: i + size]))
                        for i in range(0, len(t.items), size)]
               for t in tracks if t.items}
    level = 0
    while pending:
        keys = [(name, b) for name, groups in pending.items() for b in range(len(groups))]
        requests = [build_request(by_name[name], level, b, pending[name][b].items, environment,
                                  options, final=len(pending[name]) == 1, profile=profile)
                    for name, b in keys]
        results, part = teacher.run_batch(requests, stage=STAGE)
        stats.absorb(part)
        answers: dict[str, list[_Group]] = {name: [] for name in pending}
        for (name, b), request, result in zip(keys, requests, results, strict=True):
            calls[name] += 1
            group = pending[name][b]
            answer = _KINDS[by_name[name].kind].answer(result)
            if answer is None:
                failed.append(FailedCall(request.request_id, name, result.error or "no answer",
                                         result.retryable, len(group.items), group.memories))
                continue
            limit = by_name[name].count.high if len(pending[name]) == 1 else (
                options.max_outputs_per_call)
            answers[name].append(_Group(_outputs(answer, group.items)[:limit],
                                        group.memories))
        pending = {}
        for name, outputs in answers.items():
            if len(outputs) <= 1:
                finals[name] = outputs[0].items if outputs else []
                continue
            fan_in = options.fan_in
            pending[name] = [
                _Group([d for out in outputs[i: i + fan_in] for d in out.items],
                       frozenset().union(*(out.memories for out in outputs[i: i + fan_in])))
                for i in range(0, len(outputs), fan_in)]
        level += 1
    return finals, stats, dict(calls), failed


def failure_rejects(failed: Sequence[FailedCall], memories: Sequence[Memory]) -> list[Reject]:
    """One line per failed call and memory whose items it held: what the bank lacks, and why."""
    rejects = []
    for call in failed:
        again = ("the next run asks again" if call.retryable else
                 "failed for good; fix the cause and re-run with --force aggregate")
        for index in sorted(call.memories):
            memory = memories[index]
            rejects.append(Reject(
                stage=STAGE, file=MEMORIES, reason="teacher_error",
                step=call.request_id, trajectory=memory.memory_id,
                detail=(f"aggregation call {call.request_id} failed: {call.error[:300]}; its "
                        f"{call.items} items are left out of the {call.track} section"),
                hint=again))
    return rejects


def _numbered(prefix: str, index: int) -> str:
    return f"{prefix}_{index:03d}"


def aggregate_memories(
    memories: Sequence[Memory], spec: EnvSpec, options: AggregateOptions | None,
    teacher: Teacher,
) -> StageResult[SkillBank]:
    """The skill bank (the one record of the result) for validated memories of one
    environment (see skill_bank_io for loading memory files with per-record rejects). Its unit
    is the memory: a memory whose items a failed call held is rejected (listed per call), and
    the failure rule decides whether the bank may be used."""
    options = options or AggregateOptions()
    shape = options.shape or spec.bank_shape
    tracks, distribution = build_tracks(memories, spec, shape)
    finals, stats, calls, failed = reduce_tracks(tracks, spec.memory_environment_tag, teacher,
                                                 options, spec.prompts)
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
    rejects = failure_rejects(failed, memories)
    lost = frozenset().union(*(call.memories for call in failed))
    if failed:
        counts["failed_calls"] = len(failed)
    return StageResult([bank], rejects, stage_counts(counts, inputs=len(memories), outputs=1,
                                                     rejected=len(lost)),
                       unit="memory records", teacher=[stats],
                       extras={"calls_per_track": calls})
