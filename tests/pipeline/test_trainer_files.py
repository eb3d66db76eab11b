"""What a trainer takes from the export: the metadata config, LLaMA-Factory's dataset_info.json,
token lengths and the card's fields, read back with `datasets` as a trainer would."""

import json
from pathlib import Path

import pytest
import yaml
from datasets import load_dataset

from skillsft.pipeline.errors import ConfigError
from skillsft.pipeline.stages.publish import PublishOptions, export_local
from tests.pipeline.test_report import TRAJECTORIES, build_work_dir

BANK = {
    "general_skills": [{"skill_id": "gen_001", "title": "Look first", "principle": "Look."},
                       {"skill_id": "gen_002", "title": "Check", "principle": "Check."}],
    "task_specific_skills": {
        "clean": [{"skill_id": "cln_001", "title": "Sink", "principle": "Use the sink."}],
        "heat": [{"skill_id": "hot_001", "title": "Microwave", "principle": "Heat it."}],
    },
    "common_mistakes": [{"mistake_id": "err_001", "description": "Looping",
                         "how_to_avoid": "Move on."}],
}
CITATION = "@misc{rollouts2025,\n  title = {Agent rollouts},\n  year = {2025}\n}"


@pytest.fixture
def work_dir(tmp_path: Path) -> Path:
    work = build_work_dir(tmp_path / "run")
    (work / "skill_bank.json").write_text(json.dumps(BANK))
    return work


def card_meta(text: str) -> dict:
    return yaml.safe_load(text.split("---", 2)[1])


def test_metadata_config_loads_row_aligned_with_provenance_and_shown_skills(work_dir):
    export_local(work_dir, "alfworld", PublishOptions(validation_fraction=0.25))
    alpaca = load_dataset(str(work_dir / "hub"), "alfworld")
    meta = load_dataset(str(work_dir / "hub"), "alfworld_metadata")

    assert sorted(meta) == ["train", "validation"]
    assert meta["train"].column_names == ["instruction", "output", "environment", "category",
                                          "trajectory_id", "step", "skill_ids"]
    expected_ids = {"clean": ["gen_001", "gen_002", "cln_001", "err_001"],
                    "heat": ["gen_001", "gen_002", "hot_001", "err_001"],
                    "pick_and_place": ["gen_001", "gen_002", "err_001"]}
    steps = {t[0]: list(range(t[3])) for t in TRAJECTORIES}
    categories = {t[0]: t[1] for t in TRAJECTORIES}
    for split in ("train", "validation"):
        assert meta[split]["instruction"] == alpaca[split]["instruction"]  # row-aligned
        assert meta[split]["output"] == alpaca[split]["output"]
        for row in meta[split]:
            assert row["environment"] == "alfworld"
            assert row["category"] == categories[row["trajectory_id"]]
            assert row["skill_ids"] == expected_ids[row["category"]]
            assert f"step {row['step']} of {row['trajectory_id']}" in row["instruction"]
            steps[row["trajectory_id"]].remove(row["step"])
    assert all(not left for left in steps.values())  # every record exactly once


def test_dataset_info_json_feeds_llama_factory_style_loading(work_dir):
    export = export_local(work_dir, "alfworld", PublishOptions(validation_fraction=0.25))
    info = json.loads(export.dataset_info.read_text())

    # one entry per config and split, never one per shard
    assert sorted(info) == ["skillsft_alfworld", "skillsft_alfworld_metadata",
                            "skillsft_alfworld_metadata_validation",
                            "skillsft_alfworld_validation"]
    total = 0
    for name, entry in info.items():
        assert entry["formatting"] == "alpaca"
        assert entry["hf_hub_url"] == str(export.root.resolve())  # no repo id: the export
        columns = entry["columns"]
        data = load_dataset(entry["hf_hub_url"], entry["subset"], split=entry["split"])
        assert {columns["prompt"], columns["response"]} <= set(data.column_names)
        total += data.num_rows if "metadata" not in name else 0
    assert total == export.rows
    # entries of other datasets in the file are kept when the export is redone
    info["my_other_data"] = {"file_name": "x.json"}
    export.dataset_info.write_text(json.dumps(info))
    export_local(work_dir, "alfworld", PublishOptions(repo_id="someone/alf-sft"))
    again = json.loads(export.dataset_info.read_text())
    assert sorted(again) == ["my_other_data", "skillsft_alfworld", "skillsft_alfworld_metadata"]
    assert again["skillsft_alfworld"]["hf_hub_url"] == "someone/alf-sft"


def test_card_fields_license_name_citation_load_line_and_no_empty_stage_rows(work_dir):
    options = PublishOptions(license="cc-by-4.0", pretty_name="ALFWorld skills SFT",
                             repo_id="someone/alf-sft", citation=CITATION)
    export_local(work_dir, "alfworld", options)
    text = (work_dir / "hub" / "README.md").read_text()
    meta = card_meta(text)

    assert meta["license"] == "cc-by-4.0" and meta["pretty_name"] == "ALFWorld skills SFT"
    assert 'load_dataset("someone/alf-sft", "alfworld")' in text
    assert 'load_dataset("someone/alf-sft", "alfworld_metadata")' in text
    assert "<repo id>" not in text and "<user>/<dataset>" not in text
    assert CITATION in text and "```bibtex" in text
    assert "SFTTrainer" in text and '"hf_hub_url": "someone/alf-sft"' in text
    assert "gpt-4o-mini" in text and "local-llama" in text  # the teacher models
    assert "| report |" not in text and "| 0 | 0 | 0 |" not in text
    assert "Records dropped by each check: not_admissible 1." in text
    assert "Token lengths (estimated, not a tokenizer" in text
    assert "Records longer than a cutoff of 8192 tokens" in text
    # re-exporting rewrites the usage section, never duplicates it
    export_local(work_dir, "alfworld", options)
    again = (work_dir / "hub" / "README.md").read_text()
    assert again.count("## Usage") == 1 and again.count("<!-- skillsft:usage:start -->") == 1


def test_token_lengths_in_the_students_tokens_with_a_local_tokenizer(work_dir, tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    records = json.loads((work_dir / "alfworld_sft_data.json").read_text())
    model = tokenizers.models.WordLevel(unk_token="[UNK]")
    tokenizer = tokenizers.Tokenizer(model)
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    trainer = tokenizers.trainers.WordLevelTrainer(special_tokens=["[UNK]"])
    tokenizer.train_from_iterator([r["instruction"] + " " + r["output"] for r in records],
                                  trainer)
    folder = tmp_path / "tiny-student"
    folder.mkdir()
    tokenizer.save(str(folder / "tokenizer.json"))
    counts = [len(tokenizer.encode(r["instruction"]).ids) for r in records]
    outputs = [len(tokenizer.encode(r["output"]).ids) for r in records]
    cutoff = sorted(i + o for i, o in zip(counts, outputs, strict=True))[4]

    export = export_local(work_dir, "alfworld",
                          PublishOptions(tokenizer=str(folder), cutoff_len=cutoff))

    lengths = export.token_lengths
    assert lengths.exact and lengths.method == "tiny-student"
    assert lengths.instruction.max == max(counts) and lengths.output.max == max(outputs)
    assert lengths.over_cutoff == sum(i + o > cutoff for i, o in zip(counts, outputs,
                                                                      strict=True)) == 3
    text = (work_dir / "hub" / "README.md").read_text()
    assert "Token lengths (tokenizer `tiny-student`)" in text and str(tmp_path) not in text
    assert f"longer than a cutoff of {cutoff} tokens (instruction + output): 3." in text


def test_a_tokenizer_that_cannot_be_found_is_a_one_line_config_error(work_dir, tmp_path):
    with pytest.raises(ConfigError, match="--tokenizer"):
        export_local(work_dir, "alfworld",
                     PublishOptions(tokenizer=str(tmp_path / "no-such-model")))
