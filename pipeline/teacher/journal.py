"""The teacher's crash-safe memory of every response it paid for.

One JSONL file per stage, append-only. Each line is one raw response (or one transport error,
kept for the record) keyed by `request_key`, the sha256 of the rendered request: model,
messages, generation parameters, answer schema and prompt version. Change any of them and the
key changes, so a stale answer is never reused; change none and a re-run costs nothing.

Durability: a record is written and fsynced before the caller sees the response, so a crash
loses at most the responses still in flight. Records are raw (text, usage, finish_reason, ...):
validation happens when a record is used, so a parser or schema fix re-validates old records
without paying again.

Several processes (Luigi workers) share one file. We chose a single shared file over
per-process files merged on read: every append is one `write()` on an `O_APPEND` descriptor,
made while holding an exclusive `flock` on the journal, which serialises writers even on
filesystems where large appends could interleave; readers take a shared lock and only consume
complete lines. A crash can leave a torn last line: readers skip it (counted), and the next
writer starts its record on a fresh line so the tear never glues onto good data.

Paying twice is prevented by claims: before calling the model for a key, a process takes a
non-blocking `flock` on `<journal>.claims/<key>.lock`. The kernel drops the lock when its holder
dies, so a crashed claimant (even kill -9) never blocks anyone. A waiter re-reads the journal
once the claim is free and calls only if the answer is still missing. The claimant unlinks the
lock file before releasing it; a taker checks that the file it locked is still the one at the
path (same inode), which closes the unlink race.
"""

import asyncio
import fcntl
import hashlib
import logging
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

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
    latency_s: float = 0.0
    time: float = 0.0  # unix seconds when the response arrived
    response_mode: str | None = None
    error: str | None = None


@dataclass
class Claim:
    """Exclusive right to call the model for one key, held until `release`."""

    path: Path
    fd: int

    def release(self) -> None:
        try:
            self.path.unlink(missing_ok=True)
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)


class Journal:
    """Append-only JSONL journal with an in-memory index of the responses read so far."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.claims_dir = self.path.with_name(self.path.name + ".claims")
        self.claims_dir.mkdir(exist_ok=True)
        self._offset = 0
        self._line_number = 0
        self._responses: dict[str, list[JournalRecord]] = {}
        self._failures: dict[str, list[str]] = {}
        self._seen: set[str] = set()  # record ids already indexed (ours are indexed on write)
        self.skipped_lines = 0
        self._pending: list[tuple[bytes, asyncio.Future[None]]] = []
        self._flushing = False
        self.refresh()

    # Reading -------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Read whatever complete lines other writers (or we) appended since the last read."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            size = os.fstat(fd).st_size
            data = os.pread(fd, size - self._offset, self._offset) if size > self._offset else b""
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        end = data.rfind(b"\n")
        if end < 0:
            return  # nothing complete yet (or only a torn tail)
        for line in data[: end + 1].splitlines():
            self._line_number += 1
            if line.strip():
                self._index_line(line)
        self._offset += end + 1

    def _index_line(self, line: bytes) -> None:
        try:
            record = JournalRecord.model_validate(orjson.loads(line))
        except (orjson.JSONDecodeError, ValidationError):
            self.skipped_lines += 1
            log.warning(
                "%s:%d: skipped an unreadable journal line (torn by a crash?); "
                "its request will be called again if needed",
                self.path,
                self._line_number,
            )
            return
        self._remember(record)

    def latest_response(self, key: str) -> JournalRecord | None:
        """The newest raw response for a key; errors are never returned."""
        records = self._responses.get(key)
        return records[-1] if records else None

    def failures(self, key: str) -> list[str]:
        """The errors of the runs in which this request failed for good, oldest first."""
        return list(self._failures.get(key, ()))

    def __len__(self) -> int:
        return sum(len(records) for records in self._responses.values())

    # Writing -------------------------------------------------------------------------------

    def append(self, record: JournalRecord) -> None:
        """Write one record durably (fsynced) before returning."""
        self._write(orjson.dumps(record.model_dump()) + b"\n")
        self._remember(record)

    async def append_async(self, record: JournalRecord) -> None:
        """Like `append`, but concurrent callers share one write+fsync (group commit).

        Returns only once the record is on disk, so callers may use the response after it.
        """
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((orjson.dumps(record.model_dump()) + b"\n", future))
        if not self._flushing:
            self._flushing = True
            try:
                while self._pending:
                    batch, self._pending = self._pending, []
                    try:
                        await asyncio.to_thread(self._write, b"".join(line for line, _ in batch))
                    except OSError as exc:
                        for _, waiting in batch:
                            waiting.set_exception(exc)
                    else:
                        for _, waiting in batch:
                            waiting.set_result(None)
            finally:
                self._flushing = False
        await future
        self._remember(record)

    def _remember(self, record: JournalRecord) -> None:
        if record.record_id in self._seen:
            return
        self._seen.add(record.record_id)
        if record.kind == "response":
            self._responses.setdefault(record.key, []).append(record)
        elif record.kind == "failure":
            self._failures.setdefault(record.key, []).append(record.error or "unknown")

    def _write(self, data: bytes) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data  # start after a torn tail instead of extending it
            os.write(fd, data)
            os.fsync(fd)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    # Claims --------------------------------------------------------------------------------

    def try_claim(self, key: str) -> Claim | None:
        """Claim a key for this process, or None when another live process holds it."""
        path = self.claims_dir / f"{key}.lock"
        while True:
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return None
            try:
                same_file = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same_file = False
            if same_file:
                return Claim(path, fd)
            fcntl.flock(fd, fcntl.LOCK_UN)  # the holder unlinked it meanwhile: try the new one
            os.close(fd)

    async def claim(self, key: str, poll_seconds: float = 0.05) -> Claim:
        """Wait for a key's claim; the caller re-checks the journal once it holds it."""
        while (claim := self.try_claim(key)) is None:
            await asyncio.sleep(poll_seconds)
        return claim


def now() -> float:
    return time.time()
