"""The pure side of sharding (pipeline/stages/shards.py): a stable partition and an
order-keeping merge."""

import io
from pathlib import Path

import orjson
import pytest

from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.formats.record_stream import read_span, scan_array
from skillsft.pipeline.stages.shards import (
    ShardFile,
    ShardResult,
    auto_shards,
    index_spans,
    merge_files,
    merge_results,
    partition,
    shard_file_chunks,
    shard_of,
)


def records(count: int) -> list[dict[str, str]]:
    return [{"env_id": f"env{n:03d}", "task": f"task {n}"} for n in range(count)]


@pytest.mark.parametrize("shards", [1, 2, 5, 50], ids=lambda n: f"shards{n}")
def test_partition_keeps_every_record_once_in_input_order(shards: int) -> None:
    parts = partition(records(20), shards)
    assert len(parts) == shards
    positions = sorted(p for part in parts for p in part.positions)
    assert positions == list(range(20))
    for part in parts:
        assert part.positions == sorted(part.positions)
        assert [r["env_id"] for r in part.records] == [f"env{p:03d}" for p in part.positions]


def test_a_record_keeps_its_shard_when_others_come_and_go() -> None:
    before = {r["env_id"]: shard_of(r["env_id"], 7) for r in records(30)}
    after = partition([{"env_id": "new"}, *records(30)[::2]], 7)
    for number, part in enumerate(after):
        for record in part.records:
            if record["env_id"] != "new":
                assert before[record["env_id"]] == number
    # sha256, not Python's salted hash: the same in every process
    assert shard_of("env000", 7) == int.from_bytes(
        __import__("hashlib").sha256(b"env000").digest()[:8], "big") % 7


def test_records_of_one_env_share_a_shard() -> None:
    twice = [*records(10), *records(10)]
    for part in partition(twice, 4):
        ids = [r["env_id"] for r in part.records]
        assert all(ids.count(i) == 2 for i in ids)


def test_merge_interleaves_by_position_and_phase_and_counts_keys_once() -> None:
    first = ShardResult(items=[(0, "a0"), (0, "a0b"), (3, "a3")],
                        rejects=[(0, 3, "r3-early"), (2, 0, "r0-late")],
                        counts={"records": 2}, keyed_counts={"cat": {"empty": 1}})
    second = ShardResult(items=[(1, "b1"), (2, "b2")], rejects=[(0, 1, "r1-early")],
                         counts={"records": 2}, keyed_counts={"cat": {"empty": 1}})
    merged = merge_results([first, second])
    assert merged.items == ["a0", "a0b", "b1", "b2", "a3"]
    assert merged.rejects == ["r1-early", "r3-early", "r0-late"]
    assert merged.counts == {"empty": 1, "records": 4}
    assert merge_results([ShardResult.from_json(first.to_json())]).items == ["a0", "a0b", "a3"]


def test_an_index_of_spans_finds_the_records_partition_copies() -> None:
    data = jsonio.dumps(records(25))
    spans = index_spans(scan_array(io.BytesIO(data)), 4)
    handle = io.BytesIO(data)
    for copied, indexed in zip(partition(records(25), 4), spans, strict=True):
        assert indexed.positions == copied.positions
        assert [read_span(handle, o, n) for o, n in indexed.spans] == copied.records


def test_shard_files_merge_as_streams_old_and_new_alike(tmp_path: Path) -> None:
    """The JSON-lines shard file and the one-object file of earlier versions merge to what
    `merge_results` gives, in any mix."""
    first = ShardResult(items=[(0, {"a": 0}), (3, {"a": 3})], rejects=[(0, 3, "r3"), (2, 0, "r0")],
                        counts={"records": 2}, keyed_counts={"cat": {"empty": 1}})
    second = ShardResult(items=[(1, {"b": 1}), (2, {"b": 2})], rejects=[(0, 1, "r1")],
                         counts={"records": 2}, keyed_counts={"cat": {"empty": 1}})
    new, old = tmp_path / "new.json", tmp_path / "old.json"
    new.write_bytes(b"".join(shard_file_chunks(first, {"source": "in.json"})))
    old.write_bytes(orjson.dumps({**second.to_json(), "source": "in.json"}))
    streamed = merge_files([ShardFile.open(new), ShardFile.open(old)])
    whole = merge_results([first, second])
    assert list(streamed.items) == whole.items
    assert streamed.rejects == whole.rejects and streamed.counts == whole.counts
    assert ShardFile.open(new).head["source"] == "in.json"


def test_the_default_shard_count_grows_with_the_corpus_and_is_capped() -> None:
    assert auto_shards(0) == 1 and auto_shards(30) == 1
    assert auto_shards(2100) == 5
    assert auto_shards(10**7) == 16


def test_the_default_shard_count_is_at_most_one_per_local_worker() -> None:
    """With the in-process scheduler every worker is known: shards beyond them would only run
    one after another, each with its batch's tail; a central scheduler keeps the corpus rule."""
    assert auto_shards(2100, local_workers=1) == 1
    assert auto_shards(2100, local_workers=3) == 3
    assert auto_shards(2100, local_workers=64) == 5  # never more than by size
    assert auto_shards(30, local_workers=4) == 1
    assert auto_shards(2100, local_workers=None) == auto_shards(2100) == 5
