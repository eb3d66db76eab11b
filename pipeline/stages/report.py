"""The run report: one readable account of a work dir, built from the files the stages left.

Everything comes from disk (stage manifests, rejects.jsonl, the corpus and its provenance, the
exported parquet shards), never from counters kept in a process, so the report of a resumed or
partly re-run pipeline is as right as that of a fresh one, and `skillsft report` can be run on
any work dir after the fact.

Every stage's manifest holds the fixed counters `inputs`, `outputs` and `rejected` of its
result (stages/result.py), which the stage table shows as they are; the stage's other counters
are listed by name beside them.

Nothing here raises on a bad file: an unreadable manifest, reject line, corpus record or
provenance line becomes a warning naming the file and line, and the report says so.
"""

import logging
import math
import re
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import orjson
from pydantic import ValidationError

from skillsft.pipeline import workdir
from skillsft.pipeline.corpus_bank import corpus_bank
from skillsft.pipeline.corpus_metrics import DEFAULT_CUTOFF_LEN, instruction_lengths, skill_use
from skillsft.pipeline.envs import EnvSpec, get_env
from skillsft.pipeline.formats.render import BLOCK_TITLE
from skillsft.pipeline.options import Opt
from skillsft.pipeline.skill_selection import SkillSelection
from skillsft.pipeline.stages.result import INPUTS, OUTPUTS, REJECTED
from skillsft.pipeline.teacher.pricing import PRICES_AS_OF
from skillsft.schemas.base import OpenModel
from skillsft.schemas.conversation import AlpacaRecord
from skillsft.schemas.reject import Reject
from skillsft.schemas.report import (
    SMOKE_TEST_NOTE,
    ConsistencyCheck,
    CorpusStats,
    Distribution,
    ModelUsage,
    RunReport,
    RunReportDetails,
    SkillUseReport,
    StageDetail,
    StageReport,
    TeacherUsage,
)

log = logging.getLogger("skillsft.report")

STAGE_ORDER = ("parse", "memories", "aggregate", "distill", "flatten")
# The work dir's names belong to pipeline/workdir.py; kept under these names for readers here.
MANIFEST_DIR = workdir.STATE_DIR
MANIFEST_SUFFIX = workdir.MANIFEST_SUFFIX
REJECTS_FILE = workdir.REJECTS["parse"]  # every rejects file ends with it
SKILL_BANK_FILE = workdir.SKILL_BANK
DISTILLED_FILE = workdir.DISTILLED
HUB_DIR = workdir.HUB_DIR


# How tokens are approximated, stated once so the report and its readers agree on it.
TOKEN_PIECE = re.compile(r"\w+|[^\w\s]")
TOKEN_APPROXIMATION = (
    "regex word pieces: each run of letters/digits/underscores and each other non-space "
    "character counts as one token (no tokenizer dependency; BPE tokenizers split rare and "
    "long words further, so real counts are somewhat higher)"
)


@dataclass(frozen=True)
class ReportOptions:
    """What the report (and the card) measure the corpus against."""

    cutoff_len: Annotated[int, Opt(
        "the student's training cutoff in tokens: the report and the card count records longer "
        "than this (default 8192)", kind="positive_int")] = DEFAULT_CUTOFF_LEN


corpus_file = workdir.corpus
corpus_lines_file = workdir.corpus_lines
provenance_file = workdir.provenance


class Provenance(OpenModel):
    """One line of `<env>_sft_provenance.jsonl`: where the corpus record on the same line of
    the corpus came from. Written by stage 4; read tolerantly (extra keys are kept)."""

    trajectory_id: str
    task_type: str
    turn: int
    num_steps: int
    source: str
    skill_ids: list[str] | None = None  # the items the instruction shows (None: older file)


@dataclass
class Loaded:
    """Records read from one file plus what could not be read (as warnings to show)."""

    items: list[Any] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    found: bool = True
    kept: list[int] = field(default_factory=list)  # position in the file of each item


# -- readers ----------------------------------------------------------------------------------


def load_corpus(work_dir: Path, env: str) -> Loaded:
    """The alpaca records of `<env>_sft_data.json`; invalid records are skipped with a warning.

    A missing or unparseable file gives `found=False` (the caller decides whether that is fatal:
    the report shows it, publishing refuses to go on).
    """
    path = Path(work_dir) / corpus_file(env)
    if not path.is_file():
        return Loaded(found=False, warnings=[f"{path}: corpus not found (run stage 4 first)"])
    try:
        data = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        return Loaded(found=False, warnings=[f"{path}: not valid JSON ({exc}); re-run stage 4"])
    if not isinstance(data, list):
        return Loaded(found=False, warnings=[f"{path}: expected a JSON list of records"])
    loaded = Loaded()
    for index, raw in enumerate(data):
        try:
            loaded.items.append(AlpacaRecord.model_validate(raw))
            loaded.kept.append(index)
        except ValidationError as exc:
            loaded.warnings.append(
                f"{path}: record {index} skipped, not an alpaca record "
                f"({exc.errors()[0]['msg']}); fix or regenerate it with stage 4"
            )
    return loaded


def load_jsonl(path: Path, model: type[Any]) -> Loaded:
    """Validated lines of a JSONL file; a bad line is a warning with its line number."""
    if not path.is_file():
        return Loaded(found=False)
    loaded = Loaded()
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                loaded.items.append(model.model_validate(orjson.loads(line)))
            except (orjson.JSONDecodeError, ValidationError) as exc:
                reason = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
                loaded.warnings.append(
                    f"{path}:{number}: line skipped ({reason}); fix or delete it"
                )
    return loaded


def load_provenance(work_dir: Path, env: str) -> Loaded:
    return load_jsonl(Path(work_dir) / provenance_file(env), Provenance)


def load_manifests(work_dir: Path) -> Loaded:
    """(output name, manifest dict) pairs, sorted by output name; the same files that
    `tasks.targets.iter_manifests` reads, read here because pipeline/ never imports tasks/."""
    loaded = Loaded()
    folder = Path(work_dir) / MANIFEST_DIR
    for path in sorted(folder.glob(f"*{MANIFEST_SUFFIX}")):
        try:
            manifest = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            loaded.warnings.append(f"{path}: unreadable manifest skipped ({exc})")
            continue
        if not isinstance(manifest, dict):
            loaded.warnings.append(f"{path}: manifest is not a JSON object; skipped")
            continue
        loaded.items.append((path.name.removesuffix(MANIFEST_SUFFIX), manifest))
    return loaded


def published_rows(work_dir: Path, env: str) -> dict[str, int]:
    """Rows per split in the exported parquet shards (`hub/<env>/<split>-*.parquet`)."""
    import pyarrow.parquet as pq  # a datasets dependency; imported late, reports rarely need it

    rows: Counter[str] = Counter()
    for path in sorted((Path(work_dir) / HUB_DIR / env).glob("*.parquet")):
        split = path.name.split("-", 1)[0]
        rows[split] += pq.read_metadata(path).num_rows
    return dict(rows)


# -- statistics -------------------------------------------------------------------------------


def distribution(values: Sequence[float]) -> Distribution:
    """Nearest-rank percentiles: each one is a value that occurs in the data."""
    if not values:
        return Distribution()
    ordered = sorted(values)

    def rank(p: float) -> float:
        return float(ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)])

    return Distribution(
        count=len(ordered),
        mean=round(statistics.fmean(ordered), 2),
        min=float(ordered[0]),
        p50=rank(50),
        p90=rank(90),
        p99=rank(99),
        max=float(ordered[-1]),
    )


def approx_tokens(text: str) -> int:
    return len(TOKEN_PIECE.findall(text))


def section_headings(spec: EnvSpec) -> list[str]:
    """The retrieved-experience headings a record of this environment can carry."""
    return [
        BLOCK_TITLE,
        "### General Principles",
        *(f"### {spec.label(category)} Skills" for category in spec.categories),
        "### Mistakes to Avoid",
    ]


def corpus_stats(
    records: Sequence[AlpacaRecord], provenance: Sequence[Provenance] | None, spec: EnvSpec
) -> CorpusStats:
    """Sizes and shapes of the corpus; per-trajectory figures need the provenance lines."""
    stats = CorpusStats(
        records=len(records),
        instruction_chars=distribution([len(r.instruction) for r in records]),
        instruction_tokens_approx=distribution([approx_tokens(r.instruction) for r in records]),
        token_approximation=TOKEN_APPROXIMATION,
    )
    if records:
        for heading in section_headings(spec):
            present = sum(1 for r in records if heading in r.instruction)
            if present or heading in (BLOCK_TITLE, "### General Principles"):
                stats.section_share[heading] = round(present / len(records), 4)
        category_headings = [f"### {spec.label(c)} Skills" for c in spec.categories]
        any_category = sum(1 for r in records if any(h in r.instruction for h in category_headings))
        stats.section_share["any category skills"] = round(any_category / len(records), 4)
    if provenance:
        steps: dict[str, int] = {}
        trajectory_category: dict[str, str] = {}
        for line in provenance:
            steps[line.trajectory_id] = line.num_steps
            trajectory_category[line.trajectory_id] = line.task_type
        stats.trajectories = len(steps)
        per_category = Counter(p.task_type for p in provenance)
        stats.records_per_category = dict(sorted(per_category.items()))
        per_trajectory = Counter(trajectory_category.values())
        stats.trajectories_per_category = dict(sorted(per_trajectory.items()))
        stats.steps_per_trajectory = distribution(list(steps.values()))
        stats.records_by_source = dict(sorted(Counter(p.source for p in provenance).items()))
    return stats


# -- stages and teacher usage -----------------------------------------------------------------


def stage_rank(stage: str) -> int:
    return STAGE_ORDER.index(stage) if stage in STAGE_ORDER else len(STAGE_ORDER)


def int_counts(raw: Any) -> dict[str, int]:
    if not isinstance(raw, dict):
        return {}
    return {str(k): v for k, v in raw.items() if isinstance(v, int) and not isinstance(v, bool)}


def stage_reports(
    manifests: Iterable[tuple[str, dict[str, Any]]], rejects: Sequence[Reject]
) -> tuple[list[StageReport], list[StageDetail], list[TeacherUsage]]:
    rejects_by_stage: dict[str, Counter[str]] = defaultdict(Counter)
    for reject in rejects:
        rejects_by_stage[reject.stage][reject.reason] += 1
    stages: list[StageReport] = []
    details: list[StageDetail] = []
    usage: list[TeacherUsage] = []
    ordered = sorted(manifests, key=lambda item: (stage_rank(str(item[1].get("stage"))), item[0]))
    for output, manifest in ordered:
        stage = str(manifest.get("stage") or manifest.get("task") or output)
        counts = int_counts(manifest.get("counts"))
        stage_rejects = dict(sorted(rejects_by_stage.get(stage, Counter()).items()))
        wall = manifest.get("wall_seconds")
        stages.append(
            StageReport(
                stage=stage,
                inputs=counts.get(INPUTS, 0),
                outputs=counts.get(OUTPUTS, 0),
                rejected=counts.get(REJECTED, 0),
                counts=counts,
                wall_seconds=float(wall) if isinstance(wall, int | float) else None,
            )
        )
        params = manifest.get("params") if isinstance(manifest.get("params"), dict) else {}
        versions = manifest.get("versions") if isinstance(manifest.get("versions"), dict) else {}
        details.append(
            StageDetail(
                stage=stage,
                output=output,
                params={str(k): str(v) for k, v in params.items()},
                versions={str(k): str(v) for k, v in versions.items()},
                rejects=stage_rejects,
                written_at=manifest.get("written_at"),
            )
        )
        for entry in manifest.get("teacher") or []:
            if isinstance(entry, dict):
                fields = {k: v for k, v in entry.items() if k in TeacherUsage.model_fields}
                try:
                    usage.append(
                        TeacherUsage.model_validate({"stage": stage, "model": "", **fields})
                    )
                except ValidationError as exc:
                    log.warning("%s manifest: teacher usage entry skipped (%s)", output, exc)
    return stages, details, usage


def usage_by_model(usage: Iterable[TeacherUsage]) -> list[ModelUsage]:
    """Usage summed per model; the cost stays None if any stage could not price its calls."""
    models: dict[str, ModelUsage] = {}
    for entry in usage:
        name = entry.model or "offline"
        total = models.setdefault(name, ModelUsage(model=name, cost_usd=0.0, reused_cost_usd=0.0))
        total.add(entry)
        if entry.stage not in total.stages:
            total.stages.append(entry.stage)
    return [models[name] for name in sorted(models)]


# -- consistency ------------------------------------------------------------------------------


def consistency_checks(
    work_dir: Path,
    env: str,
    records: int,
    stages: Sequence[StageReport],
    provenance: Loaded,
    rows: dict[str, int],
) -> list[ConsistencyCheck]:
    """Numbers that must agree if the run is sound; each check only when both sides exist."""
    checks: list[ConsistencyCheck] = []

    def check(name: str, expected: int, actual: int) -> None:
        checks.append(ConsistencyCheck(name=name, expected=expected, actual=actual,
                                       ok=expected == actual))

    flatten = [s for s in stages if s.stage == "flatten"]
    if flatten and OUTPUTS in flatten[-1].counts:
        check("stage 4 records out = corpus records", flatten[-1].outputs, records)
    lines_path = Path(work_dir) / corpus_lines_file(env)
    if lines_path.is_file():
        with open(lines_path, "rb") as handle:
            lines = sum(1 for line in handle if line.strip())
        check(f"corpus records = {lines_path.name} lines", records, lines)
    if provenance.found:
        check("corpus records = provenance lines", records, len(provenance.items))
    if rows:
        check("corpus records = rows published", records, sum(rows.values()))
    return checks


# -- the report -------------------------------------------------------------------------------


def skill_use_report(work_dir: Path, instructions: Sequence[str], cutoff_len: int,
                     selection: str = "") -> SkillUseReport | None:
    """Skill use from the distilled conversations, lengths from the corpus; None without
    conversations (an unreadable file is a warning, not a crash)."""
    path = work_dir / DISTILLED_FILE
    try:
        conversations = orjson.loads(path.read_bytes()) if path.is_file() else None
    except orjson.JSONDecodeError as exc:
        log.warning("%s: not readable JSON (%s); no skill-use figures", path, exc)
        conversations = None
    if not isinstance(conversations, list):
        return None
    use = skill_use([c for c in conversations if isinstance(c, dict)])
    lengths = instruction_lengths(instructions, cutoff_len)
    return SkillUseReport(
        selection=selection, thoughts=use.thoughts, thoughts_with_skills_shown=use.with_block,
        share_naming_a_shown_skill=use.share(use.by_title),
        share_overlapping_a_shown_skill=use.share(use.by_overlap),
        block_share_mean=lengths.block_share_mean, block_share_max=lengths.block_share_max,
        cutoff_len=cutoff_len, instruction_tokens_max=lengths.tokens_max,
        records_over_cutoff=lengths.over_cutoff)


def selection_of(details: Sequence[StageDetail]) -> str:
    """How the distill stage chose each record's skills, from its manifest parameters."""
    params = next((d.params for d in details if d.stage == "distill"), None)
    return "" if params is None else SkillSelection.from_params(params).describe()


def build_report(work_dir: str | Path, env: str,
                 cutoff_len: int = DEFAULT_CUTOFF_LEN) -> RunReport:
    """Read a work dir into a `RunReport`; warnings in the report say what could not be read."""
    work_dir = Path(work_dir)
    spec = get_env(env)
    manifests = load_manifests(work_dir)
    rejects = Loaded()
    rejects_files: dict[str, str] = {}  # stage -> the file its rejects were read from
    for path in sorted(work_dir.glob(f"*{REJECTS_FILE}")):  # rejects.jsonl, <stage>_rejects.jsonl
        loaded = load_jsonl(path, Reject)
        rejects.items.extend(loaded.items)
        rejects.warnings.extend(loaded.warnings)
        rejects_files.update((reject.stage, path.name) for reject in loaded.items)
    corpus = load_corpus(work_dir, env)
    provenance = load_provenance(work_dir, env)
    warnings = [*manifests.warnings, *rejects.warnings, *corpus.warnings, *provenance.warnings]
    if provenance.found and len(provenance.items) != len(corpus.items):
        warnings.append(
            f"{work_dir / provenance_file(env)}: {len(provenance.items)} lines for "
            f"{len(corpus.items)} corpus records; per-trajectory statistics may be off"
        )
    elif not provenance.found:
        warnings.append(
            f"{work_dir / provenance_file(env)}: not found; no per-trajectory statistics"
        )
    for warning in warnings:
        log.warning(warning)

    stages, stage_details, usage = stage_reports(manifests.items, rejects.items)
    for detail in stage_details:
        detail.rejects_file = rejects_files.get(detail.stage)
    rows = published_rows(work_dir, env)
    stats = corpus_stats(corpus.items, provenance.items if provenance.found else None, spec)
    offline = "offline" in stats.records_by_source or any(
        u.stage == "distill" and (u.model or "offline") == "offline" for u in usage)
    details = RunReportDetails(
        generated_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        stage_details=stage_details,
        models=usage_by_model(usage),
        wall_seconds_total=round(sum(s.wall_seconds or 0.0 for s in stages), 3),
        corpus_stats=stats,
        skill_bank_sha256=bank.sha256 if (bank := corpus_bank(work_dir)) else None,
        published_rows=rows,
        checks=consistency_checks(work_dir, env, len(corpus.items), stages, provenance, rows),
        warnings=warnings,
        smoke_test=offline,
        skill_use=skill_use_report(work_dir, [r.instruction for r in corpus.items], cutoff_len,
                                   selection_of(stage_details)),
    )
    return RunReport(
        env=env,
        stages=stages,
        teacher=usage,
        corpus={"file": corpus_file(env), "records": stats.records,
                "trajectories": stats.trajectories},
        details=details,
    )


# -- markdown ---------------------------------------------------------------------------------


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub-flavoured markdown table; pipes inside cells are escaped."""

    def cell(value: object) -> str:
        return "" if value is None else str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def money(cost: float | None) -> str:
    return "unknown" if cost is None else f"${cost:.4f}"


def render_report_md(report: RunReport) -> str:
    """report.md: the same facts as report.json, as tables a person can scan."""
    d = report.details
    stats = d.corpus_stats
    out = [f"# skillsft run report: {report.env}", ""]
    if d.smoke_test:
        out += [f"> **{SMOKE_TEST_NOTE}**", ""]
    out.append(f"Generated {d.generated_at}. Total stage wall time {d.wall_seconds_total:.1f} s.")
    if d.skill_bank_sha256:
        out.append(f"Skill bank sha256 `{d.skill_bank_sha256}`.")
    out.append("")

    out += ["## Checks", ""]
    if d.checks:
        out.append(table(["check", "expected", "actual", "ok"],
                         ([c.name, c.expected, c.actual, "yes" if c.ok else "**NO**"]
                          for c in d.checks)))
    else:
        out.append("No check could be made (no corpus or manifests yet).")
    out.append("")

    out += ["## Stages", ""]
    out.append(table(["stage", "output", "in", "out", "rejected", "wall s"],
                     ([s.stage, det.output, s.inputs, s.outputs, s.rejected,
                       "" if s.wall_seconds is None else f"{s.wall_seconds:.1f}"]
                      for s, det in zip(report.stages, d.stage_details, strict=False))))
    reasons = [(s.stage, name, n) for s in report.stages for name, n in sorted(s.counts.items())]
    if reasons:
        out += ["", "### Counters by stage", "", table(["stage", "counter", "n"], reasons)]
    rejects = [
        (det.stage, reason, n, f"[{det.rejects_file}]({det.rejects_file})")
        for det in d.stage_details for reason, n in det.rejects.items()
    ]
    if rejects:
        out += ["", "### Rejects", "", "Every dropped file, record, turn and skipped env, one "
                "line each with its reason, in the listed file.", "",
                table(["stage", "reason", "n", "listed in"], rejects)]
    out.append("")

    out += ["## Teacher", ""]
    if report.teacher:
        out.append(table(
            ["stage", "model", "new", "from journal", "failed", "prompt tok", "completion tok",
             "cost"],
            ([t.stage, t.model or "offline", t.calls_new, t.calls_from_journal, t.calls_failed,
              t.prompt_tokens, t.completion_tokens, money(t.cost_usd)] for t in report.teacher)))
        out += ["", "### By model", ""]
        out.append(table(
            ["model", "stages", "new", "from journal", "failed", "prompt tok", "completion tok",
             "cost", "reused tok", "reused cost"],
            ([m.model, ", ".join(m.stages), m.calls_new, m.calls_from_journal, m.calls_failed,
              m.prompt_tokens, m.completion_tokens, money(m.cost_usd),
              m.reused_prompt_tokens + m.reused_completion_tokens, money(m.reused_cost_usd)]
             for m in d.models)))
        out += ["", "`cost` was paid by the run that made each output; `reused` answers came "
                "from the journal, paid by an earlier run: the corpus cost both. Prices: the "
                f"built-in table as of {PRICES_AS_OF} unless `--prices` overrode it."]
    else:
        out.append("No teacher calls recorded.")
    out.append("")

    out += ["## Corpus", ""]
    trajectories = "unknown (no provenance)" if stats.trajectories is None else stats.trajectories
    out.append(f"{stats.records} records from {trajectories} trajectories.")
    if d.published_rows:
        shown = ", ".join(f"{split} {n}" for split, n in sorted(d.published_rows.items()))
        out.append(f"Exported rows: {shown}.")
    out.append("")
    if stats.records_per_category:
        out.append(table(["category", "trajectories", "records"],
                         ([c, stats.trajectories_per_category.get(c, 0), n]
                          for c, n in stats.records_per_category.items())))
        out.append("")
    out.append(table(
        ["measure", "n", "mean", "min", "p50", "p90", "p99", "max"],
        ([name, x.count, x.mean, x.min, x.p50, x.p90, x.p99, x.max]
         for name, x in (("steps per trajectory", stats.steps_per_trajectory),
                         ("instruction chars", stats.instruction_chars),
                         ("instruction tokens (approx.)", stats.instruction_tokens_approx)))))
    out += ["", f"Token approximation: {stats.token_approximation}.", ""]
    if stats.section_share:
        out.append(table(["retrieved-experience section", "share of records"],
                         ([h, f"{share:.1%}"] for h, share in stats.section_share.items())))
        out.append("")
    if stats.records_by_source:
        out.append(table(["source", "records"], stats.records_by_source.items()))
        out.append("")

    if d.skill_use is not None:
        u = d.skill_use
        out += ["## Skills in the corpus", ""]
        out.append(table(["measure", "value"], (
            ("skills per record", u.selection or "unknown (no distill manifest)"),
            ("thoughts (with skills shown)", f"{u.thoughts} ({u.thoughts_with_skills_shown})"),
            ("thoughts naming a shown skill's title", f"{u.share_naming_a_shown_skill:.1%}"),
            ("thoughts sharing >= 3 content words with a shown skill",
             f"{u.share_overlapping_a_shown_skill:.1%}"),
            ("experience block / instruction, mean (max)",
             f"{u.block_share_mean:.1%} ({u.block_share_max:.1%})"),
            (f"records over --cutoff-len {u.cutoff_len} (tokens = chars / 4)",
             f"{u.records_over_cutoff} (longest {u.instruction_tokens_max})"),
        )))
        out.append("")
    if d.warnings:
        out += ["## Warnings", ""]
        out += [f"- {w}" for w in d.warnings]
        out.append("")
    return "\n".join(out)
