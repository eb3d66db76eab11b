"""Loading processed trajectories (stage 1 output or a user's own JSON) record by record.

A user's file may hold a few malformed records; each becomes a reject naming the file and the
record, and the rest of the corpus goes on to the next stages.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from skillsft.pipeline.errors import InputError
from skillsft.pipeline.formats import jsonio
from skillsft.pipeline.formats.file_kinds import check_kind
from skillsft.schemas import Reject, SearchTrajectorySet, TrajectorySet

TrajectoryRecord = TrajectorySet | SearchTrajectorySet


@dataclass
class LoadedRecords:
    records: list[TrajectoryRecord]
    rejects: list[Reject] = field(default_factory=list)
    # Where each record and each reject stands in the file (a shard merges by them).
    positions: list[int] = field(default_factory=list)
    reject_positions: list[int] = field(default_factory=list)


def as_trajectory_record(raw: Any) -> TrajectoryRecord:
    """Search records are recognised by their `outcome` field (FORMATS.md section 3)."""
    if isinstance(raw, TrajectorySet | SearchTrajectorySet):
        return raw
    model = SearchTrajectorySet if isinstance(raw, dict) and "outcome" in raw else TrajectorySet
    return model.model_validate(raw)


def load_trajectory_records(path: str | Path, stage: str) -> LoadedRecords:
    data = jsonio.load(path)
    check_kind(path, data, "processed trajectories")
    if not isinstance(data, list):
        raise InputError(
            f"{path}: expected a JSON list of processed trajectories (docs/formats.md, "
            "'Processed trajectories'), "
            f"got {type(data).__name__}"
        )
    return validate_trajectory_records(data, path, stage)


def validate_trajectory_records(
    data: list[Any], path: str | Path, stage: str, positions: list[int] | None = None
) -> LoadedRecords:
    """Each raw record validated, or a reject naming its position in the file (`positions`:
    the records' positions in the whole file when `data` is one shard of it)."""
    loaded = LoadedRecords([])
    for offset, raw in enumerate(data):
        position = positions[offset] if positions is not None else offset
        try:
            loaded.records.append(as_trajectory_record(raw))
            loaded.positions.append(position)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(map(str, error["loc"])) or "record"
            env_id = raw.get("env_id", "?") if isinstance(raw, dict) else "?"
            loaded.rejects.append(Reject(
                stage=stage, file=str(path), line=None, reason="invalid_record",
                detail=f"record {position} (env {env_id}): {where}: {error['msg']}; fix or "
                       "remove this record",
            ))
            loaded.reject_positions.append(position)
    return loaded
