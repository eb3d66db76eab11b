"""Preference pairs and the skill document through Luigi and the `skillsft` command (issue 14):
the bundled ALFWorld sample (real engine rollouts, three mixed envs), the teacher over HTTP,
re-runs, the report and the export."""

import io
import json
import re
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml
from datasets import load_dataset
from huggingface_hub import HfApi

from skillsft.cli import main
from skillsft.pipeline.stages.publish import PublishOptions, export_local, publish
from skillsft.tasks.targets import manifest_path_for
from skillsft.testing.openai_server import schema_answer
from tests.support.fixtures import TEST_API_KEY
from tests.support.hub_server import running_hub
from tests.tasks.conftest import SAMPLES, manifest_times


def read_pairs(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def won_by_file(truth: Path) -> dict[str, bool]:
    files = json.loads(truth.read_text())["files"]
    if isinstance(files, dict):
        return {name: bool(entry["won"]) for name, entry in files.items()}
    return {entry["file"]: bool(entry["won"]) for entry in files}


def test_run_with_preferences_on_the_bundled_sample(tmp_path: Path) -> None:
    work = tmp_path / "w"
    assert main(["run", "alfworld", "--teacher", "offline", "--work-dir", str(work),
                 "--include-mixed", "--preferences"]) == 0
    pairs = read_pairs(work / "alfworld_preference_pairs.jsonl")
    assert pairs, "the sample has mixed envs: it must give pairs"
    won = won_by_file(SAMPLES / "alfworld" / "truth.json")
    corpus = {(r["instruction"], r["output"])
              for r in json.loads((work / "alfworld_sft_data.json").read_text())}
    for pair in pairs:
        meta = pair["metadata"]
        assert set(pair) == {"prompt", "chosen", "rejected", "metadata"}
        assert won[meta["chosen_trajectory"]] and not won[meta["rejected_trajectory"]]
        assert meta["chosen_action"] != meta["rejected_action"]
        assert pair["chosen"].endswith(f"<action>{meta['chosen_action']}</action>")
        assert pair["rejected"].endswith(f"<action>{meta['rejected_action']}</action>")
        # with --include-mixed the winner is in the corpus: the pair is one of its records
        assert (pair["prompt"], pair["chosen"]) in corpus
    keys = {(p["metadata"]["anchor_id"], p["metadata"]["chosen_action"],
             p["metadata"]["rejected_action"]) for p in pairs}
    assert len(keys) == len(pairs)

    report = json.loads((work / "report.json").read_text())
    [stage] = [s for s in report["stages"] if s["stage"] == "preferences"]
    assert stage["counts"]["pairs"] == len(pairs) and stage["counts"]["anchors"] > 0
    assert stage["counts"]["groups_both_outcomes"] == 3
    skill_doc = work / "skills" / "alfworld-skills" / "SKILL.md"
    assert skill_doc.read_text().startswith("---\nname: alfworld-skills\n")

    before = manifest_times(work), (work / "alfworld_preference_pairs.jsonl").stat().st_mtime_ns
    time.sleep(0.01)
    assert main(["run", "alfworld", "--teacher", "offline", "--work-dir", str(work),
                 "--include-mixed", "--preferences"]) == 0
    assert (manifest_times(work),
            (work / "alfworld_preference_pairs.jsonl").stat().st_mtime_ns) == before

    export = export_local(work, "alfworld", PublishOptions())
    files = [path for path, _ in export.files()]
    assert "skills/alfworld-skills/SKILL.md" in files
    assert any(f.startswith("alfworld_preferences/train-") for f in files)
    shards = sorted(str(p) for p in (work / "hub" / "alfworld_preferences").glob("*.parquet"))
    dpo = load_dataset("parquet", data_files=shards, split="train")
    assert dpo.column_names == ["prompt", "chosen", "rejected"]
    assert dpo[0]["prompt"] == pairs[0]["prompt"] and len(dpo) == len(pairs)
    card = (work / "hub" / "README.md").read_text()
    assert "config_name: alfworld_preferences" in card


_ASKED_ACTION = re.compile(r"Steps to write a thought for:\n\n.*\nAction: (?P<action>[^\n]*)",
                           re.DOTALL)
_ASKED_INDEX = re.compile(r"exactly one thought for each step_index in \[(\d+)\]")


def action_echoing_responder(body: dict[str, Any]) -> str:
    """A thought that names the action the request asks about, so a mixed-up answer shows."""
    text = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
    action, index = _ASKED_ACTION.search(text), _ASKED_INDEX.search(text)
    if not (action and index):
        return schema_answer(body)
    thought = f"Here I decide to do: {action.group('action')}."
    return json.dumps({"thoughts": [{"step_index": int(index.group(1)), "thought": thought}]})


def preferences(work: Path, base_url: str, *extra: str) -> int:
    bank = work.parent / "bank.json"
    if not bank.exists():
        assert main(["run", "alfworld", "--teacher", "offline", "--work-dir",
                     str(work.parent / "bankrun")]) == 0
        bank.write_bytes((work.parent / "bankrun" / "skill_bank.json").read_bytes())
    return main(["preferences", "alfworld", "--rollout-dir", str(SAMPLES / "alfworld"),
                 "--skill-bank", str(bank), "--output", str(work / "pairs.jsonl"),
                 "--teacher", "openai", "--base-url", base_url, *extra])


def test_preferences_over_http_rerun_pays_nothing(tmp_path: Path, server_factory,
                                                  monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", TEST_API_KEY)
    server = server_factory(responder=action_echoing_responder)
    work = tmp_path / "w"
    assert preferences(work, server.base_url) == 0
    pairs = read_pairs(work / "pairs.jsonl")
    assert pairs and server.stats.total > 0
    for pair in pairs:
        meta = pair["metadata"]
        assert f"Here I decide to do: {meta['chosen_action']}." in pair["chosen"]
        assert f"Here I decide to do: {meta['rejected_action']}." in pair["rejected"]
        assert meta["source"].startswith("openai")
    output = (work / "pairs.jsonl").read_bytes()
    paid = server.stats.total

    assert preferences(work, server.base_url) == 0  # up to date: nothing runs
    assert preferences(work, server.base_url, "--force", "preferences") == 0  # journal answers
    assert server.stats.total == paid
    assert (work / "pairs.jsonl").read_bytes() == output
    for path in work.rglob("*"):
        if path.is_file():
            assert TEST_API_KEY.encode() not in path.read_bytes(), path

    # another model is other work: it is asked again
    assert preferences(work, server.base_url, "--model", "another-model") == 0
    assert server.stats.total > paid


def test_real_alfworld_sample_gives_pairs(tmp_path: Path, shared_dir: Path) -> None:
    sample = shared_dir / "data" / "rollouts" / "alfworld-sample"
    if not sample.is_dir():
        pytest.skip("../shared/data/rollouts/alfworld-sample is not present")
    bank = shared_dir / "data" / "skillrl-memory" / "alfworld" / "claude_style_skills.json"
    output = tmp_path / "pairs.jsonl"
    assert main(["preferences", "alfworld", "--rollout-dir", str(sample), "--skill-bank",
                 str(bank), "--output", str(output), "--teacher", "offline"]) == 0
    pairs = read_pairs(output)
    won = won_by_file(sample / "truth.json")
    assert pairs
    assert all(won[p["metadata"]["chosen_trajectory"]] for p in pairs)
    assert not any(won[p["metadata"]["rejected_trajectory"]] for p in pairs)
    assert all("Systematic Exploration" in p["prompt"] for p in pairs)  # the released bank


def test_preferences_without_any_mixed_env_is_an_error(tmp_path: Path, capsys) -> None:
    bank = tmp_path / "bank.json"
    bank.write_text(json.dumps({"general_skills": [], "task_specific_skills": {},
                                "common_mistakes": []}))
    rollouts = tmp_path / "r"
    (rollouts / "env000").mkdir(parents=True)
    for name in ("test0.txt", "test1.txt", "test2.txt"):  # all three wins of the sample's env
        source = SAMPLES / "alfworld" / "env000" / name
        (rollouts / "env000" / name).write_bytes(source.read_bytes())
    won = won_by_file(SAMPLES / "alfworld" / "truth.json")
    assert all(won[f"env000/{n}"] for n in ("test0.txt", "test1.txt", "test2.txt"))
    code = main(["preferences", "alfworld", "--rollout-dir", str(rollouts), "--skill-bank",
                 str(bank), "--output", str(tmp_path / "o" / "pairs.jsonl"), "--teacher",
                 "offline"])
    assert code == 1
    assert not (tmp_path / "o" / "pairs.jsonl").exists()


def test_publish_uploads_pairs_config_and_skill_document(tmp_path: Path, monkeypatch) -> None:
    work = tmp_path / "w"
    assert main(["run", "alfworld", "--teacher", "offline", "--work-dir", str(work),
                 "--preferences"]) == 0
    pairs = read_pairs(work / "alfworld_preference_pairs.jsonl")
    monkeypatch.setenv("HF_TOKEN", "hf_TESTtokenForPreferences0123456789")
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    with running_hub() as hub:
        hub.seed_repo("someone/agent", {
            "alfworld_preferences/train-00000-of-00002.parquet": b"stale shard"})
        options = PublishOptions(retry_wait_seconds=0.0, allow_offline=True)
        publish(work, "alfworld", "someone/agent", options, api=HfApi(endpoint=hub.url))
        [commit] = hub.commits
        files = hub.files("someone/agent")
    assert sorted(commit.added) == ["README.md",
                                    "alfworld/metadata/train-00000-of-00001.parquet",
                                    "alfworld/train-00000-of-00001.parquet",
                                    "alfworld_conversational/train-00000-of-00001.parquet",
                                    "alfworld_preferences/train-00000-of-00001.parquet",
                                    "alfworld_preferences_conversational/"
                                    "train-00000-of-00001.parquet",
                                    "alfworld_trajectories/train-00000-of-00001.parquet",
                                    "skills/alfworld-skills/SKILL.md",
                                    "skills/alfworld-skills/skill_bank.json"]
    assert commit.deleted == ["alfworld_preferences/train-00000-of-00002.parquet"]
    table = pq.read_table(io.BytesIO(files["alfworld_preferences/train-00000-of-00001.parquet"]))
    assert table.column_names == ["prompt", "chosen", "rejected"]
    assert table.column("rejected").to_pylist() == [p["rejected"] for p in pairs]
    assert files["skills/alfworld-skills/SKILL.md"] == (
        work / "skills" / "alfworld-skills" / "SKILL.md").read_bytes()
    card = files["README.md"].decode()
    configs = yaml.safe_load(card.split("---", 2)[1])["configs"]
    assert sorted(c["config_name"] for c in configs) == [
        "alfworld", "alfworld_conversational", "alfworld_metadata", "alfworld_preferences",
        "alfworld_preferences_conversational", "alfworld_trajectories", "default"]
    bank = files["skills/alfworld-skills/skill_bank.json"]
    assert bank == (work / "skill_bank.json").read_bytes()
    assert "## Config `alfworld_preferences`" in card


def test_pair_prompts_follow_retrieved_skills_and_stale_pairs_are_retired(tmp_path: Path) -> None:
    """With --skills retrieve a pair's prompt is still the corpus record's instruction; a later
    run without --preferences retires the old pairs so they are neither reported nor published."""
    work = tmp_path / "w"
    args = ["run", "alfworld", "--teacher", "offline", "--work-dir", str(work),
            "--include-mixed", "--skills", "retrieve", "--skill-threshold", "0.2"]
    assert main([*args, "--preferences"]) == 0
    pairs = read_pairs(work / "alfworld_preference_pairs.jsonl")
    corpus = {(r["instruction"], r["output"])
              for r in json.loads((work / "alfworld_sft_data.json").read_text())}
    assert pairs and all((p["prompt"], p["chosen"]) in corpus for p in pairs)

    assert main([*args, "--history", "3"]) == 0
    report = json.loads((work / "report.json").read_text())
    assert "preferences" not in {s["stage"] for s in report["stages"]}
    assert not manifest_path_for(work / "alfworld_preference_pairs.jsonl").exists()
