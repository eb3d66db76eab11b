"""True per-record metadata, end to end: the ids of the skills and mistakes each published
record's instruction shows, under `--skills category`, `--skills retrieve` and `--skill-bank`
(the released ALFWorld bank), and the bank itself in the export, named by the card's hash."""

import hashlib
import json
from pathlib import Path

import pytest
import yaml
from datasets import load_dataset

from skillsft.cli import main
from skillsft.pipeline.stages.corpus_metrics import experience_block
from skillsft.pipeline.stages.publish import PublishOptions, export_local

BANK_IN_EXPORT = Path("skills") / "alfworld-skills" / "skill_bank.json"


def run_and_export(work: Path, *extra: str) -> list[dict]:
    assert main(["run", "alfworld", "--teacher", "offline", "--work-dir", str(work),
                 *extra]) == 0
    export_local(work, "alfworld", PublishOptions())
    return list(load_dataset(str(work / "hub"), "alfworld_metadata", split="train"))


def item_lines(bank: dict) -> dict[str, str]:
    """id -> the bold head of the line the block shows for it."""
    lines = {s["skill_id"]: f"- **{s['title'].strip()}**:" for s in bank["general_skills"]}
    for skills in bank.get("task_specific_skills", {}).values():
        lines.update({s["skill_id"]: f"- **{s['title'].strip()}**:" for s in skills})
    for mistake in bank["common_mistakes"]:
        lines[mistake["mistake_id"]] = "- **Don't**: " + mistake["description"].strip()[:20]
    return lines


def assert_ids_are_what_the_block_shows(rows: list[dict], bank: dict) -> None:
    lines = item_lines(bank)
    assert rows
    for row in rows:
        block = experience_block(row["instruction"])
        assert row["skill_ids"], row["instruction"][:300]
        # one id per item line of the block, and each id's line is in it
        assert len(row["skill_ids"]) == block.count("\n- **")
        for skill_id in row["skill_ids"]:
            assert lines[skill_id] in block, (skill_id, lines[skill_id])


def test_the_released_skill_bank_gives_true_ids_and_is_exported(
        tmp_path: Path, shared_dir: Path) -> None:
    released = shared_dir / "data" / "skillrl-memory" / "alfworld" / "claude_style_skills.json"
    work = tmp_path / "w"
    rows = run_and_export(work, "--skill-bank", str(released))

    assert_ids_are_what_the_block_shows(rows, json.loads(released.read_text()))
    assert len({tuple(r["skill_ids"]) for r in rows}) > 1  # categories differ
    exported = work / "hub" / BANK_IN_EXPORT
    assert exported.read_bytes() == released.read_bytes()
    digest = hashlib.sha256(released.read_bytes()).hexdigest()
    card = (work / "hub" / "README.md").read_text()
    assert f"Skill bank sha256: `{digest}`" in card
    assert json.loads((work / "report.json").read_text())["details"]["skill_bank_sha256"] == digest


def test_retrieved_skills_are_the_ids_of_the_retrieved_block(tmp_path: Path) -> None:
    work = tmp_path / "w"
    rows = run_and_export(work, "--skills", "retrieve", "--skill-threshold", "0.1")
    bank = json.loads((work / "skill_bank.json").read_text())
    assert_ids_are_what_the_block_shows(rows, bank)
    by_category = {c: [s["skill_id"] for s in skills]
                   for c, skills in bank["task_specific_skills"].items()}
    task_ids = {i for ids in by_category.values() for i in ids}
    shown = [[i for i in r["skill_ids"] if i in task_ids] for r in rows]
    # what was retrieved for the task, not the category's list that `--skills category` shows
    assert any(ids != by_category.get(r["category"], []) for ids, r in zip(shown, rows,
                                                                           strict=True))
    assert (work / "hub" / BANK_IN_EXPORT).read_bytes() == (work / "skill_bank.json").read_bytes()


def test_category_mode_ids_and_the_provenance_line(tmp_path: Path) -> None:
    work = tmp_path / "w"
    rows = run_and_export(work)
    assert_ids_are_what_the_block_shows(rows, json.loads((work / "skill_bank.json").read_text()))
    provenance = [json.loads(line) for line in
                  (work / "alfworld_sft_provenance.jsonl").read_text().splitlines()]
    assert [p["skill_ids"] for p in provenance] == [r["skill_ids"] for r in rows]
    meta = yaml.safe_load((work / "hub" / "README.md").read_text().split("---", 2)[1])
    assert meta["annotations_creators"] == ["machine-generated"]
    assert meta["source_datasets"] == ["original"]
    assert meta["license"] == "other" and meta["license_name"] and meta["license_link"]


def test_a_license_that_is_not_an_spdx_id_is_refused_before_any_work(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["run", "alfworld", "--teacher", "offline", "--work-dir", str(tmp_path / "w"),
              "--repo-id", "someone/x", "--license", "MIT-ish"])
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert "--license" in err and "SPDX" in err
    assert not (tmp_path / "w").exists()


def test_a_tokenizer_that_does_not_load_is_refused_before_any_work(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["run", "alfworld", "--teacher", "offline", "--work-dir", str(tmp_path / "w"),
              "--tokenizer", str(tmp_path / "no-such-tokenizer")])
    assert raised.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(lines) == 1 and "--tokenizer" in lines[0] and "tokenizer.json" in lines[0]
    assert not (tmp_path / "w").exists()
