"""The report's statistics, each computed in one pass over its file.

The corpus, its provenance and the rejects files can hold every record of a run; the tallies
here take one record at a time and keep counters (and one or two numbers per record for the
percentiles), never the records.
"""

import logging
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from skillsft.pipeline.envs import EnvSpec
from skillsft.pipeline.formats.distribution import distribution
from skillsft.pipeline.formats.render import BLOCK_TITLE
from skillsft.pipeline.formats.token_lengths import TOKEN_APPROXIMATION, approx_tokens
from skillsft.pipeline.stages.corpus_metrics import InstructionLengthTally
from skillsft.pipeline.stages.report.readers import Provenance, Read, corpus_lines_file
from skillsft.pipeline.stages.result import INPUTS, OUTPUTS, REJECTED
from skillsft.schemas.conversation import AlpacaRecord
from skillsft.schemas.reject import Reject
from skillsft.schemas.report import (
    ConsistencyCheck,
    CorpusStats,
    ModelUsage,
    StageDetail,
    StageReport,
    TeacherUsage,
)
from skillsft.schemas.stages import CORPUS_STAGES

log = logging.getLogger("skillsft.report")

STAGE_ORDER = CORPUS_STAGES

# How tokens are approximated, stated once so the report and its readers agree on it.
def section_headings(spec: EnvSpec) -> list[str]:
    """The retrieved-experience headings a record of this environment can carry."""
    return [
        BLOCK_TITLE,
        "### General Principles",
        *(f"### {spec.label(category)} Skills" for category in spec.categories),
        "### Mistakes to Avoid",
    ]


class CorpusTally:
    """Sizes and shapes of the corpus, a record at a time (`corpus_stats` of the records)."""

    def __init__(self, spec: EnvSpec, cutoff_len: int) -> None:
        self.headings = section_headings(spec)
        self.category_headings = [f"### {spec.label(c)} Skills" for c in spec.categories]
        self.chars: list[int] = []
        self.tokens: list[int] = []
        self.present: Counter[str] = Counter()
        self.any_category = 0
        self.lengths = InstructionLengthTally()
        # Against --cutoff-len: instruction + output tokens, the card's figure (token_lengths)
        self.cutoff_len = cutoff_len
        self.over_cutoff = 0

    @property
    def records(self) -> int:
        return len(self.chars)

    def add(self, record: AlpacaRecord) -> None:
        text = record.instruction
        self.chars.append(len(text))
        tokens = approx_tokens(text)
        self.tokens.append(tokens)
        self.over_cutoff += tokens + approx_tokens(record.output) > self.cutoff_len
        for heading in self.headings:
            self.present[heading] += heading in text
        self.any_category += any(h in text for h in self.category_headings)
        self.lengths.add(text)

    def stats(self, provenance: "ProvenanceTally | None") -> CorpusStats:
        """Per-trajectory figures need the provenance lines (None: not there)."""
        stats = CorpusStats(
            records=self.records,
            instruction_chars=distribution(self.chars),
            instruction_tokens_approx=distribution(self.tokens),
            token_approximation=TOKEN_APPROXIMATION,
        )
        if self.records:
            for heading in self.headings:
                present = self.present[heading]
                if present or heading in (BLOCK_TITLE, "### General Principles"):
                    stats.section_share[heading] = round(present / self.records, 4)
            stats.section_share["any category skills"] = round(
                self.any_category / self.records, 4)
        if provenance is not None and provenance.lines:
            provenance.fill(stats)
        return stats


class ProvenanceTally:
    """Per-trajectory and per-category counts from the provenance lines, a line at a time."""

    def __init__(self) -> None:
        self.lines = 0
        self.steps: dict[str, int] = {}
        self.trajectory_category: dict[str, str] = {}
        self.per_category: Counter[str] = Counter()
        self.by_source: Counter[str] = Counter()

    def add(self, line: Provenance) -> None:
        self.lines += 1
        self.steps[line.trajectory_id] = line.num_steps
        self.trajectory_category[line.trajectory_id] = line.task_type
        self.per_category[line.task_type] += 1
        self.by_source[line.source] += 1

    def fill(self, stats: CorpusStats) -> None:
        stats.trajectories = len(self.steps)
        stats.records_per_category = dict(sorted(self.per_category.items()))
        per_trajectory = Counter(self.trajectory_category.values())
        stats.trajectories_per_category = dict(sorted(per_trajectory.items()))
        stats.steps_per_trajectory = distribution(list(self.steps.values()))
        stats.records_by_source = dict(sorted(self.by_source.items()))


class RejectTally:
    """Reject reasons per stage, and the file each stage's rejects were read from."""

    def __init__(self) -> None:
        self.by_stage: dict[str, Counter[str]] = defaultdict(Counter)
        self.files: dict[str, str] = {}

    def add(self, reject: Reject, file_name: str) -> None:
        self.by_stage[reject.stage][reject.reason] += 1
        self.files[reject.stage] = file_name


# -- stages and teacher usage -----------------------------------------------------------------


def stage_rank(stage: str) -> int:
    return STAGE_ORDER.index(stage) if stage in STAGE_ORDER else len(STAGE_ORDER)


def int_counts(raw: Any) -> dict[str, int]:
    if not isinstance(raw, dict):
        return {}
    return {str(k): v for k, v in raw.items() if isinstance(v, int) and not isinstance(v, bool)}


def stage_reports(
    manifests: Iterable[tuple[str, dict[str, Any]]], rejects_by_stage: Mapping[str, Counter[str]]
) -> tuple[list[StageReport], list[StageDetail], list[TeacherUsage]]:
    """A row per manifest, in stage order, with the reject reasons counted per stage."""
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
    provenance: Read,
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
        check("corpus records = provenance lines", records, provenance.count)
    if rows:
        check("corpus records = rows published", records, sum(rows.values()))
    return checks
