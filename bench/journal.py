"""Journal memory: peak RSS of a process that opens a journal and answers every key from it,
as the journal grows 10x.

    .venv/bin/python bench/journal.py [--records 2000] [--answer-bytes 4000]

Then times `--appends` single appends (each written and fsynced before the next) with flock
claims and with lease claims (forced, as on NFS/Lustre), and prints their ratio.

Writes journals of N and 10N response lines (answers of `--answer-bytes` characters) into a
temp folder, then in a fresh child process each: (0) the baseline, Python plus the imports
only; (1) open the journal (index rebuild) and read back every key's answer. Prints the
journal size, open time, peak RSS, and the RSS above the baseline with its ratio 10N / N. An
index that keeps answers would grow like the file (10x); offsets grow with the key count only.
"""

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]

CHILD = """
import resource, sys, time
from skillsft.pipeline.teacher.journal import Journal
path, count = sys.argv[1], int(sys.argv[2])
started = time.perf_counter()
if count:
    journal = Journal(path)
    opened = time.perf_counter() - started
    assert all(journal.latest_response(f"key{i:08d}") for i in range(count))
else:
    opened = 0.0
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, opened)
"""


APPENDS = """
import sys, time
from skillsft.pipeline.teacher.journal import Journal, JournalRecord
journal = Journal(sys.argv[1])
count = int(sys.argv[2])
started = time.perf_counter()
for index in range(count):
    journal.append(JournalRecord(key=f"k{index}", kind="response", raw_text="a" * 1000))
print(count / (time.perf_counter() - started))
"""


def append_rate(path: Path, mode: str, count: int) -> float:
    out = subprocess.run([sys.executable, "-c", APPENDS, str(path), str(count)], cwd=REPO,
                         check=True, capture_output=True, text=True,
                         env={**os.environ, "SKILLSFT_JOURNAL_CLAIMS": mode}).stdout
    return float(out)


def write_journal(path: Path, records: int, answer_bytes: int) -> None:
    with path.open("wb") as handle:
        for index in range(records):
            line = {"key": f"key{index:08d}", "kind": "response", "record_id": f"r{index}",
                    "raw_text": "a" * answer_bytes, "finish_reason": "stop"}
            handle.write(orjson.dumps(line) + b"\n")


def measure(path: Path, records: int) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), str(records)], cwd=REPO,
                         check=True, capture_output=True, text=True).stdout.split()
    return int(out[0]) / 1024, float(out[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--answer-bytes", type=int, default=4000)
    parser.add_argument("--appends", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        base_rss, _ = measure(Path(folder) / "none.jsonl", 0)
        print(f"baseline (imports only): peak {base_rss:.1f} MiB")
        above = {}
        for records in (args.records, 10 * args.records):
            path = Path(folder) / f"j{records}.jsonl"
            write_journal(path, records, args.answer_bytes)
            rss, opened = measure(path, records)
            above[records] = rss - base_rss
            print(f"{records:>8} records, journal {path.stat().st_size / 2**20:8.1f} MiB: "
                  f"open {opened:6.2f} s, peak {rss:6.1f} MiB, {above[records]:6.1f} MiB above "
                  "baseline")
            path.unlink()
        small, large = above[args.records], above[10 * args.records]
        print(f"journal 10x larger -> memory above baseline {large / max(small, 0.1):.2f}x")
        rates = {mode: append_rate(Path(folder) / f"{mode}.jsonl", mode, args.appends)
                 for mode in ("flock", "lease")}
        for mode, rate in rates.items():
            print(f"{args.appends} appends with {mode} claims: {rate:8.0f} appends/s")
        print(f"lease / flock append rate: {rates['lease'] / rates['flock']:.2f}x")


if __name__ == "__main__":
    main()
