"""JSON-list record files as streams: one record at a time in, one record at a time out.

A stage file (`processed_trajectories.json`, the corpus, ...) is a JSON list that can hold
every trajectory of a run; reading it with one `orjson.loads` or writing it with one
`orjson.dumps` holds the whole corpus, twice over, in memory. Here:

- `scan_array` walks a file in bounded chunks and yields the byte span of each top-level
  element, so a reader parses one record at a time and a shard can find its records again
  through an index of spans (tasks/shards.py) instead of a copy;
- `iter_array` yields the parsed elements (a record file of any layout: compact, indented,
  hand-written);
- `array_chunks` renders records as exactly the bytes `jsonio.dumps(list_of_records)` gives
  (two-space indent, trailing newline), one record at a time. JSON strings cannot hold a raw
  newline, so indenting every line of a record's own indented text by two spaces nests it one
  level deeper, byte for byte. A record may come already rendered (`RenderedElement`).

A file that is not a JSON list raises `NotAnArray` (with what it is instead, for the caller's
message); broken JSON raises `orjson.JSONDecodeError` like `orjson.loads`.
"""

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Generic, TypeVar

import orjson
from pydantic import BaseModel

from skillsft.pipeline.formats.jsonio import encode

CHUNK_BYTES = 1 << 20
ModelT = TypeVar("ModelT", bound=BaseModel)
_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS
# A whole string (skipped in one step), an unterminated one (more bytes needed), or a
# structural character.
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|"|[\[\]{},]', re.S)
_WHITESPACE = b" \t\r\n"
_NON_WHITESPACE = re.compile(rb"[^ \t\r\n]")


class NotAnArray(ValueError):
    """The file's top-level value is not a list; `kind` is the JSON type it is."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"expected a JSON list, got {kind}")
        self.kind = kind


def _kind_of(first: bytes) -> str:
    return {b"{": "dict", b'"': "str", b"t": "bool", b"f": "bool", b"n": "NoneType"}.get(
        first, "int" if first[:1].isdigit() or first == b"-" else "unknown")


class _Reader:
    """A window on a file: the bytes from `base` on, grown a chunk at a time, cut at will."""

    def __init__(self, handle: BinaryIO, chunk_bytes: int) -> None:
        self.handle, self.chunk_bytes = handle, chunk_bytes
        self.buffer = b""
        self.base = 0  # file offset of buffer[0]
        self.eof = False

    def more(self) -> bool:
        if self.eof:
            return False
        chunk = self.handle.read(self.chunk_bytes)
        self.eof = not chunk
        self.buffer += chunk
        return not self.eof

    def drop_before(self, index: int) -> int:
        """Forget the bytes before `index`; returns how far indices moved."""
        self.buffer = self.buffer[index:]
        self.base += index
        return index

    def next_char(self, at: int) -> int:
        """Index of the first non-whitespace byte from `at` (reading on), or -1 at the end."""
        while True:
            found = _NON_WHITESPACE.search(self.buffer, at)
            if found:
                return found.start()
            at = len(self.buffer)
            if not self.more():
                return -1


def scan_array(handle: BinaryIO,
               chunk_bytes: int = CHUNK_BYTES) -> Iterator[tuple[int, bytes, Any]]:
    """(byte offset, bytes, parsed value) of each top-level element of the JSON list read from
    `handle`, holding one element plus one chunk at a time.

    An indented element (`{` or `[` then a newline, as `jsonio.dumps` and `json.dump(indent=2)`
    write it) ends at the first line that starts with two spaces and its closing bracket, found
    with one `bytes.find`: no raw newline can stand inside a JSON string, so the first such
    slice that parses is the element. Any other layout is tokenised (strings skipped whole)."""
    reader = _Reader(handle, chunk_bytes)
    at = reader.next_char(0)
    if at < 0:
        raise orjson.JSONDecodeError("empty file", "", 0)
    if reader.buffer[at:at + 1] != b"[":
        raise NotAnArray(_kind_of(reader.buffer[at:at + 1]))
    at += 1
    after_comma = False
    while True:
        if at >= chunk_bytes:  # keep the window near one chunk without copying per element
            at -= reader.drop_before(at)
        at = reader.next_char(at)
        if at < 0:
            raise orjson.JSONDecodeError("unterminated list", "", reader.base + len(reader.buffer))
        if reader.buffer[at:at + 1] == b"]":
            if after_comma:
                raise orjson.JSONDecodeError("trailing comma", "", reader.base + at)
            at += 1
            break
        if reader.buffer[at:at + 1] == b",":
            raise orjson.JSONDecodeError("empty element", "", reader.base + at)
        end, value = _indented_element(reader, at)
        if end < 0:
            end = _tokenised_end(reader, at)
            value = orjson.loads(reader.buffer[at:end].rstrip(_WHITESPACE))
        element = reader.buffer[at:end].rstrip(_WHITESPACE)
        yield reader.base + at, element, value
        at = reader.next_char(end)
        separator = reader.buffer[at:at + 1] if at >= 0 else b""
        if separator == b"]":
            at += 1
            break
        if separator != b",":
            raise orjson.JSONDecodeError("expected , or ] after an element", "",
                                         reader.base + max(at, 0))
        at, after_comma = at + 1, True
    if reader.buffer[at:].strip(_WHITESPACE) or handle.read().strip(_WHITESPACE):
        raise orjson.JSONDecodeError("extra data after the list", "", reader.base + at)


def _indented_element(reader: _Reader, at: int) -> tuple[int, Any]:
    """(end, value) of an indented element starting at `at`, or (-1, None) if it is not one."""
    while len(reader.buffer) < at + 2 and reader.more():
        pass
    opener = reader.buffer[at:at + 1]
    if opener not in (b"{", b"[") or reader.buffer[at + 1:at + 2] != b"\n":
        return -1, None
    closer = b"\n  " + (b"}" if opener == b"{" else b"]")
    searched = at
    while True:
        found = reader.buffer.find(closer, searched)
        if found >= 0:
            break
        searched = max(at, len(reader.buffer) - len(closer))
        if not reader.more():
            return -1, None
    end = found + len(closer)
    try:
        return end, orjson.loads(reader.buffer[at:end])
    except orjson.JSONDecodeError:
        return -1, None


def _tokenised_end(reader: _Reader, at: int) -> int:
    """Where the element starting at `at` ends: after its closing bracket or string, or at the
    `,` or `]` after any other scalar. Reads on as needed."""
    depth = 0
    scan = at
    while True:
        token = _TOKEN.search(reader.buffer, scan)
        if token is None or token.group() == b'"':  # more bytes needed
            scan = len(reader.buffer) if token is None else token.start()
            if not reader.more():
                raise orjson.JSONDecodeError("unterminated list", "",
                                             reader.base + len(reader.buffer))
            continue
        text = token.group()
        scan = token.end()
        if text[:1] == b'"':
            if depth == 0:
                return scan
            continue
        if text in b"[{":
            depth += 1
        elif text in b"]}":
            if depth == 0:
                return token.start()
            depth -= 1
            if depth == 0:
                return scan
        elif depth == 0:  # the comma after a scalar
            return token.start()


def iter_array(path: str | Path) -> Iterator[Any]:
    """The parsed elements of the JSON list in `path`, one at a time."""
    with open(path, "rb") as handle:
        for _, _, value in scan_array(handle):
            yield value


def read_span(handle: BinaryIO, offset: int, length: int) -> Any:
    """One element found earlier by `scan_array` (an index of spans points at it)."""
    handle.seek(offset)
    return orjson.loads(handle.read(length))


def element_bytes(record: Any) -> bytes:
    """One element as it stands inside a `jsonio.dumps` list: indented one level, no comma.
    A `RenderedElement` is that already."""
    if isinstance(record, RenderedElement):
        return record.element
    return render_element(record)


def render_element(data: Any) -> bytes:
    """`element_bytes` of data not yet rendered (models, plain JSON data, dataclasses: orjson
    writes their fields in order), e.g. by a producer in a worker process."""
    return b"  " + encode(data, _OPTIONS).replace(b"\n", b"\n  ")


@dataclass(frozen=True, slots=True)
class RenderedElement(Generic[ModelT]):
    """A record its producer already rendered (`render_element`), e.g. in a worker process:
    written as it is, so the process that writes it never builds the model or renders it
    again. `model()` validates it into `model_type` for a caller that wants the object."""

    element: bytes
    model_type: type[ModelT]

    def model(self) -> ModelT:
        return self.model_type.model_validate_json(self.element)


def array_chunks(records: Iterable[Any]) -> Iterator[bytes]:
    """`jsonio.dumps(list(records))`, a record at a time."""
    first = True
    for record in records:
        yield (b"[\n" if first else b",\n") + element_bytes(record)
        first = False
    yield b"[]\n" if first else b"\n]\n"


def lines_chunks(records: Iterable[Any]) -> Iterator[bytes]:
    """`jsonio.dumps_lines(records)`, a record at a time."""
    for record in records:
        yield encode(record) + b"\n"
