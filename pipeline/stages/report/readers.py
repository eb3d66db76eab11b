"""Reading a work dir's files for the report (and publishing), one record at a time.

Nothing here raises on a bad file: an unreadable manifest, reject line, corpus record or
provenance line becomes a warning naming the file and line. The streams (`corpus_records`,
`jsonl_records`) note what they could not read in a `Read` as they go, so a caller (the
report's tallies, publishing's passes) can go through a corpus of any size holding one record.
"""

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from skillsft.pipeline import workdir
from skillsft.pipeline.formats.record_stream import NotAnArray, iter_array
from skillsft.schemas.base import OpenModel
from skillsft.schemas.conversation import AlpacaRecord

# The work dir's names belong to pipeline/workdir.py; kept under these names for readers here.
REJECTS_FILE = workdir.REJECTS["parse"]  # every rejects file ends with it
DISTILLED_FILE = workdir.DISTILLED
HUB_DIR = workdir.HUB_DIR

corpus_file = workdir.corpus
corpus_lines_file = workdir.corpus_lines
provenance_file = workdir.provenance


class Provenance(OpenModel):
    """One line of `<env>_sft_provenance.jsonl`: where the corpus record on the same line of
    the corpus came from. Written by stage 4; read tolerantly (extra keys are kept)."""

    trajectory_id: str
    task_type: str
    turn: int
    num_steps: int
    source: str
    skill_ids: list[str] | None = None  # the items the instruction shows (None: older file)


@dataclass
class Read:
    """What reading one file gave besides its records: warnings to show, whether it could be
    read at all (`found`), and how many records were usable."""

    warnings: list[str] = field(default_factory=list)
    found: bool = True
    count: int = 0


@dataclass
class Loaded:
    """Records read from one file plus what could not be read (as warnings to show)."""

    items: list[Any] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    found: bool = True


def corpus_records(work_dir: Path, env: str, read: Read) -> Iterator[tuple[int, AlpacaRecord]]:
    """(position, record) of each alpaca record of `<env>_sft_data.json`; an invalid record is
    skipped with a warning. A missing or unparseable file sets `read.found = False` (the
    caller decides whether that is fatal: the report shows it, publishing refuses to go on);
    a file broken midway does so after the records before the break."""
    path = Path(work_dir) / corpus_file(env)
    if not path.is_file():
        read.found = False
        read.warnings.append(f"{path}: corpus not found (run stage 4 first)")
        return
    try:
        for index, raw in enumerate(iter_array(path)):
            try:
                record = AlpacaRecord.model_validate(raw)
            except ValidationError as exc:
                read.warnings.append(
                    f"{path}: record {index} skipped, not an alpaca record "
                    f"({exc.errors()[0]['msg']}); fix or regenerate it with stage 4"
                )
                continue
            read.count += 1
            yield index, record
    except orjson.JSONDecodeError as exc:
        read.found = False
        read.warnings.append(f"{path}: not valid JSON ({exc}); re-run stage 4")
    except NotAnArray:
        read.found = False
        read.warnings.append(f"{path}: expected a JSON list of records")


def jsonl_records(path: Path, model: type[Any], read: Read) -> Iterator[Any]:
    """Validated lines of a JSONL file; a bad line is a warning with its line number."""
    if not path.is_file():
        read.found = False
        return
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                item = model.model_validate(orjson.loads(line))
            except (orjson.JSONDecodeError, ValidationError) as exc:
                reason = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
                read.warnings.append(f"{path}:{number}: line skipped ({reason}); fix or delete it")
                continue
            read.count += 1
            yield item


def load_manifests(work_dir: Path) -> Loaded:
    """(output name, manifest dict) pairs, sorted by output name; one that cannot be used is a
    warning."""
    loaded = Loaded()
    for name, manifest in workdir.read_manifests(Path(work_dir)):
        if isinstance(manifest, str):
            loaded.warnings.append(manifest)
        else:
            loaded.items.append((name, manifest))
    return loaded


def published_rows(work_dir: Path, env: str) -> dict[str, int]:
    """Rows per split in the exported parquet shards (`hub/<env>/<split>-*.parquet`)."""
    shards = sorted((Path(work_dir) / HUB_DIR / env).glob("*.parquet"))
    if not shards:
        return {}
    import pyarrow.parquet as pq  # a datasets dependency; imported late, reports rarely need it

    rows: Counter[str] = Counter()
    for path in shards:
        split = path.name.split("-", 1)[0]
        rows[split] += pq.read_metadata(path).num_rows
    return dict(rows)


def conversation_dicts(path: Path, failed: list[str]) -> Iterator[dict[str, Any]]:
    """The distilled conversations (JSON objects) of `path`, one at a time; a file that cannot
    be read adds its reason to `failed` (no skill-use figures then)."""
    try:
        for raw in iter_array(path):
            if isinstance(raw, dict):
                yield raw
    except orjson.JSONDecodeError as exc:
        failed.append(f"{path}: not readable JSON ({exc}); no skill-use figures")
    except NotAnArray:
        failed.append("")
