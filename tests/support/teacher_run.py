"""Run openai-teacher batches of toy requests in their own process (kill -9 and pace tests).

    python -m tests.support.teacher_run --base-url URL --work-dir DIR --count N [--concurrency C]
        [--batch] [--batches B] [--rpm N] [--tpm N] [--rate-window S]

Prints one JSON line with the outcome counts when the batches finish.
"""

import argparse
import json
from pathlib import Path

from skillsft.pipeline.teacher.batch.teacher import BatchOptions, BatchTeacher
from skillsft.pipeline.teacher.openai.teacher import OpenAITeacher
from skillsft.pipeline.teacher.settings import TeacherSettings
from skillsft.testing.toy import toy_requests
from tests.support.fixtures import TEST_API_KEY


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--work-dir", required=True, type=Path)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--batch", action="store_true", help="through the Batch API, waiting")
    parser.add_argument("--prompt-version", default="v1", help="another version: other keys")
    parser.add_argument("--batches", type=int, default=1, help="one after another, each new")
    parser.add_argument("--rpm", type=int, default=None)
    parser.add_argument("--tpm", type=int, default=None)
    parser.add_argument("--rate-window", type=float, default=None)
    parser.add_argument("--max-output-tokens", type=int, default=None)
    args = parser.parse_args()
    settings = TeacherSettings.resolve(
        {},
        teacher="openai",
        api_key=TEST_API_KEY,
        base_url=args.base_url,
        model="gpt-4o-mini",
        concurrency=args.concurrency,
        max_concurrency=args.concurrency,  # a hard cap: the kill -9 tests count what was in flight
        timeout=5.0,
        show_progress=False,
        rpm=args.rpm,
        tpm=args.tpm,
        rate_window=args.rate_window,
        max_output_tokens=args.max_output_tokens,
    )
    teacher = (
        BatchTeacher(settings, args.work_dir, "toy", BatchOptions(wait=True, poll_seconds=0.01))
        if args.batch
        else OpenAITeacher(settings, args.work_dir, "toy")
    )
    counts = {"ok": 0, "failed": 0, "from_journal": 0, "calls_new": 0}
    for number in range(args.batches):
        version = args.prompt_version if number == 0 else f"{args.prompt_version}-{number}"
        results, stats = teacher.run_batch(toy_requests(args.count, version), stage="toy")
        counts["ok"] += sum(result.ok for result in results)
        counts["failed"] += sum(not result.ok for result in results)
        counts["from_journal"] += stats.calls_from_journal
        counts["calls_new"] += stats.calls_new
    print(json.dumps(counts), flush=True)


if __name__ == "__main__":
    main()
