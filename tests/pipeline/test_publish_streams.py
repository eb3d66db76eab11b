"""Publishing streams: the parquet shards written from spooled rows are the files `datasets`
writes from a whole table, and an export's Python memory does not grow with the corpus."""

import hashlib
import json
import random
import tracemalloc
from pathlib import Path

import orjson
import pytest
from datasets import Dataset

from skillsft.pipeline.stages.publish import PublishOptions, export_local
from skillsft.pipeline.stages.publish.parquet import (
    ROWS_PER_BATCH,
    Spool,
    write_shards,
)
from skillsft.pipeline.stages.publish.trainer_configs import TRAJECTORY_FEATURES
from skillsft.pipeline.stages.publish.trainer_files import METADATA_FEATURES


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def words(rng: random.Random, count: int) -> str:
    return " ".join(f"w{rng.randrange(10**6)}" for _ in range(count))


def metadata_rows(count: int) -> list[dict]:
    """Rows of every column kind we publish (strings, int32, lists), with text distinct
    enough that the writer's dictionary outgrows its page limit and falls back to plain."""
    rng = random.Random(7)
    return [{"instruction": words(rng, rng.randrange(20, 200)), "output": words(rng, 10),
             "environment": "alfworld", "category": rng.choice(["heat", "cool"]),
             "trajectory_id": f"env{i // 7}/0", "step": i % 7,
             "skill_ids": [f"gen_{k:03d}" for k in range(i % 4)]} for i in range(count)]


def trajectory_rows(count: int) -> list[dict]:
    rng = random.Random(8)
    return [{"trajectory_id": f"env{i}/0",
             "messages": [{"role": "system", "content": "You are an agent."},
                          *({"role": "user" if t % 2 == 0 else "assistant",
                             "content": words(rng, rng.randrange(5, 60))}
                            for t in range(i % 9))]} for i in range(count)]


@pytest.mark.parametrize(("features", "make_rows"), [(METADATA_FEATURES, metadata_rows),
                                                     (TRAJECTORY_FEATURES, trajectory_rows)])
def test_spooled_shards_are_the_bytes_datasets_writes(tmp_path, features, make_rows):
    rows = make_rows(2 * ROWS_PER_BATCH + 345)  # several spool batches, a ragged last one
    spool = Spool(tmp_path / "rows.arrow", features)
    for row in rows:
        spool.add(row)
    dataset = Dataset.from_dict({name: [r[name] for r in rows] for name in features},
                                features=features)
    assert (spool.rows, spool.nbytes) == (len(dataset), dataset.data.nbytes)

    max_shard_bytes = dataset.data.nbytes // 3 + 1  # three shards, cut inside spool batches
    ours = write_shards(spool, tmp_path, "train", max_shard_bytes)
    assert [p.name for p in ours] == [f"train-{i:05d}-of-00003.parquet" for i in range(3)]
    for index, path in enumerate(ours):
        theirs = tmp_path / f"datasets-{index}.parquet"
        dataset.shard(3, index, contiguous=True).to_parquet(str(theirs))
        assert sha(path) == sha(theirs), path.name


def test_an_empty_split_is_the_file_datasets_writes_for_no_rows(tmp_path):
    spool = Spool(tmp_path / "rows.arrow", METADATA_FEATURES)
    [ours] = write_shards(spool, tmp_path, "train", 500 * 1024 * 1024)
    theirs = tmp_path / "datasets.parquet"
    Dataset.from_dict({name: [] for name in METADATA_FEATURES},
                      features=METADATA_FEATURES).to_parquet(str(theirs))
    assert ours.name == "train-00000-of-00001.parquet" and sha(ours) == sha(theirs)


def synthetic_work_dir(folder: Path, records: int) -> Path:
    """A corpus and its provenance, `records` long, each record a few KB of distinct text."""
    rng = random.Random(records)
    folder.mkdir(parents=True)
    corpus = [{"instruction": words(rng, 400), "output": words(rng, 30)} for _ in range(records)]
    (folder / "alfworld_sft_data.json").write_bytes(orjson.dumps(corpus))
    lines = [json.dumps({"trajectory_id": f"env{i // 5}/0", "task_type": "heat", "turn": i % 5,
                         "num_steps": 5, "source": "offline", "skill_ids": ["gen_001"]})
             for i in range(records)]
    (folder / "alfworld_sft_provenance.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def python_peak_of_export(work_dir: Path) -> int:
    """Peak bytes the Python allocator held while exporting (Arrow's buffers are not Python
    objects and are not counted: what grows with a held corpus is records, rows, columns)."""
    options = PublishOptions(validation_fraction=0.5)
    tracemalloc.start()
    try:
        export_local(work_dir, "alfworld", options)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_an_export_holds_a_bounded_number_of_records(tmp_path):
    # Both splits of the small corpus fill a spool batch already (half the trajectories are
    # held out), so the large one shows what a held corpus would add, not a fuller batch.
    small = synthetic_work_dir(tmp_path / "small", 2 * ROWS_PER_BATCH + 400)
    large = synthetic_work_dir(tmp_path / "large", 6 * ROWS_PER_BATCH)
    python_peak_of_export(small)  # first-use caches (imports, datasets' tables) out of the way
    small_peak, large_peak = python_peak_of_export(small), python_peak_of_export(large)
    corpus_growth = ((large / "alfworld_sft_data.json").stat().st_size
                     - (small / "alfworld_sft_data.json").stat().st_size)
    # Holding the corpus would add at least its text (here 3,600 records of ~3 KB each);
    # holding spool batches and a few numbers per record adds a small part of it.
    assert large_peak - small_peak < corpus_growth / 8, (small_peak, large_peak, corpus_growth)
