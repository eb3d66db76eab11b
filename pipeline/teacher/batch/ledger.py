"""The record of every batch a stage submitted, so no batch is ever paid twice.

One append-only JSONL file beside the stage's journal (`teacher_<stage>.batches.jsonl`),
written like the journal: one complete write on an O_APPEND descriptor, fsynced, under an
exclusive claim (claims.py: `flock`, or a lease where `flock` cannot be trusted). Events, in the
order a submission makes them:

- `intent`: written before the batch is created, naming the uploaded input file, the
  submission id sent as batch metadata, the request keys inside and the response mode their
  bodies were made in;
- `submitted`: the provider's batch id, written as the very first thing once the create call
  returns;
- `collected`: the batch reached a final state and its results are in the journal; lists the
  keys that failed there (and why), which count against the retry limit;
- `abandoned`: an intent whose batch never reached the provider (a crash before the create
  call got through), found out by listing the provider's batches;
- `gave_up`: keys that failed in batches more often than the retry limit allows and were
  reported failed; their failure counts start again, so a later run retries them afresh (as a
  live re-run would) instead of failing them at once forever.

An intent without `submitted` is what a kill -9 between submission and journaling leaves; the
next run looks the submission id up among the provider's batches before submitting anything
(`BatchTeacher._recover`). The submission lock (`lock()`) is held from intent to `submitted`,
so an unconfirmed intent seen under the lock always belongs to a dead process. Both locks are
claims in `teacher_<stage>.batches.jsonl.claims/` (`submit`, `append`), so the lease mode of
network file systems covers them: two workers on two nodes never submit the same items.
"""

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from skillsft.pipeline.durable import write_all
from skillsft.pipeline.teacher.claims import claims_for


class LedgerEvent(BaseModel):
    model_config = ConfigDict(extra="ignore")

    event: Literal["intent", "submitted", "collected", "abandoned", "gave_up"]
    submission: str
    time: float = 0.0
    file_id: str | None = None
    batch_id: str | None = None
    keys: list[str] = Field(default_factory=list)
    mode: str | None = None  # the response mode of the bodies, on `intent`
    status: str | None = None  # the provider's final state, on `collected`
    failed: dict[str, str] = Field(default_factory=dict)  # key -> reason, on `collected`


class Submission(BaseModel):
    """Everything the ledger knows about one submission, folded from its events."""

    submission: str
    keys: list[str]
    file_id: str | None = None
    mode: str | None = None
    batch_id: str | None = None
    status: str | None = None
    collected: bool = False
    abandoned: bool = False

    @property
    def open(self) -> bool:
        """Its items may still be answered: not collected, not abandoned."""
        return not self.collected and not self.abandoned


class BatchLedger:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        claims_dir = self.path.with_name(self.path.name + ".claims")
        claims_dir.mkdir(exist_ok=True)
        self.claims = claims_for(claims_dir)
        self.submissions: dict[str, Submission] = {}
        self.failures: dict[str, list[str]] = {}  # key -> reasons, one per failed batch
        self.unreadable_lines = 0
        self.refresh()

    def refresh(self) -> None:
        """Re-read the whole file (it stays small: a few events per batch)."""
        self.submissions, self.failures, self.unreadable_lines = {}, {}, 0
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        for line in data.splitlines():
            if not line.strip():
                continue
            try:
                event = LedgerEvent.model_validate(orjson.loads(line))
            except (orjson.JSONDecodeError, ValidationError):
                self.unreadable_lines += 1  # a torn last line from a crash
                continue
            self._fold(event)

    def _fold(self, event: LedgerEvent) -> None:
        if event.event == "gave_up":
            for key in event.keys:
                self.failures.pop(key, None)
            return
        if event.event == "intent":
            self.submissions[event.submission] = Submission(
                submission=event.submission, keys=event.keys, file_id=event.file_id,
                mode=event.mode)
            return
        known = self.submissions.get(event.submission)
        if known is None:
            return
        if event.event == "submitted":
            known.batch_id = event.batch_id
        elif event.event == "collected":
            known.collected = True
            known.status = event.status
            for key, reason in event.failed.items():
                self.failures.setdefault(key, []).append(reason)
        elif event.event == "abandoned":
            known.abandoned = True

    def append(self, event: LedgerEvent) -> None:
        data = orjson.dumps(event.model_dump(exclude_defaults=True) | {"event": event.event})
        with self.claims.exclusive("append"):
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    data = b"\n" + data  # never extend a torn tail
                write_all(fd, data + b"\n")
                os.fsync(fd)
            finally:
                os.close(fd)
        self._fold(event)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Held while polling, collecting and submitting, so two processes of one stage never
        submit the same item or collect the same batch twice. A holder that dies frees it as
        its claim mode says (flock: at once; lease: at once on its host, else after the
        lease time to live)."""
        with self.claims.exclusive("submit"):
            self.refresh()
            yield

    # Questions the teacher asks ---------------------------------------------------------

    def open_submissions(self) -> list[Submission]:
        return [s for s in self.submissions.values() if s.open]

    def keys_in_open_batches(self) -> set[str]:
        return {key for s in self.open_submissions() for key in s.keys}


def ledger_path(journal_dir: Path, stage: str) -> Path:
    return Path(journal_dir) / f"teacher_{stage}.batches.jsonl"


def has_open_batches(journal_dir: Path, stage: str) -> bool:
    """True when an earlier --batch run left batches this stage has not collected yet."""
    path = ledger_path(journal_dir, stage)
    return path.exists() and bool(BatchLedger(path).open_submissions())
