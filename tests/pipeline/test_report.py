"""The run report, built from a small hand-written work dir (corpus, provenance, manifests,
rejects) so every expected number below can be checked by reading the fixture."""

import json
from pathlib import Path
from typing import Any

import pytest

from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.formats.distribution import distribution
from skillsft.pipeline.formats.token_lengths import approx_tokens
from skillsft.pipeline.stages.report import build_report, render_report_md
from skillsft.schemas.report import RunReport

SECRET_URL = "https://user:sekrit-pass@api.example.com/v1?api_key=sk-query-secret"

GENERAL = "## Retrieved Relevant Experience\n\n### General Principles\n- **Look first**: Look."
CLEAN = "\n\n### Clean Skills\n- **Rinse**: Use the sinkbasin.\n  _Apply when: dirty._"
HEAT = "\n\n### Heat Skills\n- **Microwave**: Heat it."
MISTAKES = "\n\n### Mistakes to Avoid\n- **Don't**: Loop.\n  **Instead**: Move on."

# (trajectory id, category, steps, number of records, retrieved block)
TRAJECTORIES: list[tuple[str, str, int, int, str]] = [
    ("env001/a.txt", "clean", 3, 3, GENERAL + CLEAN + MISTAKES),
    ("env002/a.txt", "heat", 2, 2, GENERAL + HEAT),
    ("env003/b.txt", "clean", 2, 2, GENERAL + CLEAN),
    ("env004/c.txt", "pick_and_place", 5, 1, GENERAL + MISTAKES),
]
RECORDS = sum(t[3] for t in TRAJECTORIES)  # 8


def manifest(stage: str, counts: dict[str, int], usages: list[dict[str, Any]] | None = None,
             wall: float = 1.0, **params: str) -> dict[str, Any]:
    return {
        "fingerprint": "f" * 64, "task": stage.title(), "stage": stage,
        "params": {"env": "alfworld", **params}, "versions": {f"prompt/{stage}": "v1"},
        "counts": counts, "teacher": usages or [], "wall_seconds": wall,
        "written_at": "2025-01-01T00:00:00Z",
    }


def usage(stage: str, model: str, new: int, failed: int, cost: float | None) -> dict[str, Any]:
    return {"stage": stage, "model": model, "calls_new": new, "calls_from_journal": 1,
            "calls_failed": failed, "prompt_tokens": 100 * new, "completion_tokens": 10 * new,
            "cost_usd": cost, "failures": {"invalid_json": failed} if failed else {}}


def build_work_dir(root: Path, env: str = "alfworld", *, provenance: bool = True) -> Path:
    """A finished alfworld run in miniature: 4 trajectories, 8 corpus records."""
    root.mkdir(parents=True, exist_ok=True)
    records, lines = [], []
    for traj_id, category, steps, count, block in TRAJECTORIES:
        for turn in range(count):
            instruction = (f"You are an expert agent.\nYour task is to: {category} it\n\n{block}"
                           f"\n\n## Current Progress\nstep {turn} of {traj_id}")
            records.append({"instruction": instruction,
                            "output": f"<think>t{turn}</think>\n<action>go to {turn}</action>"})
            lines.append({"trajectory_id": traj_id, "task_type": category, "turn": turn,
                          "num_steps": steps, "source": "gpt-4o-mini" if turn else "offline"})
    (root / f"{env}_sft_data.json").write_text(json.dumps(records, indent=2))
    (root / f"{env}_sft_data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if provenance:
        (root / f"{env}_sft_provenance.jsonl").write_text(
            "".join(json.dumps(line) + "\n" for line in lines))
    (root / "skill_bank.json").write_text('{"general_skills": []}\n')
    (root / "rejects.jsonl").write_text(
        '{"stage": "parse", "file": "env009/x.txt", "line": 3, "reason": "no_header"}\n'
        "this line is torn\n"
        '{"stage": "parse", "file": "env010/y.txt", "reason": "no_header"}\n'
        '{"stage": "flatten", "file": "distilled_trajectories.json", "reason": "not_admissible"}\n'
    )
    manifests = {
        "processed_trajectories.json": manifest(
            "parse", {"inputs": 12, "outputs": 4, "rejected": 2, "files_seen": 12,
                      "records": 4, "dropped_too_few_files": 2, "envs_mixed": 1},
            wall=2.5),
        "generated_memories.json": manifest(
            "memories", {"inputs": 4, "outputs": 3, "rejected": 1, "dropped_teacher_failed": 1},
            [usage("memories", "gpt-4o-mini", 4, 1, 0.0012)], teacher="openai",
            base_url=SECRET_URL, memory_model="gpt-4o-mini"),
        "skill_bank.json": manifest(
            "aggregate", {"inputs": 3, "outputs": 1, "rejected": 0},
            [usage("aggregate", "gpt-4o-mini", 2, 0, 0.0008)], teacher="openai",
            base_url=SECRET_URL),
        "distilled_trajectories.json": manifest(
            "distill", {"inputs": 4, "outputs": 4, "rejected": 0},
            [usage("distill", "local-llama", 8, 0, None)], wall=10.0, teacher="openai",
            base_url=""),
        f"{env}_sft_data.json": manifest(
            "flatten", {"inputs": 4, "outputs": RECORDS, "rejected": 1,
                        "dropped_not_admissible": 1,
                        "rewritten_buy_now": 0}, wall=0.5),
    }
    folder = root / ".skillsft"
    folder.mkdir(exist_ok=True)
    for name, body in manifests.items():
        (folder / f"{name}.manifest.json").write_text(json.dumps(body))
    return root


@pytest.fixture
def work_dir(tmp_path: Path) -> Path:
    return build_work_dir(tmp_path / "run")


def by_stage(report: RunReport) -> dict[str, Any]:
    return {s.stage: s for s in report.stages}


def test_stages_are_in_pipeline_order_with_in_out_rejected(work_dir: Path) -> None:
    report = build_report(work_dir, "alfworld")
    assert [s.stage for s in report.stages] == ["parse", "memories", "aggregate", "distill",
                                                "flatten"]
    stages = by_stage(report)
    assert (stages["parse"].inputs, stages["parse"].outputs, stages["parse"].rejected) == (12, 4, 2)
    assert (stages["flatten"].inputs, stages["flatten"].outputs) == (4, RECORDS)
    assert stages["flatten"].rejected == 1
    # the fixed counters are read as they are, never guessed from other names
    assert stages["aggregate"].rejected == 0
    assert stages["parse"].counts["envs_mixed"] == 1
    assert report.details.wall_seconds_total == pytest.approx(2.5 + 1 + 1 + 10 + 0.5)


def test_rejects_are_counted_per_stage_and_a_torn_line_is_reported(work_dir: Path) -> None:
    report = build_report(work_dir, "alfworld")
    details = {d.stage: d for d in report.details.stage_details}
    assert details["parse"].rejects == {"no_header": 2}
    assert details["flatten"].rejects == {"not_admissible": 1}
    torn = [w for w in report.details.warnings if "rejects.jsonl:2:" in w]
    assert len(torn) == 1, report.details.warnings


def test_teacher_usage_is_summed_by_model_and_unknown_cost_stays_unknown(work_dir: Path) -> None:
    report = build_report(work_dir, "alfworld")
    models = {m.model: m for m in report.details.models}
    mini = models["gpt-4o-mini"]
    assert mini.stages == ["memories", "aggregate"]
    assert (mini.calls_new, mini.calls_from_journal, mini.calls_failed) == (6, 2, 1)
    assert (mini.prompt_tokens, mini.completion_tokens) == (600, 60)
    assert mini.cost_usd == pytest.approx(0.002)
    assert models["local-llama"].cost_usd is None
    assert {t.stage: t.failures for t in report.teacher}["memories"] == {"invalid_json": 1}


def test_corpus_statistics(work_dir: Path) -> None:
    stats = build_report(work_dir, "alfworld").details.corpus_stats
    assert stats.records == RECORDS
    assert stats.trajectories == 4
    assert stats.records_per_category == {"clean": 5, "heat": 2, "pick_and_place": 1}
    assert stats.trajectories_per_category == {"clean": 2, "heat": 1, "pick_and_place": 1}
    assert stats.steps_per_trajectory.count == 4
    assert (stats.steps_per_trajectory.min, stats.steps_per_trajectory.max) == (2, 5)
    assert stats.steps_per_trajectory.p50 == 2  # nearest rank of [2, 2, 3, 5]
    assert stats.records_by_source == {"offline": 4, "gpt-4o-mini": 4}
    share = stats.section_share
    assert share["### General Principles"] == 1.0
    assert share["### Clean Skills"] == 5 / 8
    assert share["### Heat Skills"] == 2 / 8
    assert share["### Mistakes to Avoid"] == 4 / 8
    assert share["any category skills"] == 7 / 8
    assert "### Cool Skills" not in share  # a section no record has is left out
    assert stats.instruction_chars.count == RECORDS
    assert stats.instruction_tokens_approx.max < stats.instruction_chars.max
    assert "regex" in stats.token_approximation


def test_consistency_checks_pass_on_a_sound_run(work_dir: Path) -> None:
    checks = build_report(work_dir, "alfworld").details.checks
    names = {c.name for c in checks}
    assert "stage 4 records out = corpus records" in names
    assert "corpus records = provenance lines" in names
    assert all(c.ok for c in checks), checks


def test_consistency_checks_catch_a_lost_record(work_dir: Path) -> None:
    path = work_dir / "alfworld_sft_data.json"
    records = json.loads(path.read_text())
    path.write_text(json.dumps(records[:-1]))
    report = build_report(work_dir, "alfworld")
    failed = {c.name: (c.expected, c.actual) for c in report.details.checks if not c.ok}
    assert failed["stage 4 records out = corpus records"] == (RECORDS, RECORDS - 1)
    assert "**NO**" in render_report_md(report)


def test_published_rows_are_checked_against_the_corpus(work_dir: Path) -> None:
    from skillsft.pipeline.stages.publish import PublishOptions, export_local

    export_local(work_dir, "alfworld", PublishOptions())
    report = build_report(work_dir, "alfworld")
    assert report.details.published_rows == {"train": RECORDS}
    published = [c for c in report.details.checks if c.name == "corpus records = rows published"]
    assert published and published[0].ok
    assert by_stage(report)["flatten"].outputs == sum(report.details.published_rows.values())


def test_bad_files_become_warnings_not_crashes(tmp_path: Path) -> None:
    work_dir = build_work_dir(tmp_path / "run")
    (work_dir / ".skillsft" / "broken.json.manifest.json").write_text("{not json")
    corpus = json.loads((work_dir / "alfworld_sft_data.json").read_text())
    corpus[2] = {"instruction": "only half a record"}
    (work_dir / "alfworld_sft_data.json").write_text(json.dumps(corpus))
    report = build_report(work_dir, "alfworld")
    warnings = "\n".join(report.details.warnings)
    assert "broken.json.manifest.json: unreadable manifest" in warnings
    assert "record 2 skipped" in warnings
    assert report.details.corpus_stats.records == RECORDS - 1


def test_an_empty_work_dir_still_reports(tmp_path: Path) -> None:
    report = build_report(tmp_path, "webshop")
    assert report.stages == [] and report.details.corpus_stats.records == 0
    assert any("corpus not found" in w for w in report.details.warnings)
    assert "# skillsft run report: webshop" in render_report_md(report)


def test_missing_provenance_leaves_trajectory_figures_unknown(tmp_path: Path) -> None:
    work_dir = build_work_dir(tmp_path / "run", provenance=False)
    report = build_report(work_dir, "alfworld")
    assert report.details.corpus_stats.trajectories is None
    assert "unknown (no provenance)" in render_report_md(report)


def test_report_json_round_trips_through_the_schema(work_dir: Path) -> None:
    report = build_report(work_dir, "alfworld")
    again = RunReport.model_validate_json(jsonio.dumps(report))
    assert again == report


def test_markdown_has_the_tables(work_dir: Path) -> None:
    text = render_report_md(build_report(work_dir, "alfworld"))
    assert "| stage | output | in | out | rejected | wall s |" in text
    assert "| parse | processed_trajectories.json | 12 | 4 | 2 | 2.5 |" in text
    assert "| gpt-4o-mini | memories, aggregate | 6 | 2 | 1 | 600 | 60 | $0.0020 |" in text
    assert "| ### Clean Skills | 62.5% |" in text
    assert "sekrit" not in text and "sk-query-secret" not in text


def test_nearest_rank_percentiles() -> None:
    d = distribution(list(range(1, 101)))
    assert (d.min, d.p50, d.p90, d.p99, d.max, d.mean) == (1, 50, 90, 99, 100, 50.5)
    assert distribution([]).count == 0
    assert distribution([7]).p99 == 7


def test_token_approximation_counts_words_and_punctuation() -> None:
    assert approx_tokens("go to cabinet 1, then look.") == 8
    assert approx_tokens("") == 0


@pytest.mark.parametrize("text", [
    "look", " look", "look ", "a.b", "..", "__init__ x", "x\ty\nz", "tab\x0b\x0c\x1cfs\x1f",
    "click[< prev], search[red shoes]", "-1.5e3", "ab  cd. e", "\x00\x7f", "café au lait",
    "naïve, ünïcode", "日本語 text", "\u00a0nbsp\u2028sep", "x" * 50 + "." * 50,
])
def test_token_count_is_the_regex_count_for_any_text(text: str) -> None:
    """The ASCII shortcut counts exactly what the documented regex finds (the report's and
    the card's figures must not move with it); non-ASCII text takes the regex itself."""
    from skillsft.pipeline.formats.token_lengths import TOKEN_PIECE

    assert approx_tokens(text) == len(TOKEN_PIECE.findall(text))
    every_ascii = "".join(map(chr, range(128))) + text
    assert approx_tokens(every_ascii) == len(TOKEN_PIECE.findall(every_ascii))

