"""Cost that matches the bill: cached prompt tokens journaled and priced at the cached rate,
batch rates, the bundled price data, old journals, answers without usage, bad price files."""

import logging
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from skillsft.pipeline.errors import SkillsftError
from skillsft.pipeline.teacher.pricing import PriceTable, load_price_file
from skillsft.testing.toy import toy_requests
from tests.teacher.test_openai_teacher import make_teacher

# A dollar per uncached prompt token, a quarter for a cached one, nothing for output.
PRICES = '{"gpt-4o-mini": {"input": 1000000, "cached_input": 250000, "output": 0}}'


def journal_lines(teacher) -> list[dict]:
    return [orjson.loads(line) for line in teacher.journal.path.read_bytes().splitlines()]


def teacher_for(server, work: Path, **overrides):
    """A teacher in a forced mode: no probe, so every call counted is a request's."""
    return make_teacher(server, work, response_format="json_schema", **overrides)


def test_cached_prompt_tokens_are_journaled_and_priced_at_the_cached_rate(
        server_factory, tmp_path: Path):
    server = server_factory(cached_prompt_share=0.5)
    price_file = tmp_path / "prices.json"
    price_file.write_text(PRICES)
    requests = toy_requests(5)
    teacher = teacher_for(server, tmp_path / "work", price_file=str(price_file))

    results, stats = teacher.run_batch(requests, stage="toy")

    answers = [r for r in journal_lines(teacher) if r["kind"] == "response"]
    assert len(answers) == 5 and all(r["cached_prompt_tokens"] > 0 for r in answers)
    assert all(r["cached_prompt_tokens"] == r["prompt_tokens"] // 2 for r in answers)
    cached = sum(r["cached_prompt_tokens"] for r in answers)
    prompt = sum(r["prompt_tokens"] for r in answers)
    assert stats.cached_prompt_tokens == cached and stats.prompt_tokens == prompt
    assert stats.cost_usd == pytest.approx((prompt - cached) + 0.25 * cached)
    assert stats.cost_usd < prompt  # what the old pricing (every prompt token at input) said

    # a re-run answers from the journal and prices the reused tokens the same way
    again, reused = teacher_for(server, tmp_path / "work", price_file=str(price_file)
                                 ).run_batch(requests, stage="toy")
    assert reused.calls_from_journal == 5 and reused.reused_cached_prompt_tokens == cached
    assert reused.reused_cost_usd == pytest.approx(stats.cost_usd)


def test_a_journal_written_before_cached_tokens_still_reads(server_factory, tmp_path: Path):
    server = server_factory(cached_prompt_share=0.5)
    price_file = tmp_path / "prices.json"
    price_file.write_text(PRICES)
    requests = toy_requests(3)
    first = teacher_for(server, tmp_path, price_file=str(price_file))
    first.run_batch(requests, stage="toy")
    old = []
    for record in journal_lines(first):  # as an older skillsft wrote them
        record.pop("cached_prompt_tokens", None)
        record.pop("usage_estimated", None)
        old.append(orjson.dumps(record))
    first.journal.path.write_bytes(b"\n".join(old) + b"\n")
    calls = server.stats.total

    results, stats = teacher_for(server, tmp_path, price_file=str(price_file)).run_batch(
        requests, stage="toy")

    assert all(r.ok and r.from_journal for r in results) and server.stats.total == calls
    assert stats.reused_cached_prompt_tokens == 0  # unknown then: billed as uncached input
    assert stats.reused_cost_usd == pytest.approx(stats.reused_prompt_tokens)


def test_answers_without_usage_are_kept_estimated_and_said_once(
        server_factory, tmp_path: Path, caplog: pytest.LogCaptureFixture):
    server = server_factory(omit_usage=True)
    teacher = teacher_for(server, tmp_path)
    with caplog.at_level(logging.WARNING, logger="skillsft.teacher"):
        results, stats = teacher.run_batch(toy_requests(4), stage="toy")

    assert all(r.ok for r in results)
    answers = [r for r in journal_lines(teacher) if r["kind"] == "response"]
    assert len(answers) == 4 and all(r["usage_estimated"] for r in answers)
    assert all(r["prompt_tokens"] > 0 and r["completion_tokens"] > 0 for r in answers)
    assert stats.prompt_tokens > 0 and stats.cost_usd is not None and stats.cost_usd > 0
    said = [r.getMessage() for r in caplog.records if "sends no `usage`" in r.getMessage()]
    assert len(said) == 1 and "gpt-4o-mini" in said[0] and "\n" not in said[0]
    assert "127.0.0.1" in said[0]


def test_bundled_prices_know_cached_and_batch_rates_and_guess_no_local_model():
    live, batch = PriceTable(), PriceTable().for_batch()
    uncached = live.cost("gpt-4o-mini", 1_000_000, 0)
    assert uncached is not None and uncached > 0
    assert live.cost("gpt-4o-mini", 1_000_000, 0, cached_tokens=1_000_000) < uncached
    assert batch.cost("gpt-4o-mini", 1_000_000, 1_000_000) < live.cost(
        "gpt-4o-mini", 1_000_000, 1_000_000)
    for local in ("gemma-3-270m", "my-local-llama", "qwen3-32b"):
        assert live.cost(local, 100, 100) is None, local
    # a price file's rates: batch at its discount unless given, cached as input unless given
    table = PriceTable({"m": (2.0, 4.0)})
    assert table.cost("m", 1_000_000, 0, cached_tokens=500_000) == pytest.approx(2.0)
    assert table.for_batch().cost("m", 1_000_000, 1_000_000) == pytest.approx(3.0)


@pytest.mark.parametrize("content, expected", [
    ('{"gpt-4o": "cheap"}', "the price of 'gpt-4o' is 'cheap'"),
    ('{"gpt-4o": {"input": 1}}', "the price of 'gpt-4o' lacks input or output"),
    ('{"gpt-4o": {"input": 1, "output": 2, "cache": 1}}', "has keys"),
    ('{"gpt-4o": [1, -2]}', "has -2, not a number of dollars >= 0"),
    ('{"batch_discount": 2, "usd_per_1m_tokens": {"gpt-4o": [1, 2]}}', "batch_discount"),
    ('[1, 2]', "expected a JSON object mapping model names to prices"),
    ('{"gpt-4o": [1, 2]', "not valid JSON"),
])
def test_a_malformed_price_file_is_one_line_naming_the_file_and_the_fix(
        tmp_path: Path, content: str, expected: str):
    path = tmp_path / "prices.json"
    path.write_text(content)
    with pytest.raises(SkillsftError) as error:
        load_price_file(path)
    message = str(error.value)
    assert str(path) in message and expected in message and "\n" not in message
    assert "fix" in message or "give [input, output]" in message or "share" in message


def test_a_dated_price_file_with_every_rate_reads(tmp_path: Path):
    path = tmp_path / "prices.json"
    path.write_text('{"as_of": "2026-11-30", "batch_discount": 0.4, "usd_per_1m_tokens": {'
                    '"a": [1, 2, 0.5], "b": {"input": 1, "output": 2, "batch_input": 0.1, '
                    '"batch_output": 0.2}}}')
    rates = load_price_file(path)
    assert rates["a"].cached_input == 0.5 and rates["a"].as_of == "2026-11-30"
    batch = PriceTable(rates).for_batch()
    assert batch.cost("a", 1_000_000, 0) == pytest.approx(0.4)
    assert batch.cost("b", 1_000_000, 1_000_000) == pytest.approx(0.3)


def test_the_price_data_is_imported_only_when_a_price_is_needed():
    code = ("import sys, skillsft.cli, skillsft.pipeline.teacher.pricing as p; "
            "before = 'genai_prices' in sys.modules; "
            "p.PriceTable().cost('gpt-4o-mini', 1, 1); "
            "print(before, 'genai_prices' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split() == ["False", "True"]
