"""Offline teacher, settings precedence, prices, the factory."""

from pathlib import Path

import pytest

from skillsft.pipeline.teacher.base import TeacherRequest
from skillsft.pipeline.teacher.factory import make_teacher
from skillsft.pipeline.teacher.offline import OfflineTeacher
from skillsft.pipeline.teacher.openai.teacher import OpenAITeacher
from skillsft.pipeline.teacher.pricing import PriceTable
from skillsft.pipeline.teacher.settings import TeacherSettings, announce
from skillsft.testing.toy import ToyAnswer


def request(kind: str, context: object, rid: str = "r1") -> TeacherRequest[ToyAnswer]:
    return TeacherRequest(rid, kind, ({"role": "user", "content": "x"},), ToyAnswer, "v1",
                          lambda: context)


def test_offline_teacher_solves_validates_and_records_failures():
    solvers = {
        "toy_ok": lambda n: ToyAnswer(summary="s", steps=["a"], score=n),
        "toy_bad": lambda n: {"summary": "", "steps": []},
        "toy_boom": lambda n: 1 / 0,
    }
    batch = [
        request("toy_ok", 3, "a"),
        request("toy_bad", 0, "b"),
        request("toy_boom", 0, "c"),
        request("no_such_kind", 0, "d"),
    ]

    results, stats = OfflineTeacher(show_progress=False, solvers=solvers).run_batch(
        batch, stage="memories")

    assert [r.request_id for r in results] == ["a", "b", "c", "d"]
    assert results[0].ok and results[0].answer.score == 3
    assert [r.error.split(":")[0] for r in results[1:]] == [
        "schema",
        "solver_error",
        "unknown_kind",
    ]
    assert stats.calls_failed == 3 and stats.failures == {
        "schema": 1,
        "solver_error": 1,
        "unknown_kind": 1,
    }
    assert stats.calls_new == 1 and stats.cost_usd == 0.0  # one answered, for free


def test_settings_precedence_flags_over_environment_over_defaults():
    env = {"OPENAI_API_KEY": "sk-env", "SKILLSFT_CONCURRENCY": "4", "DISTILL_MODEL": "o3"}
    assert TeacherSettings.resolve({}).teacher == "offline"
    from_env = TeacherSettings.resolve(env)
    assert from_env.teacher == "openai" and from_env.concurrency == 4
    assert from_env.model_for("distill") == "o3" and from_env.model_for("memories") == "gpt-4o-mini"
    flagged = TeacherSettings.resolve(env, concurrency=32, teacher="offline", model="gpt-4.1")
    assert flagged.concurrency == 32 and flagged.teacher == "offline"
    assert flagged.model_for("distill") == "gpt-4.1"
    deepseek = TeacherSettings.resolve({"DEEPSEEK_API_KEY": "sk-ds"})
    assert deepseek.base_url == "https://api.deepseek.com"
    assert deepseek.model_for("aggregate") == "deepseek-chat"


def test_the_announcement_and_repr_never_show_the_key():
    settings = TeacherSettings.resolve({"OPENAI_API_KEY": "sk-very-secret"})
    line = announce(settings, "distill")
    assert "gpt-4o-mini" in line and "api.openai.com" in line
    assert "sk-very-secret" not in line + repr(settings) + str(settings.model_dump())


def test_factory_builds_the_named_teacher(tmp_path: Path):
    offline = make_teacher(TeacherSettings.resolve({}), tmp_path, "memories")
    assert isinstance(offline, OfflineTeacher)
    online = make_teacher(TeacherSettings.resolve({"OPENAI_API_KEY": "k"}), tmp_path, "distill")
    assert isinstance(online, OpenAITeacher)
    with pytest.raises(ValueError, match="API key"):
        make_teacher(TeacherSettings.resolve({}, teacher="openai"), tmp_path, "distill")


def test_prices_dated_families_overrides_and_unknown_models(tmp_path: Path):
    table = PriceTable()  # the bundled genai-prices data
    assert table.cost("gpt-4o-mini-2024-07-18", 1_000_000, 1_000_000) == pytest.approx(0.75)
    assert table.price("gpt-4o-mini-2024-07-18") == table.price("gpt-4o-mini")
    assert table.cost("my-local-llama", 10, 10) is None
    assert table.cost("offline", 10, 10) == 0
    price_file = tmp_path / "prices.json"
    price_file.write_text('{"my-local-llama": [0, 0], "gpt-4o": [1, 2]}')
    overridden = PriceTable.with_overrides(price_file)
    assert overridden.cost("my-local-llama", 10, 10) == 0
    assert overridden.price("gpt-4o") == (1.0, 2.0)
    assert overridden.price("gpt-4o-2024-08-06") == (1.0, 2.0)  # the longest listed prefix
    assert overridden.price("gpt-4o-mini") == table.price("gpt-4o-mini")  # not gpt-4o's
    price_file.write_text('{"gpt-4o": "cheap"}')
    with pytest.raises(ValueError, match="gpt-4o"):
        PriceTable.with_overrides(price_file)
