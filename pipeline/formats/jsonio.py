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


def dumps(obj: Any) -> bytes:
    """Pretty JSON (2-space indent, trailing newline), stable for the same input."""
    return orjson.dumps(to_jsonable(obj), option=_OPTIONS) + b"\n"


def dumps_line(obj: Any) -> bytes:
    """One compact JSON line for a .jsonl file."""
    return orjson.dumps(to_jsonable(obj)) + b"\n"


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
