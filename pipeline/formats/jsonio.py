"""JSON in and out with orjson, one way for every stage, so outputs are byte-identical per input.

Writers return bytes; making them durable and atomic is the caller's job (Luigi targets in
tasks/), which keeps this module free of any I/O policy.
"""

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel

from skillsft.pipeline.errors import UnreadableFile

_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS


def to_jsonable(obj: Any) -> Any:
    """Turn models (and lists/dicts of them) into plain JSON data, field aliases applied."""
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json", by_alias=True)
    if isinstance(obj, list | tuple):
        return [to_jsonable(item) for item in obj]
    if isinstance(obj, dict):
        return {key: to_jsonable(value) for key, value in obj.items()}
    return obj


def _model_data(obj: Any) -> Any:
    """orjson's hook for what it cannot serialise itself: a model becomes what `to_jsonable`
    makes of it. orjson walks lists, tuples and dicts natively, so a record's plain parts cost
    no Python call per value (walking them with `to_jsonable` was most of flatten's output
    CPU); the bytes are the same as `orjson.dumps(to_jsonable(obj))`."""
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json", by_alias=True)
    raise TypeError(f"Type is not JSON serializable: {type(obj).__name__}")


def encode(obj: Any, option: int = 0) -> bytes:
    """`orjson.dumps(to_jsonable(obj), option=option)`, models converted as orjson meets them."""
    return orjson.dumps(obj, default=_model_data, option=option)


def dumps(obj: Any) -> bytes:
    """Pretty JSON (2-space indent, trailing newline), stable for the same input."""
    return encode(obj, _OPTIONS) + b"\n"


def dumps_line(obj: Any) -> bytes:
    """One compact JSON line for a .jsonl file."""
    return encode(obj) + b"\n"


def dumps_lines(objs: Iterable[Any]) -> bytes:
    return b"".join(dumps_line(obj) for obj in objs)


def load(path: str | Path) -> Any:
    """Read a JSON file; the error names the file so the user knows which one is broken."""
    data = Path(path).read_bytes()
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise UnreadableFile(
            f"{path}: not valid JSON ({exc}); fix or regenerate this file"
        ) from exc
