"""One config's parquet files, written from a stream of rows with a bounded number in memory.

`datasets` would hold a config's whole split as one Arrow table before writing it
(`Dataset.from_dict(...).to_parquet`). The shards we publish are that writer's files byte for
byte, but the rows get there in two streamed steps:

1. `Spool.add` takes rows one at a time and spills them, `ROWS_PER_BATCH` at a time, as Arrow
   record batches to an IPC file beside the export. It sums the batches' `nbytes` as it goes:
   Arrow's `nbytes` counts the bytes each row's values reference (no validity bitmaps here, one
   offset per row), so the sum over the batches is the `nbytes` of the whole table, the figure
   `datasets` sizes its shards and its row groups by and the card reports as `num_bytes`.
2. `write_shards` reads the spool back and writes the shards `Dataset.shard(n, i,
   contiguous=True).to_parquet()` would: the same shard count and row ranges, the same writer
   settings (content-defined chunking, page index, per-column options) and the same row groups
   (`datasets`' batch size for that shard's rows and bytes), each handed to the writer as one
   Arrow chunk as `datasets` hands it. A row group's rows are the only ones held at once (as
   Arrow data, the spool's pieces and the chunk they are joined into): `datasets` caps a row
   group at 100 MB of Arrow data, so memory stops growing with the corpus beyond that.

Every config is written beside its final folder and renamed into place, so a half-written
config never sits where `datasets` (or an upload) looks.
"""

import json
import math
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from datasets import Features, SplitInfo, config
from datasets.arrow_writer import (
    get_parquet_column_options,
    get_writer_batch_size_from_data_size,
    get_writer_batch_size_from_features,
)

from skillsft.pipeline.stages.publish.card import CardConfig

# Rows turned into one Arrow batch at a time while spooling: the rows held as Python objects.
ROWS_PER_BATCH = 1000


class Spool:
    """The rows of one split of one config, spilled to an Arrow IPC file as they come."""

    def __init__(self, path: Path, features: Features) -> None:
        self.path = path
        self.features = features
        self.schema = features.arrow_schema
        self.rows = 0  # rows added
        self._nbytes = 0
        self._pending: list[dict[str, Any]] = []
        self._writer: pa.ipc.RecordBatchFileWriter | None = None
        self._closed = False

    @property
    def nbytes(self) -> int:
        """The whole table's Arrow nbytes: the sum of its batches'."""
        self.close()
        return self._nbytes

    def add(self, row: dict[str, Any]) -> None:
        if self._closed:  # reopening the file would start it afresh
            raise RuntimeError(f"{self.path}: spool already read; its rows are final")
        self.rows += 1
        self._pending.append(row)
        if len(self._pending) >= ROWS_PER_BATCH:
            self._spill()

    def _spill(self) -> None:
        if not self._pending:
            return
        batch = pa.RecordBatch.from_pylist(self._pending, schema=self.schema)
        self._pending = []
        if self._writer is None:
            self._writer = pa.ipc.new_file(str(self.path), self.schema)
        self._writer.write_batch(batch)
        self._nbytes += batch.nbytes

    def close(self) -> None:
        """No more rows: the file is complete (reading, `nbytes` and writing close it)."""
        self._spill()
        self._closed = True
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def batches(self, start: int = 0, end: int | None = None) -> Iterator[pa.RecordBatch]:
        """The spooled rows `start:end` as record batches (slices where a range cuts one)."""
        self.close()
        end = self.rows if end is None else end
        if start >= end:
            return
        with pa.memory_map(str(self.path)) as source:
            reader = pa.ipc.open_file(source)
            first = 0
            for index in range(reader.num_record_batches):
                batch = reader.get_batch(index)
                last = first + batch.num_rows
                if last > start and first < end:
                    lo, hi = max(start, first) - first, min(end, last) - first
                    yield batch if (lo, hi) == (0, batch.num_rows) else batch.slice(lo, hi - lo)
                if last >= end:
                    return
                first = last

    def remove(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


def shard_ranges(rows: int, num_shards: int) -> list[tuple[int, int]]:
    """The rows of each contiguous shard, split as `Dataset.shard(contiguous=True)` splits."""
    size, extra = divmod(rows, num_shards)
    ranges, start = [], 0
    for index in range(num_shards):
        end = start + size + (1 if index < extra else 0)
        ranges.append((start, end))
        start = end
    return ranges


def write_parquet(spool: Spool, start: int, end: int, path: Path) -> None:
    """Rows `start:end` of the spool as `Dataset.to_parquet` writes them: its writer settings,
    and one row group per `datasets` batch of these rows."""
    features, schema = spool.features, spool.schema
    nbytes = sum(batch.nbytes for batch in spool.batches(start, end))
    group_rows = (get_writer_batch_size_from_features(features)
                  or get_writer_batch_size_from_data_size(end - start, nbytes))
    chunking = config.DEFAULT_CDC_OPTIONS
    writer = pq.ParquetWriter(str(path), schema=schema, use_content_defined_chunking=chunking,
                              write_page_index=True,
                              **get_parquet_column_options(features, schema))
    group: list[pa.RecordBatch] = []
    held = 0
    for batch in spool.batches(start, end):
        while batch.num_rows:
            taken = batch.slice(0, min(batch.num_rows, group_rows - held))
            group.append(taken)
            held += taken.num_rows
            batch = batch.slice(taken.num_rows)
            if held == group_rows:
                write_row_group(writer, group)
                group, held = [], 0
    if group:
        write_row_group(writer, group)
    writer.add_key_value_metadata({"content_defined_chunking": json.dumps(chunking)})
    writer.close()


def write_row_group(writer: pq.ParquetWriter, pieces: list[pa.RecordBatch]) -> None:
    """One row group from the spool's pieces of it, joined into one chunk first: the parquet
    writer checks its dictionary's size (and falls back to plain encoding) per chunk it is
    given, so only the one chunk `datasets` hands it gives the same file."""
    writer.write_table(pa.Table.from_batches(pieces).combine_chunks())


def write_shards(spool: Spool, folder: Path, split: str, max_shard_bytes: int) -> list[Path]:
    """`folder/<split>-NNNNN-of-NNNNN.parquet`: as many shards as `max_shard_bytes` of Arrow
    data asks for (at least one, even for no rows)."""
    spool.close()
    num_shards = max(1, math.ceil(spool.nbytes / max_shard_bytes))
    paths = []
    for index, (start, end) in enumerate(shard_ranges(spool.rows, num_shards)):
        path = folder / f"{split}-{index:05d}-of-{num_shards:05d}.parquet"
        write_parquet(spool, start, end, path)
        paths.append(path)
    return paths


def split_info(split: str, spool: Spool) -> SplitInfo:
    return SplitInfo(name=split, num_bytes=spool.nbytes, num_examples=spool.rows)


class ConfigSpools:
    """One config's spools, one per split in the order its splits first get a row."""

    def __init__(self, folder: Path, name: str, features: Features) -> None:
        self.folder = folder
        self.name = name
        self.features = features
        self.by_split: dict[str, Spool] = {}

    def spool(self, split: str) -> Spool:
        if split not in self.by_split:
            self.folder.mkdir(parents=True, exist_ok=True)
            path = self.folder / f"{self.name}.{split}.arrow"
            self.by_split[split] = Spool(path, self.features)
        return self.by_split[split]

    def add(self, split: str, row: dict[str, Any]) -> None:
        self.spool(split).add(row)

    def in_order(self, splits: list[str]) -> dict[str, Spool]:
        """The spools of `splits` that exist, in that order."""
        return {split: self.by_split[split] for split in splits if split in self.by_split}

    def remove(self) -> None:
        for spool in self.by_split.values():
            spool.remove()


@dataclass
class WrittenConfig:
    config: CardConfig
    paths: list[Path]  # every shard, in split then shard order


def write_config(root: Path, name: str, features: Features, spools: Mapping[str, Spool],
                 max_shard_bytes: int) -> WrittenConfig | None:
    """`root/<name>/<split>-*.parquet` for each split with rows (the old folder is replaced);
    None, and no folder, when no split has a row."""
    final = root / name
    staging = root / f".{name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(final, ignore_errors=True)
    splits, paths = [], []
    for split, spool in spools.items():
        spool.close()
        if not spool.rows:
            continue
        staging.mkdir(parents=True, exist_ok=True)
        written = write_shards(spool, staging, split, max_shard_bytes)
        paths += [final / p.name for p in written]
        splits.append(split_info(split, spool))
    if not splits:
        return None
    staging.rename(final)
    card = CardConfig(env=name, features=features, splits=tuple(splits),
                      download_size=sum(p.stat().st_size for p in paths), folder=name)
    return WrittenConfig(card, paths)
