"""Each published config against the column and type layout its trainer documents, read back
from the local Hub mirror with `datasets` the way the trainers load them:

- TRL (docs "Dataset formats"): conversational prompt-completion = `prompt` (list of user
  messages) + `completion` (list of assistant messages); conversational language modeling =
  `messages` (system/user/assistant); preference = `prompt`, `chosen`, `rejected`, as strings
  (standard) or message lists (conversational); a message is {"role": str, "content": str}.
- LLaMA-Factory (data/README.md): each dataset_info.json entry loads one split of one config;
  alpaca reads `columns.prompt`/`columns.response` strings, `ranking: true` alpaca reads
  prompt/chosen/rejected strings, sharegpt reads `columns.messages`, a list whose items carry
  `tags.role_tag`/`tags.content_tag`, roles among the tags' user/assistant/system.
"""

import json
from pathlib import Path

import pytest
from datasets import List, Value, load_dataset

from skillsft.cli import main
from skillsft.pipeline.stages.publish import PublishOptions, export_local

MESSAGE = List({"role": Value("string"), "content": Value("string")})
STRING = Value("string")


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("trainers") / "w"
    assert main(["run", "alfworld", "--teacher", "offline", "--preferences",
                 "--work-dir", str(work)]) == 0
    export_local(work, "alfworld", PublishOptions(validation_fraction=0.34))
    return work / "hub"


def roles(messages: list[dict]) -> list[str]:
    return [m["role"] for m in messages]


def test_the_default_config_loads_without_a_name(mirror: Path) -> None:
    default = load_dataset(str(mirror))
    alpaca = load_dataset(str(mirror), "alfworld")
    assert sorted(default) == sorted(alpaca) == ["train", "validation"]
    for split in default:
        assert default[split]["instruction"] == alpaca[split]["instruction"]


def test_conversational_sft_is_trl_prompt_completion(mirror: Path) -> None:
    data = load_dataset(str(mirror), "alfworld_conversational")
    alpaca = load_dataset(str(mirror), "alfworld")
    for split in alpaca:
        rows = data[split]
        assert rows.features == {"prompt": MESSAGE, "completion": MESSAGE}
        assert len(rows) == len(alpaca[split])
        for row, record in zip(rows, alpaca[split], strict=True):
            assert roles(row["prompt"]) == ["user"] and roles(row["completion"]) == ["assistant"]
            assert row["prompt"][0]["content"] == record["instruction"]
            assert row["completion"][0]["content"] == record["output"]


def test_trajectories_are_trl_conversational_messages(mirror: Path) -> None:
    data = load_dataset(str(mirror), "alfworld_trajectories")
    meta = load_dataset(str(mirror), "alfworld_metadata")
    for split in meta:
        rows = data[split]
        assert rows.features == {"trajectory_id": STRING, "messages": MESSAGE}
        assert set(rows["trajectory_id"]) == set(meta[split]["trajectory_id"])  # same split
        for row in rows:
            turns = roles(row["messages"])
            assert turns[0] == "system"
            assert turns[1:] == ["user", "assistant"] * ((len(turns) - 1) // 2)
            assert all(m["content"] for m in row["messages"])


def test_preference_pairs_in_both_trl_forms(mirror: Path) -> None:
    plain = load_dataset(str(mirror), "alfworld_preferences", split="train")
    chat = load_dataset(str(mirror), "alfworld_preferences_conversational", split="train")
    assert plain.features == {"prompt": STRING, "chosen": STRING, "rejected": STRING}
    assert chat.features == {"prompt": MESSAGE, "chosen": MESSAGE, "rejected": MESSAGE}
    assert len(plain) == len(chat) > 0
    for pair, row in zip(plain, chat, strict=True):
        assert roles(row["prompt"]) == ["user"] and row["prompt"][0]["content"] == pair["prompt"]
        for side in ("chosen", "rejected"):
            assert roles(row[side]) == ["assistant"] and row[side][0]["content"] == pair[side]


def test_every_dataset_info_entry_loads_as_llama_factory_reads_it(mirror: Path) -> None:
    info = json.loads((mirror / "dataset_info.json").read_text())
    assert sorted(info) == [
        "skillsft_alfworld", "skillsft_alfworld_metadata", "skillsft_alfworld_metadata_validation",
        "skillsft_alfworld_preferences", "skillsft_alfworld_trajectories",
        "skillsft_alfworld_trajectories_validation", "skillsft_alfworld_validation"]
    for name, entry in info.items():
        data = load_dataset(entry["hf_hub_url"], entry["subset"], split=entry["split"])
        columns = entry["columns"]
        if entry["formatting"] == "alpaca" and entry.get("ranking"):
            assert name == "skillsft_alfworld_preferences"
            for column in ("prompt", "chosen", "rejected"):
                assert data.features[columns[column]] == STRING
        elif entry["formatting"] == "alpaca":
            assert data.features[columns["prompt"]] == data.features[columns["response"]] == STRING
        else:
            assert entry["formatting"] == "sharegpt" and "trajectories" in name
            tags = entry["tags"]
            allowed = {tags["user_tag"], tags["assistant_tag"], tags["system_tag"]}
            for row in data:
                for message in row[columns["messages"]]:
                    assert message[tags["role_tag"]] in allowed
                    assert isinstance(message[tags["content_tag"]], str)
        assert len(data) > 0


def test_skill_free_records_are_the_corpus_without_its_block(tmp_path: Path) -> None:
    """`--skill-variants none`: row for row the alpaca config, same outputs, the instruction
    minus exactly the experience block (and the blank line before it), for a text layout
    (ALFWorld: block in the system prompt) and Search (block in every human turn)."""
    from skillsft.pipeline.stages.corpus_metrics import experience_block

    for env in ("alfworld", "search"):
        work = tmp_path / env
        assert main(["run", env, "--teacher", "offline", "--work-dir", str(work)]) == 0
        assert main(["publish", "--work-dir", str(work), "--dry-run",
                     "--skill-variants", "none"]) == 0
        alpaca = load_dataset(str(work / "hub"), env, split="train")
        bare = load_dataset(str(work / "hub"), f"{env}_noskill", split="train")
        assert bare.features == alpaca.features and len(bare) == len(alpaca) > 0
        assert bare["output"] == alpaca["output"]
        for with_skills, without in zip(alpaca["instruction"], bare["instruction"],
                                        strict=True):
            block = experience_block(with_skills)
            assert block and not experience_block(without)
            gap = "\n\n" + block if env == "alfworld" else block + "\n\n"
            assert with_skills.replace(gap, "", 1) == without
        card = (work / "hub" / "README.md").read_text()
        assert f'load_dataset("<you>/{env}-sft", "{env}_noskill")' in card
        assert "internalizes" in card


def test_an_unknown_skill_variant_is_one_usage_line(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["run", "alfworld", "--teacher", "offline", "--work-dir", str(tmp_path / "w"),
              "--skill-variants", "nothing"])
    assert raised.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(lines) == 1 and "--skill-variants" in lines[0] and "'none'" in lines[0]
    assert not (tmp_path / "w").exists()
