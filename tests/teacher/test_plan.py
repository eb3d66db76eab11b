"""What identifies a teacher (pipeline/teacher/plan.py): one set of settings, read by the task id
(`identity`) and the fingerprint (`shaping`), and the fingerprint's spelling kept byte for byte
for unchanged inputs."""

from typing import Any

import pytest

from skillsft.pipeline.teacher.plan import IDENTITY_SETTINGS, TeacherPlan
from skillsft.pipeline.teacher.settings import TeacherSettings

CHANGED: dict[str, Any] = {
    "teacher": "offline", "base_url": "http://elsewhere:8000/v1", "model": "other-model",
    "stage_models": {"memory": "other-model"}, "default_model": "other-default",
    "temperature": 0.9, "max_output_tokens": 77,
}


def plan_with(**settings: Any) -> TeacherPlan:
    resolved = TeacherSettings(**{"teacher": "openai", "base_url": "http://127.0.0.1:1/v1",
                                  **settings})
    return TeacherPlan(settings=resolved, models={"memory_model": "gpt-4o-mini"})


def test_the_fingerprint_spelling_of_an_unchanged_teacher_is_kept() -> None:
    assert plan_with().shaping("memories") == {
        "teacher": "openai", "base_url": "http://127.0.0.1:1/v1", "base_url_digest": "",
        "memory_model": "gpt-4o-mini", "max_output_tokens": "4096"}


@pytest.mark.parametrize("name", IDENTITY_SETTINGS)
def test_every_identity_setting_is_in_the_task_id(name: str) -> None:
    assert plan_with(**{name: CHANGED[name]}).identity() != plan_with().identity()


@pytest.mark.parametrize("name", sorted(set(IDENTITY_SETTINGS) - {
    "model", "stage_models", "default_model"}))  # the plan's per-stage model speaks for these
def test_every_identity_setting_is_in_the_fingerprint(name: str) -> None:
    assert plan_with(**{name: CHANGED[name]}).shaping("memories") != plan_with().shaping(
        "memories")


def test_pace_and_budget_settings_are_neither() -> None:
    fast = plan_with(concurrency=64, rpm=100, tpm=1000, timeout=5.0, rate_window=10.0)
    assert fast.identity() == plan_with().identity()
    assert fast.shaping("memories") == plan_with().shaping("memories")


GIVEN: dict[str, tuple[str, Any]] = {  # a flag value for each settings flag, and what it becomes
    "teacher": ("openai", "openai"), "base_url": ("http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1"),
    "model": ("m-1", "m-1"), "concurrency": ("3", 3), "max_concurrency": ("5", 5),
    "timeout": ("7.5", 7.5), "rpm": ("11", 11), "tpm": ("13", 13),
    "max_output_tokens": ("17", 17), "response_format": ("text", "text"),
    "request_deadline": ("19.5", 19.5), "retry_failed": ("4", 4),
}


@pytest.mark.parametrize("command", [["memories", "alfworld", "--input", "i", "--output", "o"],
                                     ["run", "alfworld"]])
def test_every_settings_flag_reaches_the_settings(command: list[str]) -> None:
    """The teacher flags are made from the settings model (skillsft/cli.py): each one there is
    offered, and its value arrives in the plan's settings."""
    from skillsft.cli import build_parser
    from skillsft.pipeline.options import declared
    from skillsft.settings import resolve_teacher

    names = {item.name for item in declared(TeacherSettings)}
    assert names == set(GIVEN)
    flags = [part for name, (value, _) in GIVEN.items()
             if name != "model" or command[0] != "run"
             for part in (f"--{name.replace('_', '-')}", value)]
    args = build_parser().parse_args([*command, *flags])
    settings = resolve_teacher(args, {"OPENAI_API_KEY": "sk-x"}).settings
    for name, (_, expected) in GIVEN.items():
        if name == "base_url":
            continue  # redacted and handed over by digest; its own tests cover it
        if name != "model" or command[0] != "run":
            assert getattr(settings, name) == expected, name
