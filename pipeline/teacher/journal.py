"""The teacher's crash-safe memory of every response it paid for.

One JSONL file per stage, append-only. Each line is one raw response (or one transport error,
kept for the record) keyed by `request_key`, the sha256 of the rendered request: model,
messages, generation parameters, answer schema and prompt version. Change any of them and the
key changes, so a stale answer is never reused; change none and a re-run costs nothing.

Durability: a record is written and fsynced before the caller sees the response, so a crash
loses at most the responses still in flight. Records are raw (text, usage, finish_reason, ...):
validation happens when a record is used, so a parser or schema fix re-validates old records
without paying again.

Several processes (Luigi workers, on one machine or several sharing the work dir) share one
file. We chose a single shared file over per-process files merged on read: every append is one
complete write (looped until done) on an `O_APPEND` descriptor, fsynced, made while holding the
journal's exclusive append claim, which serialises writers; readers only consume complete lines.
A crash can leave a torn last line: readers skip it (counted), and the next writer starts its
record on a fresh line so the tear never glues onto good data. The folder is fsynced after the
journal file is created, so the file itself survives a power loss.

Memory is bounded by an index, not by the journal: for each key, the byte offset and length of
its newest response line; a record is read back from disk (`pread`) when asked for. We chose
offsets over SQLite in WAL mode: the JSONL file stays the one source of truth (no second store
to keep in step after a crash), it needs no shared-memory file (SQLite's WAL needs one, which
network file systems do not provide), and a scan to rebuild the index is one sequential read.

Paying twice is prevented by claims (claims.py): before calling the model for a key, a process
takes the key's claim in `<journal>.claims/`; a waiter re-reads the journal once the claim is
free and calls only if the answer is still missing. On local file systems a request claim is a
record lock on one byte of `<journal>.claims/requests.lock` (request_claims.py) and the append
claim a `flock`; where those cannot be trusted (NFS, Lustre, ...) both are O_EXCL lease files
with a heartbeat (claims.py).
"""

import asyncio
import hashlib
import logging
import os
import threading
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from skillsft.pipeline.durable import fsync_folder, make_folder_durably, write_all
from skillsft.pipeline.teacher.claims import Claim, Claims, claims_for
from skillsft.pipeline.teacher.request_claims import RequestClaims

log = logging.getLogger("skillsft.teacher")


def request_key(
    *,
    model: str,
    messages: Sequence[Mapping[str, str]],
    parameters: Mapping[str, Any],
    answer_schema: Mapping[str, Any],
    prompt_version: str,
) -> str:
    """sha256 over everything that shapes the answer; sorted keys make it stable."""
    payload = {
        "model": model,
        "messages": list(messages),
        "parameters": dict(parameters),
        "answer_schema": answer_schema,
        "prompt_version": prompt_version,
    }
    return hashlib.sha256(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)).hexdigest()


class JournalRecord(BaseModel):
    """One line of the journal. Never holds credentials or request headers."""

    model_config = ConfigDict(extra="ignore")

    key: str
    # response: a raw answer; error: one call that failed; failure: a request that failed for
    # good in one run (after retries and re-asks), which decides whether later runs call it.
    kind: Literal["response", "error", "failure"]
    record_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    stage: str = ""
    request_id: str = ""
    model: str = ""  # the model the server says answered
    raw_text: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # Of the prompt tokens, those the provider served from its prompt cache (billed lower);
    # 0 in journals written before it was kept. usage_estimated: the server sent no usage.
    cached_prompt_tokens: int = 0
    usage_estimated: bool = False
    latency_s: float = 0.0
    time: float = 0.0  # unix seconds when the response arrived
    response_mode: str | None = None
    error: str | None = None


READ_CHUNK = 1 << 20  # the index is rebuilt by reading the journal this many bytes at a time


class Journal:
    """Append-only JSONL journal with an index of where each key's newest response lies."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        make_folder_durably(self.path.parent)
        self.claims_dir = self.path.with_name(self.path.name + ".claims")
        make_folder_durably(self.claims_dir)
        self.claims = claims_for(self.claims_dir)
        # A request claim is taken before every paid call: on a local disk it is a byte lock of
        # one file (request_claims.py), in lease mode a lease file per key like the other locks.
        self.request_claims: RequestClaims | Claims = (
            RequestClaims(self.claims_dir) if self.claims.mode == "flock" else self.claims)
        self._offset = 0  # everything before this byte has been indexed
        self._line_number = 0
        self._index: dict[str, tuple[int, int]] = {}  # key -> (offset, length) of newest response
        # key -> {offset: error} of the runs in which the request failed for good; by offset, so
        # indexing the same line twice (ours on write, then on refresh) counts it once. Small:
        # one entry per request and run that failed.
        self._failures: dict[str, dict[int, str]] = {}
        self._index_lock = threading.Lock()
        self.skipped_lines = 0
        self._pending: list[tuple[JournalRecord, asyncio.Future[None]]] = []
        self._flusher: asyncio.Task[None] | None = None  # writes what is pending (append_async)
        self.refresh()

    # Reading -------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Index whatever complete lines other writers (or we) appended since the last read.

        Reads in bounded chunks, so rebuilding the index of a large journal costs a sequential
        read and memory for the index only. Our own lines are indexed again here, which is
        harmless: an entry only ever moves to a later offset.
        """
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            size = os.fstat(fd).st_size
            while self._offset < size:
                data = os.pread(fd, min(READ_CHUNK, size - self._offset), self._offset)
                end = data.rfind(b"\n")
                if end < 0:
                    if len(data) < READ_CHUNK:
                        break  # only a torn or growing tail: wait for its newline
                    data = os.pread(fd, size - self._offset, self._offset)  # one huge line
                    end = data.rfind(b"\n")
                    if end < 0:
                        break
                start = self._offset
                for line in data[: end + 1].split(b"\n")[:-1]:
                    self._line_number += 1
                    if line.strip():
                        self._index_line(line, start)
                    start += len(line) + 1
                self._offset += end + 1
        finally:
            os.close(fd)

    def _index_line(self, line: bytes, offset: int) -> None:
        """Index one line from its key, kind and error alone: building a JournalRecord per
        line made rebuilding the index of a large journal several times slower, and the
        record is validated in full when it is read back (`latest_response`)."""
        try:
            data = orjson.loads(line)
        except orjson.JSONDecodeError:
            data = None
        if (not isinstance(data, dict) or not isinstance(data.get("key"), str)
                or data.get("kind") not in ("response", "error", "failure")):
            self._parse(line)  # counts and reports the unreadable line
            return
        if data["kind"] == "response":
            self._note(data["key"], offset, len(line))
        elif data["kind"] == "failure":
            with self._index_lock:
                self._failures.setdefault(data["key"], {})[offset] = data.get("error") or "unknown"

    def _index_record(self, record: JournalRecord, offset: int, length: int) -> None:
        if record.kind == "response":
            self._note(record.key, offset, length)
        elif record.kind == "failure":
            with self._index_lock:
                self._failures.setdefault(record.key, {})[offset] = record.error or "unknown"

    def _parse(self, line: bytes) -> JournalRecord | None:
        try:
            return JournalRecord.model_validate(orjson.loads(line))
        except (orjson.JSONDecodeError, ValidationError):
            self.skipped_lines += 1
            log.warning(
                "%s:%d: skipped an unreadable journal line (torn by a crash?); "
                "its request will be called again if needed",
                self.path,
                self._line_number,
            )
            return None

    def _note(self, key: str, offset: int, length: int) -> None:
        with self._index_lock:  # appends index from a worker thread while refresh may run
            known = self._index.get(key)
            if known is None or known[0] < offset:
                self._index[key] = (offset, length)

    def latest_response(self, key: str) -> JournalRecord | None:
        """The newest raw response for a key, read from disk; errors are never returned."""
        where = self._index.get(key)
        if where is None:
            return None
        fd = os.open(self.path, os.O_RDONLY)
        try:
            line = os.pread(fd, where[1], where[0])
        finally:
            os.close(fd)
        return JournalRecord.model_validate(orjson.loads(line))

    def failures(self, key: str) -> list[str]:
        """The errors of the runs in which this request failed for good, oldest first."""
        with self._index_lock:
            return [error for _, error in sorted(self._failures.get(key, {}).items())]

    def __len__(self) -> int:
        """How many keys have a response."""
        return len(self._index)

    # Writing -------------------------------------------------------------------------------

    def append(self, record: JournalRecord) -> None:
        """Write one record durably (fsynced) before returning."""
        self._write([record])

    async def append_async(self, record: JournalRecord) -> None:
        """Like `append`, but answers that arrive together share one write and one fsync (group
        commit). Returns only once the record is on disk, so callers may use the response after
        it; a kill before that loses only answers that nobody has used.

        The writes are made by one flusher task per event loop, not by a caller: a caller waits
        for its own batch only (not for the batches that arrive while it is written), and one
        that is cancelled leaves the others' records to be written and acknowledged.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._pending.append((record, future))
        flusher = self._flusher
        if flusher is None or flusher.done() or flusher.get_loop() is not loop:
            self._flusher = loop.create_task(self._flush_pending())
        await future

    async def _flush_pending(self) -> None:
        """Write what is pending, batch after batch, until nothing is; then end."""
        while self._pending:
            batch, self._pending = self._pending, []
            failure: Exception | None = None
            try:
                await asyncio.to_thread(self._write, [record for record, _ in batch])
            except Exception as exc:  # noqa: BLE001 - handed to every caller of the batch
                failure = exc
            for _, waiting in batch:
                if waiting.done():
                    continue  # its caller was cancelled; the record is written all the same
                if failure is None:
                    waiting.set_result(None)
                else:
                    waiting.set_exception(failure)

    def _write(self, records: Sequence[JournalRecord]) -> None:
        """Append records in one write under the append claim, fsync, then index them."""
        lines = [orjson.dumps(record.model_dump()) for record in records]
        data = b"".join(line + b"\n" for line in lines)
        with self.claims.exclusive("append"):
            created = False
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
            except FileNotFoundError:
                fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
                created = True
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    data = b"\n" + data  # start after a torn tail instead of extending it
                    size += 1
                write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            if created:
                fsync_folder(self.path.parent)
        for record, line in zip(records, lines, strict=True):
            self._index_record(record, size, len(line))
            size += len(line) + 1

    # Claims --------------------------------------------------------------------------------

    def try_claim(self, key: str) -> Claim | None:
        """Claim a key for this process, or None when another live process holds it."""
        return self.request_claims.try_claim(key)

    async def claim(self, key: str, poll_seconds: float = 0.05) -> Claim:
        """Wait for a key's claim; the caller re-checks the journal once it holds it."""
        while (claim := self.try_claim(key)) is None:
            await asyncio.sleep(poll_seconds)
        return claim

