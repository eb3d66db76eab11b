"""The skill bank's shape: sizes asked at the last reduction level, over-long answers cut to the
size, placeholders and short sections reported, and a size change re-asking only its section,
against the local OpenAI-compatible server."""

import json
import re
from pathlib import Path
from typing import Any

import pytest

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.envs.prompt_profiles import BankShape, CountRange
from skillsft.pipeline.formats.rollouts.selection import SelectionOptions
from skillsft.pipeline.stages.aggregate import AggregateOptions, aggregate_memories, build_tracks
from skillsft.pipeline.stages.memories import MemoryOptions, generate_memories
from skillsft.pipeline.stages.parse import parse_rollouts
from skillsft.pipeline.teacher.offline import OfflineTeacher
from skillsft.pipeline.teacher.openai.teacher import OpenAITeacher
from skillsft.pipeline.teacher.settings import TeacherSettings
from skillsft.testing.openai_server import is_probe
from tests.support.fixtures import TEST_API_KEY

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "rollouts"
ASKED = re.compile(
    r"Return (?:exactly (\d+)|between (\d+) and (\d+)|at most (\d+)) (skills|mistakes)")


def _memories():
    spec = get_env("alfworld")
    records = parse_rollouts(EXAMPLES / "alfworld", spec, SelectionOptions(include_mixed=True),
                             workers=1).records
    return generate_memories(records, spec, MemoryOptions(all_trajectories=True),
                             OfflineTeacher(show_progress=False)).records


def generous(body: dict[str, Any]) -> str:
    """Two more entries than the prompt allows, named after the prompt's scope; the first one
    keeps a placeholder, as a careless model would."""
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    found = ASKED.search(system)
    assert found, system
    exact, _, high, most, noun = found.groups()
    count = int(exact or high or most) + 2
    scope = re.search(r"Scope: (.+)", user).group(1)
    if noun == "mistakes":
        return json.dumps({"mistakes": [
            {"description": f"{scope} mistake {i}" + (" at [Location]" if i == 0 else ""),
             "why_it_happens": "w", "how_to_avoid": "h", "support": 1} for i in range(count)]})
    return json.dumps({"skills": [
        {"title": f"{scope} skill {i}", "principle": "p" + (" [Object_1]" if i == 0 else ""),
         "when_to_apply": "w", "support": 1} for i in range(count)]})


def _teacher(server, journal: Path) -> OpenAITeacher:
    settings = TeacherSettings.resolve({}, teacher="openai", api_key=TEST_API_KEY,
                                       base_url=server.base_url, model="gpt-4o-mini",
                                       concurrency=4, timeout=5.0, show_progress=False)
    return OpenAITeacher(settings, journal, "aggregate")


def test_sections_end_at_their_size_and_slips_are_counted(server_factory, tmp_path) -> None:
    server = server_factory(responder=generous)
    spec, memories = get_env("alfworld"), _memories()
    result = aggregate_memories(memories, spec, AggregateOptions(), _teacher(server, tmp_path))
    bank = result.records[0]
    assert len(bank.general_skills) == 7 and len(bank.common_mistakes) == 5
    filled = {c: s for c, s in bank.task_specific_skills.items() if s}
    assert filled and all(len(s) == 6 for s in filled.values())
    # general skills are about every task, category skills about their own category
    assert bank.general_skills[0].title.startswith("general principles")
    assert all(s[0].title.startswith(f"skills for {spec.label(c)}") for c, s in filled.items())
    check = bank.metadata["shape_check"]
    assert check["placeholder_slips"] == 2 + len(filled)  # general, mistakes, each category
    assert check["sections_off_shape"] == {}
    assert result.counts["bank_placeholder_slips"] == check["placeholder_slips"]


def test_a_size_change_re_asks_only_its_section(server_factory, tmp_path) -> None:
    server = server_factory(responder=generous)
    spec, memories = get_env("alfworld"), _memories()
    aggregate_memories(memories, spec, AggregateOptions(), _teacher(server, tmp_path))

    def stage_requests() -> int:  # the response-mode probes (negotiation.py) do not count
        return sum(not is_probe(body) for body in server.stats.bodies)

    paid = stage_requests()
    shape = BankShape(general=CountRange(2, 3))
    bank = aggregate_memories(memories, spec, AggregateOptions(shape=shape),
                              _teacher(server, tmp_path)).records[0]
    general_calls = 1  # a small corpus: one call per track
    assert stage_requests() == paid + general_calls
    assert len(bank.general_skills) == 3 and len(bank.common_mistakes) == 5
    last = [body for body in server.stats.bodies if not is_probe(body)][-1]
    assert "Return between 2 and 3 skills" in last["messages"][0]["content"]


@pytest.mark.parametrize("text,expected", [("5-7", (5, 7)), ("5", (5, 5)), (" 2-3 ", (2, 3))])
def test_count_ranges_parse(text: str, expected: tuple[int, int]) -> None:
    parsed = CountRange.parse(text)
    assert (parsed.low, parsed.high) == expected


@pytest.mark.parametrize("text", ["x", "7-5", "0", "3-"])
def test_bad_count_ranges_say_what_is_expected(text: str) -> None:
    with pytest.raises(ValueError, match=r"N-M|low <= high"):
        CountRange.parse(text)


def test_only_successes_feed_category_skills() -> None:
    spec, memories = get_env("alfworld"), _memories()
    tracks, counts = build_tracks(memories, spec)
    for track in tracks:
        if track.name.startswith("category:"):
            assert all("pattern" in item for item in track.items), track.name
    assert any(counts[k] for k in counts if k.endswith(":failure"))
