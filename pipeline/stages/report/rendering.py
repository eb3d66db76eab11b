"""report.md: the run report's facts as tables a person can scan."""

from collections.abc import Iterable, Sequence

from skillsft.pipeline.teacher.pricing import prices_source
from skillsft.schemas.report import SMOKE_TEST_NOTE, RunReport


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
        reused = [f"- `{t.stage}`: {t.calls_new} of {t.calls_new + t.calls_from_journal} "
                  f"requests were new; {t.calls_from_journal} came from the journal (their "
                  "prompts, the skill block included, did not change); a run from scratch pays "
                  f"all {t.calls_new + t.calls_from_journal}." for t in report.teacher
                  if t.calls_from_journal]
        out += ["", *reused] if reused else []
        out += ["", "`cost` was paid by the run that made each output; `reused` answers came "
                "from the journal, paid by an earlier run: the corpus cost both. Prices: "
                f"`--prices` where it names the model, else {prices_source()}."]
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
            (f"records over --cutoff-len {u.cutoff_len} (instruction + output tokens, "
             "approximated as above)",
             f"{u.records_over_cutoff} (longest {u.instruction_tokens_max})"),
        )))
        out.append("")
    if d.warnings:
        out += ["## Warnings", ""]
        out += [f"- {w}" for w in d.warnings]
        out.append("")
    return "\n".join(out)
