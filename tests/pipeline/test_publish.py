"""Stage 5 publishing: local parquet export, the dataset card, and the upload to a Hub that is
a real local HTTP server (tests/support/hub_server.py), so huggingface_hub runs unchanged and
only the far end of its HTTP connection is ours."""

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from datasets import load_dataset
from huggingface_hub import HfApi

from skillsft.pipeline.errors import InputError
from skillsft.pipeline.stages.publish import (
    PublishError,
    PublishOptions,
    export_local,
    publish,
)
from skillsft.pipeline.stages.publish.corpus_pass import held_out_trajectories
from tests.pipeline.test_report import RECORDS, SECRET_URL, build_work_dir
from tests.support.hub_server import FakeHub, running_hub

TOKEN = "hf_TESTtokenThatMustNeverLeak0123456789"
REPO = "someone/agent-sft"
# The fixture corpus is partly offline-written; these tests are about uploading, not consent.
FAST = {"retry_wait_seconds": 0.0, "allow_offline": True}
SHARD = "alfworld/train-00000-of-00001.parquet"
META_SHARD = "alfworld/metadata/train-00000-of-00001.parquet"
CHAT_SHARD = "alfworld_conversational/train-00000-of-00001.parquet"
BANK = "skills/alfworld-skills/skill_bank.json"
# What one alfworld export commits (the fixture has no distilled conversations, no pairs).
UPLOADED = [SHARD, META_SHARD, CHAT_SHARD, BANK, "README.md"]


@pytest.fixture
def work_dir(tmp_path: Path) -> Path:
    return build_work_dir(tmp_path / "run")


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    with running_hub() as served:
        yield served


@pytest.fixture
def api(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> HfApi:
    monkeypatch.setenv("HF_TOKEN", TOKEN)  # the token reaches huggingface_hub its usual way
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    return HfApi(endpoint=hub.url)


def corpus(work_dir: Path) -> list[dict[str, str]]:
    return json.loads((work_dir / "alfworld_sft_data.json").read_text())


def card_yaml(text: str) -> dict:
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---", 2)[1])


def parquet_rows(paths: list[Path]) -> list[dict[str, str]]:
    dataset = load_dataset("parquet", data_files=[str(p) for p in paths], split="train")
    assert dataset.column_names == ["instruction", "output"]
    return list(dataset)


# -- local export -----------------------------------------------------------------------------


def test_export_round_trips_every_row_in_order(work_dir: Path) -> None:
    export = export_local(work_dir, "alfworld", PublishOptions())
    shards = sorted((work_dir / "hub" / "alfworld").glob("*.parquet"))
    assert [p.name for p in shards] == ["train-00000-of-00001.parquet"]
    assert parquet_rows(shards) == corpus(work_dir)
    assert (export.rows, export.splits) == (RECORDS, {"train": RECORDS})
    assert [p.relative_to(export.root).as_posix() for p in export.paths] == UPLOADED


def test_large_corpora_are_sharded_in_order(work_dir: Path) -> None:
    export_local(work_dir, "alfworld", PublishOptions(max_shard_bytes=1000))
    shards = sorted((work_dir / "hub" / "alfworld").glob("*.parquet"))
    assert len(shards) > 1
    assert all(p.name.endswith(f"-of-{len(shards):05d}.parquet") for p in shards)
    assert parquet_rows(shards) == corpus(work_dir)


def test_validation_split_keeps_trajectories_whole_and_is_seeded(work_dir: Path) -> None:
    options = PublishOptions(validation_fraction=0.25, seed=7)
    export = export_local(work_dir, "alfworld", options)
    assert set(export.splits) == {"train", "validation"}
    assert export.splits["train"] > 0 and export.splits["validation"] > 0
    folder = work_dir / "hub" / "alfworld"
    train = parquet_rows(sorted(folder.glob("train-*.parquet")))
    validation = parquet_rows(sorted(folder.glob("validation-*.parquet")))
    rows = corpus(work_dir)
    assert len(train) + len(validation) == len(rows) and validation

    def trajectory(row: dict[str, str]) -> str:
        return row["instruction"].rsplit(" of ", 1)[1]

    assert not {trajectory(r) for r in train} & {trajectory(r) for r in validation}
    # each split keeps the corpus order
    assert train == [r for r in rows if r in train]
    assert validation == [r for r in rows if r in validation]
    # same seed, same split, whatever order the trajectories were met in
    ids = set("abcdefghij")
    first = held_out_trajectories(ids, 0.3, seed=1)
    assert first == held_out_trajectories(set(sorted(ids, reverse=True)), 0.3, seed=1)
    assert len(first) == 3 and first <= ids


def test_without_provenance_everything_is_train_and_the_export_says_so(tmp_path: Path) -> None:
    work_dir = build_work_dir(tmp_path / "run", provenance=False)
    export = export_local(work_dir, "alfworld", PublishOptions(validation_fraction=0.5))
    assert export.splits == {"train": RECORDS}
    assert any("no alfworld_sft_provenance.jsonl" in note for note in export.notes)


def test_a_missing_corpus_is_an_input_error_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="alfworld_sft_data.json: corpus not found"):
        export_local(tmp_path, "alfworld", PublishOptions())


# -- the card ---------------------------------------------------------------------------------


def test_card_yaml_parses_and_lists_the_config(work_dir: Path) -> None:
    export_local(work_dir, "alfworld", PublishOptions(validation_fraction=0.25))
    text = (work_dir / "hub" / "README.md").read_text()
    meta = card_yaml(text)
    assert meta["configs"] == [
        {"config_name": "default", "default": True, "data_files": [
            {"split": "train", "path": ["alfworld/train-*"]},
            {"split": "validation", "path": ["alfworld/validation-*"]}]},
        {"config_name": "alfworld", "data_files": [
            {"split": "train", "path": "alfworld/train-*"},
            {"split": "validation", "path": "alfworld/validation-*"}]},
        {"config_name": "alfworld_conversational", "data_files": [
            {"split": "train", "path": "alfworld_conversational/train-*"},
            {"split": "validation", "path": "alfworld_conversational/validation-*"}]},
        {"config_name": "alfworld_metadata", "data_files": [
            {"split": "train", "path": "alfworld/metadata/train-*"},
            {"split": "validation", "path": "alfworld/metadata/validation-*"}]}]
    info = meta["dataset_info"][0]
    assert info["config_name"] == "alfworld"
    assert info["features"] == [{"name": "instruction", "dtype": "string"},
                                {"name": "output", "dtype": "string"}]
    assert sum(s["num_examples"] for s in info["splits"]) == RECORDS
    assert meta["size_categories"] == ["n<1K"]
    assert meta["license"] == "other"
    assert "text-generation" in meta["task_categories"] and "alfworld" in meta["tags"]
    # generation settings, without secrets
    assert "endpoint https://api.example.com/v1" in text
    assert "sekrit" not in text and "sk-query-secret" not in text and "user:" not in text
    assert "`prompt/distill=v1`" in text
    assert "gpt-4o-mini" in text and "local-llama" in text
    import hashlib
    bank_hash = hashlib.sha256((work_dir / "skill_bank.json").read_bytes()).hexdigest()
    assert bank_hash in text


def test_the_card_loads_with_datasets_from_the_export_folder(work_dir: Path) -> None:
    """The exported folder is a dataset repo: `load_dataset(folder, config)` reads it."""
    export_local(work_dir, "alfworld", PublishOptions(validation_fraction=0.25))
    loaded = load_dataset(str(work_dir / "hub"), "alfworld")
    assert sorted(loaded) == ["train", "validation"]
    assert loaded["train"].num_rows + loaded["validation"].num_rows == RECORDS


# -- upload -----------------------------------------------------------------------------------


def other_config_card() -> bytes:
    return (
        b"---\nlicense: mit\nconfigs:\n- config_name: webshop\n  data_files:\n"
        b"  - split: train\n    path: webshop/train-*\n---\n\n# My corpus\n\nWritten by a person.\n"
        b"\n<!-- skillsft:webshop:start -->\n## Config `webshop`\nwebshop settings\n"
        b"<!-- skillsft:webshop:end -->\n"
    )


def test_upload_commits_exactly_this_env_and_keeps_other_configs(
    work_dir: Path, hub: FakeHub, api: HfApi
) -> None:
    hub.seed_repo(REPO, {
        "README.md": other_config_card(),
        "webshop/train-00000-of-00001.parquet": b"webshop rows",
        "alfworld/train-00000-of-00002.parquet": b"stale shard",
        "alfworld/train-00001-of-00002.parquet": b"stale shard",
    })
    result = publish(work_dir, "alfworld", REPO, PublishOptions(**FAST), api=api)

    assert len(hub.commits) == 1
    commit = hub.commits[0]
    assert commit.revision == "main"
    assert sorted(commit.added) == sorted(UPLOADED)
    assert sorted(commit.deleted) == ["alfworld/train-00000-of-00002.parquet",
                                      "alfworld/train-00001-of-00002.parquet"]
    assert commit.message == f"skillsft: publish alfworld ({RECORDS} rows)"
    files = hub.files(REPO)
    assert files["webshop/train-00000-of-00001.parquet"] == b"webshop rows"
    local = work_dir / "hub" / "alfworld" / "train-00000-of-00001.parquet"
    assert files["alfworld/train-00000-of-00001.parquet"] == local.read_bytes()

    card = files["README.md"].decode()
    meta = card_yaml(card)
    assert [c["config_name"] for c in meta["configs"]] == [
        "default", "alfworld", "alfworld_conversational", "alfworld_metadata", "webshop"]
    assert meta["license"] == "mit"  # the publisher's choice on the Hub is kept
    assert "Written by a person." in card and "webshop settings" in card
    assert "## Config `alfworld`" in card
    assert (work_dir / "hub" / "README.md").read_text() == card  # local mirror = commit
    assert result.commit_url and result.deleted == sorted(commit.deleted)
    assert result.files == [(path, len(files[path])) for path in UPLOADED]


def test_republishing_replaces_only_its_own_section(
    work_dir: Path, hub: FakeHub, api: HfApi
) -> None:
    hub.seed_repo(REPO, {"README.md": other_config_card()})
    publish(work_dir, "alfworld", REPO, PublishOptions(**FAST), api=api)
    publish(work_dir, "alfworld", REPO, PublishOptions(**FAST, validation_fraction=0.25),
            api=api)
    card = hub.files(REPO)["README.md"].decode()
    assert card.count("<!-- skillsft:alfworld:start -->") == 1
    assert card.count("<!-- skillsft:webshop:start -->") == 1
    alfworld = next(c for c in card_yaml(card)["configs"] if c["config_name"] == "alfworld")
    assert [f["split"] for f in alfworld["data_files"]] == ["train", "validation"]


def test_new_private_repo_on_a_new_branch(work_dir: Path, hub: FakeHub, api: HfApi) -> None:
    options = PublishOptions(**FAST, private=True, revision="v2", commit_message="first cut")
    publish(work_dir, "alfworld", REPO, options, api=api)
    assert hub.repos[REPO].private
    assert hub.files(REPO, "main") == {}
    assert sorted(hub.files(REPO, "v2")) == sorted(UPLOADED)
    assert hub.commits[0].message == "first cut"


def test_transient_hub_errors_are_retried(work_dir: Path, hub: FakeHub, api: HfApi) -> None:
    hub.faults = {"create": [503], "commit": [502, 503], "resolve": [500]}
    publish(work_dir, "alfworld", REPO, PublishOptions(**FAST), api=api)
    commit_calls = [r for r in hub.requests if "/commit/" in r.path]
    assert len(commit_calls) == 3 and len(hub.commits) == 1
    assert sum(1 for r in hub.requests if r.path == "/api/repos/create") == 2


def test_a_permanent_error_fails_fast_without_the_token(
    work_dir: Path, hub: FakeHub, api: HfApi
) -> None:
    hub.faults = {"commit": [400]}
    with pytest.raises(PublishError) as caught:
        publish(work_dir, "alfworld", REPO, PublishOptions(**FAST), api=api)
    assert len([r for r in hub.requests if "/commit/" in r.path]) == 1
    assert TOKEN not in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_a_token_inside_an_error_message_is_scrubbed(work_dir: Path, hub: FakeHub) -> None:
    """Whatever the Hub echoes back (here: the token itself) never reaches our message."""
    hub.faults = {"create": [403]}
    api = HfApi(endpoint=hub.url, token=TOKEN)
    original = hub.handle

    def echo_token(method, target, headers, body):  # a server that echoes credentials
        status, reply_headers, payload = original(method, target, headers, body)
        if status == 403:
            payload = json.dumps({"error": f"bad token {TOKEN}"}).encode()
        return status, reply_headers, payload

    hub.handle = echo_token  # type: ignore[method-assign]
    hub.repos.clear()
    with pytest.raises(PublishError) as caught:
        publish(work_dir, "alfworld", REPO, PublishOptions(**FAST), api=api)
    assert TOKEN not in str(caught.value) and "***" in str(caught.value)


def test_the_token_never_reaches_files_logs_or_output(
    work_dir: Path, hub: FakeHub, api: HfApi, caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    hub.faults = {"commit": [503]}  # make the retry path log too
    result = publish(work_dir, "alfworld", REPO, PublishOptions(**FAST), api=api)
    print("\n".join(result.summary_lines()))
    out, err = capsys.readouterr()
    # it was used: every Hub request carried it in the Authorization header, and only there
    assert all(r.headers.get("authorization") == f"Bearer {TOKEN}" for r in hub.requests)
    assert all(TOKEN.encode() not in r.body for r in hub.requests)
    assert TOKEN not in caplog.text and TOKEN not in out and TOKEN not in err
    assert "retry 1/5" in caplog.text
    for path in work_dir.rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path
    for data in hub.files(REPO).values():
        assert TOKEN.encode() not in data


def test_dry_run_stays_local_and_lists_files_with_sizes(
    work_dir: Path, hub: FakeHub, api: HfApi
) -> None:
    result = publish(work_dir, "alfworld", REPO, PublishOptions(dry_run=True), api=api)
    assert hub.requests == []
    root = work_dir / "hub"
    assert result.files == [(p, (root / p).stat().st_size) for p in UPLOADED]
    text = "\n".join(result.summary_lines())
    assert text.startswith(f"would upload to {REPO}@main:")
    assert "alfworld/train-00000-of-00001.parquet" in text


def test_no_token_is_a_clear_error(work_dir: Path, hub: FakeHub,
                                   monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from huggingface_hub import constants

    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "no-tokens"))
    with pytest.raises(PublishError, match="set HF_TOKEN or run `hf auth login`"):
        publish(work_dir, "alfworld", REPO, PublishOptions(**FAST),
                api=HfApi(endpoint=hub.url))
    assert hub.requests == []


def test_secret_endpoint_parts_never_reach_the_hub(work_dir: Path, hub: FakeHub,
                                                   api: HfApi) -> None:
    publish(work_dir, "alfworld", REPO, PublishOptions(**FAST), api=api)
    card = hub.files(REPO)["README.md"].decode()
    assert SECRET_URL not in card and "sekrit" not in card
    assert io.StringIO(card).readline() == "---\n"


def test_an_offline_teacher_corpus_is_refused_without_allow_offline(
    work_dir: Path, hub: FakeHub, api: HfApi
) -> None:
    with pytest.raises(PublishError, match="offline teacher.*--allow-offline"):
        publish(work_dir, "alfworld", REPO, PublishOptions(retry_wait_seconds=0.0), api=api)
    assert not hub.commits
    publish(work_dir, "alfworld", REPO, PublishOptions(**FAST), api=api)
    assert len(hub.commits) == 1


def test_the_card_labels_an_offline_corpus(work_dir: Path) -> None:
    export = export_local(work_dir, "alfworld", PublishOptions())
    assert "Smoke-test corpus" in (export.root / "README.md").read_text()


def test_concurrent_publishes_of_two_environments_keep_both_sections(
    tmp_path: Path, hub: FakeHub, api: HfApi
) -> None:
    """webshop commits between alfworld's read of the card and alfworld's commit: the Hub
    refuses alfworld's commit (its parent is no longer the head), alfworld merges again."""
    alfworld = build_work_dir(tmp_path / "a")
    webshop = build_work_dir(tmp_path / "b", "webshop")
    hub.seed_repo(REPO, {})
    hub.before_commit = lambda: publish(webshop, "webshop", REPO, PublishOptions(**FAST),
                                        api=api)
    publish(alfworld, "alfworld", REPO, PublishOptions(**FAST), api=api)

    assert [c.message.split()[2] for c in hub.commits] == ["webshop", "alfworld"]
    commit_requests = [r for r in hub.requests if r.method == "POST" and "/commit/" in r.path]
    assert len(commit_requests) == 3  # webshop's, alfworld's refused one, alfworld's again
    card = hub.files(REPO)["README.md"].decode()
    assert "## Config `alfworld`" in card and "## Config `webshop`" in card
    names = [c["config_name"] for c in card_yaml(card)["configs"]]
    assert {"alfworld", "webshop", "default"} <= set(names)
    default = next(c for c in card_yaml(card)["configs"] if c["config_name"] == "default")
    assert default["data_files"] == [{"split": "train", "path": ["alfworld/train-*",
                                                                 "webshop/train-*"]}]
    assert any(p.startswith("webshop/") for p in hub.files(REPO))


def test_a_stale_parent_commit_is_refused_by_the_local_hub(hub: FakeHub, api: HfApi) -> None:
    """The Hub server enforces parent_commit, so the test above tests something."""
    from huggingface_hub import CommitOperationAdd
    from huggingface_hub.errors import HfHubHTTPError

    hub.seed_repo(REPO, {"a.txt": b"a"})
    parent = api.dataset_info(REPO).sha
    api.create_commit(REPO, [CommitOperationAdd("b.txt", b"b")], commit_message="b",
                      repo_type="dataset", parent_commit=parent)
    with pytest.raises(HfHubHTTPError) as raised:
        api.create_commit(REPO, [CommitOperationAdd("c.txt", b"c")], commit_message="c",
                          repo_type="dataset", parent_commit=parent)
    assert raised.value.response.status_code == 412
    assert "c.txt" not in hub.files(REPO)
