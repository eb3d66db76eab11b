"""Atomic, durable target writes: the old bytes or the new, never a leftover temporary file."""

import os
from pathlib import Path

import pytest

from skillsft.tasks.targets import write_bytes_atomically


def test_write_replaces_the_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "out" / "data.json"
    write_bytes_atomically(target, b"old")
    write_bytes_atomically(target, b"x" * 5_000_000)
    assert target.read_bytes() == b"x" * 5_000_000
    assert [p.name for p in target.parent.iterdir()] == ["data.json"]


def test_a_failed_write_keeps_the_old_bytes(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "data.json"
    write_bytes_atomically(target, b"old")

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError):
        write_bytes_atomically(target, b"new")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["data.json"]


def test_a_short_write_is_completed(tmp_path: Path, monkeypatch) -> None:
    real_write = os.write

    def one_byte_at_a_time(fd: int, data) -> int:
        return real_write(fd, bytes(data[:1]))

    monkeypatch.setattr(os, "write", one_byte_at_a_time)
    target = tmp_path / "data.json"
    write_bytes_atomically(target, b"0123456789")
    assert target.read_bytes() == b"0123456789"
