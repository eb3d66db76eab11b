"""Request claims as byte locks of one file, and the journal's group commit."""

import asyncio
import multiprocessing
from pathlib import Path

import pytest

from skillsft.pipeline.teacher.journal import Journal, JournalRecord
from skillsft.pipeline.teacher.request_claims import LOCK_FILE, RequestClaims, key_offset


def record(key: str) -> JournalRecord:
    return JournalRecord(key=key, kind="response", raw_text="{}", finish_reason="stop")


@pytest.fixture(autouse=True)
def local_claims(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKILLSFT_JOURNAL_CLAIMS", "flock")


def test_claims_change_nothing_in_the_folder_however_many_keys(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    assert isinstance(journal.request_claims, RequestClaims)
    for index in range(300):
        claim = journal.try_claim(f"key-{index}")
        assert claim is not None
        assert journal.try_claim(f"key-{index}") is None  # held: refused in this process too
        claim.release()
        claim.release()  # twice is harmless
    assert [path.name for path in journal.claims_dir.iterdir()] == [LOCK_FILE]
    assert (journal.claims_dir / LOCK_FILE).stat().st_size == 0


def test_two_spellings_of_one_folder_are_one_holder(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "link").symlink_to(tmp_path, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    claim = Journal(tmp_path / "j.jsonl").try_claim("k")
    assert claim is not None
    assert Journal(Path("link") / "j.jsonl").try_claim("k") is None
    claim.release()


def test_keys_get_distinct_bytes() -> None:
    keys = [f"{index:064x}" for index in range(10_000)]
    assert len({key_offset(key) for key in keys}) == len(keys)


def _child(path: str, held_by_parent: str, results: "multiprocessing.Queue[object]",
           go_on: "multiprocessing.synchronize.Event") -> None:
    journal = Journal(Path(path))
    results.put(journal.try_claim(held_by_parent) is None)  # the parent's lock is not ours
    claim = journal.try_claim("child-key")
    results.put(claim is not None)
    go_on.wait(30)
    assert claim is not None
    claim.release()


def test_a_forked_child_holds_none_of_its_parents_claims_and_is_held_off_by_them(
        tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    parent_claim = journal.try_claim("parent-key")
    assert parent_claim is not None
    context = multiprocessing.get_context("fork")
    results: multiprocessing.Queue[object] = context.Queue()
    go_on = context.Event()
    child = context.Process(target=_child,
                            args=(str(journal.path), "parent-key", results, go_on))
    child.start()
    try:
        assert results.get(timeout=30) is True  # refused: the parent holds it
        assert results.get(timeout=30) is True  # the child's own claim
        assert journal.try_claim("child-key") is None  # and the parent is held off by it
    finally:
        go_on.set()
        child.join(30)
    assert child.exitcode == 0
    after = journal.try_claim("child-key")  # released by the child
    assert after is not None
    after.release()
    parent_claim.release()


class CountingJournal(Journal):
    """The real journal, counting its writes (each one write and one fsync)."""

    writes = 0

    def _write(self, records):  # type: ignore[no-untyped-def]
        type(self).writes += 1
        super()._write(records)


def test_answers_arriving_together_share_writes_and_each_is_on_disk_when_returned(
        tmp_path: Path) -> None:
    journal = CountingJournal(tmp_path / "j.jsonl")
    on_disk_when_returned: list[bool] = []

    async def one(index: int) -> None:
        await journal.append_async(record(f"k{index}"))
        # what a crash right now would leave: a fresh reader of the file
        on_disk_when_returned.append(Journal(journal.path).latest_response(f"k{index}")
                                     is not None)

    async def all_at_once() -> None:
        await asyncio.gather(*(one(index) for index in range(60)))

    asyncio.run(all_at_once())
    assert on_disk_when_returned == [True] * 60
    assert CountingJournal.writes < 60 / 2  # grouped: the first write takes one, then many
    assert len(Journal(journal.path)) == 60


def test_a_cancelled_caller_leaves_the_others_to_be_written(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl")

    async def run() -> None:
        first = asyncio.ensure_future(journal.append_async(record("first")))
        others = [asyncio.ensure_future(journal.append_async(record(f"k{i}"))) for i in range(5)]
        await asyncio.sleep(0)  # all are pending, a write is under way
        first.cancel()
        await asyncio.wait_for(asyncio.gather(*others), 30)  # hung here when the flusher
        # was the first caller: its cancellation left the rest unwritten

    asyncio.run(run())
    reread = Journal(journal.path)
    assert all(reread.latest_response(f"k{i}") is not None for i in range(5))
