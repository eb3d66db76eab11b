"""One config's parquet files: shards per split, written beside the final folder and renamed
into place, so a half-written config never sits where `datasets` (or an upload) looks."""

import math
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datasets import Dataset, Features, SplitInfo

from skillsft.pipeline.stages.publish.card import CardConfig


def write_shards(dataset: Dataset, folder: Path, split: str, max_shard_bytes: int) -> list[Path]:
    num_shards = max(1, math.ceil(dataset.data.nbytes / max_shard_bytes))
    paths = []
    for index in range(num_shards):
        path = folder / f"{split}-{index:05d}-of-{num_shards:05d}.parquet"
        dataset.shard(num_shards, index, contiguous=True).to_parquet(str(path))
        paths.append(path)
    return paths


@dataclass
class WrittenConfig:
    config: CardConfig
    paths: list[Path]  # every shard, in split then shard order


def write_config(root: Path, name: str, features: Features,
                 columns_by_split: Mapping[str, Mapping[str, list[Any]]],
                 max_shard_bytes: int) -> WrittenConfig | None:
    """`root/<name>/<split>-*.parquet` for each split with rows (the old folder is replaced);
    None, and no folder, when no split has a row."""
    final = root / name
    staging = root / f".{name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(final, ignore_errors=True)
    splits, paths = [], []
    for split, columns in columns_by_split.items():
        dataset = Dataset.from_dict(dict(columns), features=features)
        if not len(dataset):
            continue
        staging.mkdir(parents=True, exist_ok=True)
        written = write_shards(dataset, staging, split, max_shard_bytes)
        paths += [final / p.name for p in written]
        splits.append(SplitInfo(name=split, num_bytes=dataset.data.nbytes,
                                num_examples=len(dataset)))
    if not splits:
        return None
    staging.rename(final)
    config = CardConfig(env=name, features=features, splits=tuple(splits),
                        download_size=sum(p.stat().st_size for p in paths), folder=name)
    return WrittenConfig(config, paths)
