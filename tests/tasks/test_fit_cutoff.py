"""`--fit-cutoff`: `--cutoff-len` as a guarantee. Records over the cutoff are rendered again
with fewer history pairs until they fit, or dropped and listed; without the flag the corpus
and the fingerprints are what they were."""

import json
from pathlib import Path

import pytest

from skillsft.cli import main
from skillsft.pipeline.formats.token_lengths import approx_tokens
from skillsft.tasks.targets import iter_manifests


def run(work: Path, *extra: str) -> list[dict]:
    assert main(["run", "alfworld", "--teacher", "offline", "--work-dir", str(work),
                 *extra]) == 0
    return json.loads((work / "alfworld_sft_data.json").read_text())


def tokens(record: dict) -> int:
    return approx_tokens(record["instruction"]) + approx_tokens(record["output"])


def test_records_fit_or_are_listed_and_the_default_is_unchanged(tmp_path: Path) -> None:
    plain = run(tmp_path / "plain")
    cutoff = sorted(tokens(r) for r in plain)[len(plain) // 4]  # most records are over it
    fitted = run(tmp_path / "fit", "--fit-cutoff", "--cutoff-len", str(cutoff))

    assert fitted and all(tokens(r) <= cutoff for r in fitted)
    manifests = {name: m for name, m in iter_manifests(tmp_path / "fit")}
    counts = manifests["alfworld_sft_data.json"]["counts"]
    assert counts["fitted_to_cutoff"] > 0
    rejects = [json.loads(line) for line in
               (tmp_path / "fit" / "flatten_rejects.jsonl").read_text().splitlines()]
    over = [r for r in rejects if r["reason"] == "over_cutoff"]
    assert len(over) == counts.get("dropped_over_cutoff", 0)
    assert len(fitted) + len(over) == len(plain)  # every record kept (maybe shorter) or listed
    assert all(f"--cutoff-len {cutoff}" in r["detail"] for r in over)
    # same outputs in the same order, less the dropped ones; histories only ever shorter
    kept = {r["output"] for r in fitted}
    assert [r["output"] for r in plain if r["output"] in kept] == [r["output"] for r in fitted]
    provenance = (tmp_path / "fit" / "alfworld_sft_provenance.jsonl").read_text().splitlines()
    assert len(provenance) == len(fitted)

    again = run(tmp_path / "again", "--cutoff-len", str(cutoff))  # no --fit-cutoff
    assert again == plain
    fingerprint = {n: m["fingerprint"] for n, m in iter_manifests(tmp_path / "plain")}
    assert fingerprint["alfworld_sft_data.json"] == dict(
        (n, m["fingerprint"]) for n, m in iter_manifests(tmp_path / "again"))[
        "alfworld_sft_data.json"]


def test_a_cutoff_no_record_can_fit_is_one_line_before_any_work(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "alfworld", "--teacher", "offline", "--work-dir", str(tmp_path / "w"),
                 "--fit-cutoff", "--cutoff-len", "20"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "--cutoff-len 20" in err[0] and "raise --cutoff-len" in err[0]
    assert not (tmp_path / "w").exists()
