"""Run one openai-teacher batch of toy requests in its own process (kill -9 tests).

    python -m tests.support.teacher_run --base-url URL --work-dir DIR --count N [--concurrency C]
        [--batch]

Prints one JSON line with the outcome counts when the batch finishes.
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
    )
    teacher = (
        BatchTeacher(settings, args.work_dir, "toy", BatchOptions(wait=True, poll_seconds=0.01))
        if args.batch
        else OpenAITeacher(settings, args.work_dir, "toy")
    )
    results, stats = teacher.run_batch(toy_requests(args.count, args.prompt_version),
                                      stage="toy")
    print(
        json.dumps(
            {
                "ok": sum(result.ok for result in results),
                "failed": sum(not result.ok for result in results),
                "from_journal": stats.calls_from_journal,
                "calls_new": stats.calls_new,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
