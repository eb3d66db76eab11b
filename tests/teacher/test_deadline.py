"""No request holds a run for longer than its deadline, retries and backoffs included, and the
progress shows what is in flight."""

from pathlib import Path

from skillsft.pipeline.teacher.base import TeacherResult
from skillsft.pipeline.teacher.openai.teacher import OpenAITeacher
from skillsft.pipeline.teacher.progress import BatchTracker
from skillsft.pipeline.teacher.settings import TeacherSettings, announce
from skillsft.testing.toy import toy_requests
from tests.support.fixtures import TEST_API_KEY


def test_a_server_that_never_answers_costs_at_most_the_deadline(server_factory, tmp_path: Path):
    server = server_factory(p_hang=1.0, hang_seconds=3.0)
    settings = TeacherSettings.resolve({}, **{
        "teacher": "openai", "api_key": TEST_API_KEY, "base_url": server.base_url,
        "model": "gpt-4o-mini", "timeout": 0.4, "max_retries": 50, "request_deadline": 1.5,
        "response_format": "json_schema", "show_progress": False})
    results, stats = OpenAITeacher(settings, tmp_path, "toy").run_batch(
        toy_requests(2), stage="toy")

    assert all(not r.ok for r in results)
    assert all("gave up at the 2s request deadline" in r.error for r in results), results
    assert stats.failures == {"timeout": 2}
    # 50 retries were allowed; the deadline stopped each request after a few 0.4 s attempts
    assert server.stats.total <= 2 * 4


def test_the_deadline_is_printed_and_bounded_by_default() -> None:
    settings = TeacherSettings.resolve({}, teacher="openai", api_key="k", timeout=60.0,
                                       max_retries=2)
    assert settings.deadline() == 60.0 * 3 + 30.0 * 2
    assert "each request given up after 240s at most" in announce(settings, "this run")


def test_the_progress_shows_calls_in_flight_and_the_oldest_age() -> None:
    tracker = BatchTracker("toy", "m", 3, show_progress=False)
    assert tracker.postfix()["in_flight"] == "0" and tracker.postfix()["oldest"] == "-"
    tracker.call_started("a", 0.0)  # monotonic 0: a call started long ago
    tracker.call_started("b", 10**12)
    assert tracker.postfix()["in_flight"] == "2"
    assert tracker.postfix()["oldest"].endswith("s") and tracker.postfix()["oldest"] != "0s"
    tracker.call_ended("a")
    tracker.call_ended("b")
    assert tracker.postfix()["in_flight"] == "0"


def test_the_bar_ends_with_the_final_figures_however_fast_the_calls_came(capsys) -> None:
    tracker = BatchTracker("toy", "m", 40, show_progress=True)
    for index in range(40):  # well within one refresh interval of the figures
        tracker.call_started(f"r{index}", 0.0)
        tracker.call_ended(f"r{index}")
        tracker.finished(TeacherResult(request_id=f"r{index}",
                                       answer=None if index % 10 == 0 else {"ok": 1},
                                       error="timeout: slow" if index % 10 == 0 else None))
    tracker.close()
    last = capsys.readouterr().err.rstrip().split("\r")[-1]
    assert "done=36" in last and "failed=4" in last and "in_flight=0" in last, last
