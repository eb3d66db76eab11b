"""Sharding a teacher stage: which shard a record goes to, and merging the shards' results.

A sharded stage (memories, distillation) runs as N independent shard tasks and one merge. For
the merge to equal an unsharded run byte for byte, whatever N:

- the partition is by a hash of the record's env id (sha256, not Python's salted `hash`), so it
  is the same in every process and on every machine, and a record keeps its shard when others
  are added or removed. Records with the same env id land in the same shard, so a stage's
  de-duplication (memories skip a repeated trajectory) sees every candidate it would see
  unsharded;
- every output item and every reject carries the position of the record it came from in the
  whole input, and a stage lists rejects in phases (invalid records first, then what failed
  before the teacher, then what the teacher failed), each phase in input order. The merge
  interleaves the shards by (position) for items and (phase, position) for rejects; within one
  shard the order is already the unsharded order, and `heapq.merge` keeps it;
- counters add up, except those a stage counts once per key (distillation's skill blocks: once
  per category, not per record): a shard reports those per key and the merge counts each key
  once.
"""

import hashlib
import heapq
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

# --shards when not given, for a run whose workers may be joined by others (a central
# scheduler): one shard per this many trajectories (rollout files), at most MAX_AUTO_SHARDS.
# Large enough that a shard's fixed cost (a task, a manifest, a batch's tail) stays small next
# to its requests, small enough that two or more workers share a stage.
TRAJECTORIES_PER_SHARD = 500
MAX_AUTO_SHARDS = 16


def auto_shards(trajectories: int, local_workers: int | None = None) -> int:
    """The default shard count for a corpus of this many trajectories.

    `local_workers`: how many workers will run the shards when no other command can join them
    (an in-process scheduler). Then never more shards than workers: the machine's in-flight
    limit is shared by all its workers, so more shards do not send faster; the shards beyond
    the workers only run one after another, each ending in its batch's tail (its last requests,
    with fewer than the concurrency in flight), and one worker gets one shard. None (a central
    scheduler, which the workers of other commands and machines may join): by the corpus size."""
    by_size = max(1, min(MAX_AUTO_SHARDS, math.ceil(trajectories / TRAJECTORIES_PER_SHARD)))
    return by_size if local_workers is None else max(1, min(by_size, local_workers))


def record_key(record: Any) -> str:
    """What decides a record's shard: its env id (a record without one goes by its JSON text's
    absence of one, i.e. to the shard of the empty key)."""
    env_id = record.get("env_id") if isinstance(record, dict) else getattr(record, "env_id", "")
    return str(env_id or "")


def shard_of(key: str, shards: int) -> int:
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "big") % shards


@dataclass
class ShardInput:
    """One shard's records and their positions in the whole input."""

    positions: list[int] = field(default_factory=list)
    records: list[Any] = field(default_factory=list)


def partition(records: Sequence[Any], shards: int) -> list[ShardInput]:
    """Split records into `shards` parts (some possibly empty), each in input order."""
    if shards < 1:
        raise ValueError(f"shards must be at least 1, got {shards}")
    parts = [ShardInput() for _ in range(shards)]
    for position, record in enumerate(records):
        part = parts[shard_of(record_key(record), shards)]
        part.positions.append(position)
        part.records.append(record)
    return parts


@dataclass
class ShardSpans:
    """One shard's records as an index into stage 1's file: each record's position in the
    whole input and its byte span (offset, length) in that file. The shard reads its records
    through these, so the split copies no record."""

    positions: list[int] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)


def index_spans(elements: Iterable[tuple[int, bytes, Any]], shards: int) -> list[ShardSpans]:
    """`partition` over a file's elements (offset, bytes, record, as `record_stream.scan_array`
    yields them): the same shards, as spans instead of copies."""
    if shards < 1:
        raise ValueError(f"shards must be at least 1, got {shards}")
    parts = [ShardSpans() for _ in range(shards)]
    for position, (offset, element, record) in enumerate(elements):
        part = parts[shard_of(record_key(record), shards)]
        part.positions.append(position)
        part.spans.append((offset, len(element)))
    return parts


@dataclass
class ShardResult:
    """What one shard made, in the form the merge needs (JSON-able: it is the shard's file).

    items: (position, item) in the shard's output order; rejects: (phase, position, reject);
    counts: additive counters; keyed_counts: counters counted once per key across the stage."""

    items: list[tuple[int, Any]] = field(default_factory=list)
    rejects: list[tuple[int, int, Any]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    keyed_counts: dict[str, dict[str, int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"items": self.items, "rejects": self.rejects, "counts": self.counts,
                "keyed_counts": self.keyed_counts}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ShardResult":
        return cls(items=[(int(p), item) for p, item in data["items"]],
                   rejects=[(int(ph), int(p), r) for ph, p, r in data["rejects"]],
                   counts=dict(data["counts"]), keyed_counts=dict(data["keyed_counts"]))


# A shard's file, JSON lines so the merge can stream it: a head line (counts, keyed counts and
# whatever the task adds: source, worker), then its items (`["item", position, item]`) in
# output order, then its rejects (`["reject", phase, position, reject]`) in order.
_ITEM, _REJECT = b'["item",', b'["reject",'


def shard_file_chunks(result: ShardResult, head: dict[str, Any]) -> Iterator[bytes]:
    yield orjson.dumps({**head, "counts": result.counts, "keyed_counts": result.keyed_counts})
    yield b"\n"
    for position, item in result.items:
        yield orjson.dumps(["item", position, item]) + b"\n"
    for phase, position, reject in result.rejects:
        yield orjson.dumps(["reject", phase, position, reject]) + b"\n"


@dataclass
class ShardFile:
    """A shard's file, read lazily: its head at once, its items and rejects as streams.

    Files made before the shard files were JSON lines (one JSON object holding everything)
    are read whole, once, so a work dir from an earlier version merges without re-running."""

    path: Path
    head: dict[str, Any]
    whole: ShardResult | None = None

    @classmethod
    def open(cls, path: Path) -> "ShardFile":
        with open(path, "rb") as handle:
            first = handle.readline()
        if first.startswith(b'{"items":'):
            data = orjson.loads(path.read_bytes())
            return cls(path, data, ShardResult.from_json(data))
        return cls(path, orjson.loads(first))

    @property
    def counts(self) -> dict[str, int]:
        return dict(self.head["counts"])

    @property
    def keyed_counts(self) -> dict[str, dict[str, int]]:
        return dict(self.head["keyed_counts"])

    def _lines(self, marker: bytes) -> Iterator[list[Any]]:
        with open(self.path, "rb") as handle:
            handle.readline()
            for line in handle:
                if line.startswith(marker):
                    yield orjson.loads(line)
                elif marker == _ITEM and line.startswith(_REJECT):
                    return  # items come first: the rest are rejects

    def items(self) -> Iterator[tuple[int, Any]]:
        if self.whole is not None:
            yield from self.whole.items
            return
        for _, position, item in self._lines(_ITEM):
            yield position, item

    def rejects(self) -> Iterator[tuple[int, int, Any]]:
        if self.whole is not None:
            yield from self.whole.rejects
            return
        for _, phase, position, reject in self._lines(_REJECT):
            yield phase, position, reject


@dataclass
class StreamedMerge:
    """`merge_results` over shard files, items as a stream (consumed once, in order)."""

    items: Iterator[Any]
    rejects: list[Any]
    counts: dict[str, int]


def merge_files(files: Sequence[ShardFile]) -> StreamedMerge:
    """The shards' files as one unsharded run would have listed and counted them, holding one
    item per shard at a time (the rejects, usually few, are listed)."""
    items = (item for _, item in heapq.merge(*(f.items() for f in files), key=lambda x: x[0]))
    rejects = [reject for _, _, reject in
               heapq.merge(*(f.rejects() for f in files), key=lambda x: (x[0], x[1]))]
    return StreamedMerge(items, rejects, merged_counts(
        [f.counts for f in files], [f.keyed_counts for f in files]))


def merged_counts(counts: Iterable[dict[str, int]],
                  keyed_counts: Iterable[dict[str, dict[str, int]]]) -> dict[str, int]:
    """Additive counters summed; counters counted once per key counted once."""
    total: Counter[str] = Counter()
    once: dict[str, dict[str, int]] = {}
    for part in counts:
        total.update(part)
    for part in keyed_counts:
        for key, keyed in part.items():
            once.setdefault(key, keyed)
    for keyed in once.values():
        total.update(keyed)
    return dict(sorted(total.items()))


@dataclass
class Merged:
    items: list[Any]
    rejects: list[Any]
    counts: dict[str, int]


def merge_results(parts: Iterable[ShardResult]) -> Merged:
    """The shards' results as one unsharded run would have listed and counted them."""
    parts = list(parts)
    items = [item for _, item in heapq.merge(*(p.items for p in parts), key=lambda x: x[0])]
    rejects = [reject for _, _, reject in
               heapq.merge(*(p.rejects for p in parts), key=lambda x: (x[0], x[1]))]
    return Merged(items, rejects, merged_counts([p.counts for p in parts],
                                                [p.keyed_counts for p in parts]))
