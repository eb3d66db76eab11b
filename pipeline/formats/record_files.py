"""The one loader for record files (a JSON list of records) every stage reads.

A stage's input file may be ours or a user's; a few malformed records in it should not stop a
run. Every record that does not validate (or that `accept` turns down) becomes a `Reject`
naming the file, the record's position and label, what is wrong and what to do; the rest go on.
A file that is not a JSON list at all, or is recognisably another kind of skillsft file, is an
`InputError` naming the file and the file to give instead.

What differs between files (model, wording, how a record is named, which records are the same)
is data: one `RecordKind` per kind of file.
"""

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any, Generic, TypeVar

import orjson
from pydantic import ValidationError

from skillsft.pipeline.errors import InputError, UnreadableFile
from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.formats.file_kinds import check_kind
from skillsft.pipeline.formats.record_stream import NotAnArray, iter_array
from skillsft.schemas import Conversation, Reject, SearchTrajectorySet, TrajectorySet
from skillsft.schemas.memory import Memory

T = TypeVar("T")
TrajectoryRecord = TrajectorySet | SearchTrajectorySet


@dataclass(frozen=True)
class RecordKind(Generic[T]):
    name: str  # as file_kinds names it: "processed trajectories"
    section: str  # its section in docs/formats.md
    reason: str  # the reject reason of a record that does not validate
    fix_record: str  # what the user does about such a record
    validate: Callable[[Any], T]
    label: Callable[[Any], str]  # how a raw record is named in messages: "env env003"
    # Records with the same identity are used once (counted as `duplicate_<identity_name>`).
    identity: Callable[[T], str] | None = None
    identity_name: str = ""


@dataclass
class LoadedRecords(Generic[T]):
    records: list[T]
    rejects: list[Reject] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    # Where each record and each reject stood in its file (a shard's merge orders by them).
    positions: list[int] = field(default_factory=list)
    reject_positions: list[int] = field(default_factory=list)


def as_trajectory_record(raw: Any) -> TrajectoryRecord:
    """Search records are recognised by their `outcome` field (FORMATS.md section 3)."""
    if isinstance(raw, TrajectorySet | SearchTrajectorySet):
        return raw
    model = SearchTrajectorySet if isinstance(raw, dict) and "outcome" in raw else TrajectorySet
    return model.model_validate(raw)


def _field(name: str) -> Callable[[Any], str]:
    def label(raw: Any) -> str:
        value = raw.get(name) if isinstance(raw, dict) else None
        return f"env {value if value is not None else '?'}"

    return label


def _conversation_label(raw: Any) -> str:
    info = raw.get("extra_info") if isinstance(raw, dict) else None
    env_id = info.get("env_id") if isinstance(info, dict) else None
    return f"env {env_id or '?'}"


TRAJECTORIES: RecordKind[TrajectoryRecord] = RecordKind(
    name="processed trajectories", section="Processed trajectories", reason="invalid_record",
    fix_record="fix or remove this record", validate=as_trajectory_record,
    label=_field("env_id"),
)
MEMORIES: RecordKind[Memory] = RecordKind(
    name="skill memories", section="Skill memories", reason="invalid_memory",
    fix_record="fix or remove this record, or regenerate it with `skillsft memories`",
    validate=Memory.model_validate, label=_field("origin_env_id"),
    identity=lambda memory: memory.memory_id, identity_name="memory_id",
)
CONVERSATIONS: RecordKind[Conversation] = RecordKind(
    name="distilled conversations", section="Distilled conversations",
    reason="invalid_conversation",
    fix_record="fix it or regenerate it with `skillsft distill`",
    validate=Conversation.model_validate, label=_conversation_label,
)

# A check a stage adds for its own setting (a memory of another environment): the reject
# reason and detail when the record is turned down, None when it is fine.
Accept = Callable[[Any], tuple[str, str] | None]


def first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    return f"{'.'.join(map(str, error['loc'])) or 'record'}: {error['msg']}"


def load_records(
    paths: Sequence[str | Path] | str | Path,
    kind: RecordKind[T],
    stage: str,
    accept: Accept | None = None,
) -> LoadedRecords[T]:
    """Validated records of every file in order, and a reject for each one that is not."""
    if isinstance(paths, str | Path):
        paths = [paths]
    loaded: LoadedRecords[T] = LoadedRecords([])
    counts: Counter[str] = Counter()
    seen: set[str] = set()
    for path in paths:
        _validate(stream_records(path, kind), str(path), kind, stage, accept, loaded, counts,
                  seen)
    loaded.counts = dict(sorted(counts.items()))
    return loaded


def iter_records(path: str | Path, kind: RecordKind[T], stage: str,
                 loaded: LoadedRecords[T]) -> Iterator[T]:
    """`load_records` of one file as a stream: each valid record is yielded, not kept; the
    rejects and counters gather in `loaded` (complete once the stream is exhausted), so a
    stage that reads its input once holds one record of it at a time."""
    counts: Counter[str] = Counter()
    seen: set[str] = set()
    for position, raw in enumerate(stream_records(path, kind)):
        sink: LoadedRecords[T] = LoadedRecords([])
        _validate([raw], str(path), kind, stage, None, sink, counts, seen, [position])
        loaded.rejects.extend(sink.rejects)
        loaded.reject_positions.extend(sink.reject_positions)
        loaded.counts = dict(sorted(counts.items()))
        yield from sink.records


def stream_records(path: str | Path, kind: RecordKind[Any]) -> Iterator[Any]:
    """The raw records of one file, one at a time (the file is never held whole), after the
    same checks `jsonio.load` + `check_kind` make: the first record tells a file of another
    kind, and a file that is not a list is an `InputError` naming what to give instead."""
    records = _raw_records(path)
    try:
        first = next(records)
    except StopIteration:
        return
    except NotAnArray:
        data = jsonio.load(path)  # not a list: small enough to say what it is instead
        check_kind(path, data, kind.name)
        raise InputError(
            f"{path}: expected a JSON list of {kind.name} (docs/formats.md, "
            f"'{kind.section}'), got {type(data).__name__}"
        ) from None
    check_kind(path, [first], kind.name)
    yield from chain([first], records)


def _raw_records(path: str | Path) -> Iterator[Any]:
    try:
        yield from iter_array(path)
    except orjson.JSONDecodeError as exc:
        raise UnreadableFile(
            f"{path}: not valid JSON ({exc}); fix or regenerate this file"
        ) from exc


def validate_records(
    data: Sequence[Any], source: str, kind: RecordKind[T], stage: str,
    positions: Sequence[int],
) -> LoadedRecords[T]:
    """`load_records` for records already read: one shard of the file `source`, each at its
    position in that file (so rejects name the same record an unsharded load would)."""
    loaded: LoadedRecords[T] = LoadedRecords([])
    counts: Counter[str] = Counter()
    _validate(data, source, kind, stage, None, loaded, counts, set(), positions)
    loaded.counts = dict(sorted(counts.items()))
    return loaded


def _validate(
    data: Iterable[Any], path: str, kind: RecordKind[T], stage: str, accept: Accept | None,
    loaded: LoadedRecords[T], counts: Counter[str], seen: set[str],
    positions: Sequence[int] | None = None,
) -> None:
    def reject(path: str | Path, reason: str, detail: str, position: int) -> None:
        loaded.rejects.append(Reject(stage=stage, file=str(path), reason=reason, detail=detail))
        loaded.reject_positions.append(position)
        counts[f"rejected_{reason}"] += 1

    for offset, raw in enumerate(data):
        position = positions[offset] if positions is not None else offset
        counts["records_read"] += 1
        where = f"record {position} ({kind.label(raw)})"
        try:
            record = kind.validate(raw)
        except ValidationError as exc:
            reject(path, kind.reason, f"{where}: {first_error(exc)}; {kind.fix_record}",
                   position)
            continue
        refused = accept(record) if accept else None
        if refused is not None:
            reject(path, refused[0], f"{where}: {refused[1]}", position)
            continue
        if kind.identity is not None:
            key = kind.identity(record)
            if key in seen:
                counts[f"duplicate_{kind.identity_name}"] += 1
                continue
            seen.add(key)
        loaded.records.append(record)
        loaded.positions.append(position)
