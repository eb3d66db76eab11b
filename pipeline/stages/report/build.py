"""The run report: one readable account of a work dir, built from the files the stages left.

Everything comes from disk (stage manifests, rejects.jsonl, the corpus and its provenance, the
exported parquet shards), never from counters kept in a process, so the report of a resumed or
partly re-run pipeline is as right as that of a fresh one, and `skillsft report` can be run on
any work dir after the fact. Each file is read once, as a stream, into the tallies of
statistics.py, so the report holds counters, not the corpus.

Every stage's manifest holds the fixed counters `inputs`, `outputs` and `rejected` of its
result (stages/result.py), which the stage table shows as they are; the stage's other counters
are listed by name beside them.

Nothing here raises on a bad file: an unreadable manifest, reject line, corpus record or
provenance line becomes a warning naming the file and line, and the report says so.
"""

import logging
import time
from collections.abc import Sequence
from pathlib import Path

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.formats.token_lengths import DEFAULT_CUTOFF_LEN
from skillsft.pipeline.stages.corpus_bank import corpus_bank
from skillsft.pipeline.stages.corpus_metrics import skill_use
from skillsft.pipeline.stages.report.readers import (
    DISTILLED_FILE,
    REJECTS_FILE,
    Provenance,
    Read,
    conversation_dicts,
    corpus_file,
    corpus_records,
    jsonl_records,
    load_manifests,
    provenance_file,
    published_rows,
)
from skillsft.pipeline.stages.report.statistics import (
    CorpusTally,
    ProvenanceTally,
    RejectTally,
    consistency_checks,
    stage_reports,
    usage_by_model,
)
from skillsft.pipeline.stages.skill_selection import SkillSelection
from skillsft.schemas.reject import Reject
from skillsft.schemas.report import RunReport, RunReportDetails, SkillUseReport, StageDetail

log = logging.getLogger("skillsft.report")


def skill_use_report(work_dir: Path, corpus: "CorpusTally",
                     selection: str = "") -> SkillUseReport | None:
    """Skill use from the distilled conversations (read as a stream), lengths from the corpus
    (against --cutoff-len the card's figure: instruction + output tokens); None without
    conversations (an unreadable file is a warning, not a crash)."""
    path = work_dir / DISTILLED_FILE
    if not path.is_file():
        return None
    failed: list[str] = []
    use = skill_use(conversation_dicts(path, failed))
    if failed:
        if failed[0]:
            log.warning(failed[0])
        return None
    lengths = corpus.lengths.result()
    return SkillUseReport(
        selection=selection, thoughts=use.thoughts, thoughts_with_skills_shown=use.with_block,
        share_naming_a_shown_skill=use.share(use.by_title),
        share_overlapping_a_shown_skill=use.share(use.by_overlap),
        block_share_mean=lengths.block_share_mean, block_share_max=lengths.block_share_max,
        cutoff_len=corpus.cutoff_len, instruction_tokens_max=max(corpus.tokens, default=0),
        records_over_cutoff=corpus.over_cutoff)


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
    rejects, rejects_read = RejectTally(), Read()
    for path in sorted(work_dir.glob(f"*{REJECTS_FILE}")):  # rejects.jsonl, <stage>_rejects.jsonl
        for reject in jsonl_records(path, Reject, rejects_read):
            rejects.add(reject, path.name)
    corpus, corpus_read = CorpusTally(spec, cutoff_len), Read()
    for _, record in corpus_records(work_dir, env, corpus_read):
        corpus.add(record)
    if not corpus_read.found:  # a file broken midway counts as no corpus, as it always did
        corpus, corpus_read.count = CorpusTally(spec, cutoff_len), 0
    provenance, provenance_read = ProvenanceTally(), Read()
    for line in jsonl_records(work_dir / provenance_file(env), Provenance, provenance_read):
        provenance.add(line)
    warnings = [*manifests.warnings, *rejects_read.warnings, *corpus_read.warnings,
                *provenance_read.warnings]
    if provenance_read.found and provenance.lines != corpus.records:
        warnings.append(
            f"{work_dir / provenance_file(env)}: {provenance.lines} lines for "
            f"{corpus.records} corpus records; per-trajectory statistics may be off"
        )
    elif not provenance_read.found:
        warnings.append(
            f"{work_dir / provenance_file(env)}: not found; no per-trajectory statistics"
        )
    for warning in warnings:
        log.warning(warning)

    stages, stage_details, usage = stage_reports(manifests.items, rejects.by_stage)
    for detail in stage_details:
        detail.rejects_file = rejects.files.get(detail.stage)
    rows = published_rows(work_dir, env)
    stats = corpus.stats(provenance if provenance_read.found else None)
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
        checks=consistency_checks(work_dir, env, corpus.records, stages, provenance_read, rows),
        warnings=warnings,
        smoke_test=offline,
        skill_use=skill_use_report(work_dir, corpus, selection_of(stage_details)),
    )
    return RunReport(
        env=env,
        stages=stages,
        teacher=usage,
        corpus={"file": corpus_file(env), "records": stats.records,
                "trajectories": stats.trajectories},
        details=details,
    )
