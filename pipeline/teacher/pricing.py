"""What teacher tokens cost, so a run can report dollars that match the bill.

A call is billed for its uncached prompt tokens, its cached prompt tokens (providers with
prompt caching bill them at a fraction of the input rate; the server reports them as
`usage.prompt_tokens_details.cached_tokens`, and the journal keeps them) and its completion
tokens; a Batch API call at the provider's batch rates. Two sources, first match wins:

1. `--prices FILE` (and explicit overrides), looked up by exact model name, else as a dated
   snapshot of a listed name (`gpt-4o-2024-08-06` -> `gpt-4o`; `gpt-4o-mini` is not `gpt-4o`). An
   entry is `[input, output]`, `[input, output, cached_input]` or an object with `input`,
   `output` and optionally `cached_input`, `batch_input`, `batch_output`, all USD per 1M tokens;
   the file may say `as_of` (the date its prices were read) and `batch_discount` (batch rates
   not given: that share of the live rate, default 0.5). Cached input not given bills as
   input, so a file never understates a cost.
2. The price data bundled with the `genai-prices` package (imported on first use, never
   updated over the network): cached-input and batch rates per model, each rate with the date
   it took effect, so a call is priced at the rates of the day it was made. A model is found by
   its name among the providers that own such names (gpt-*, claude-*, deepseek-*, gemini-*,
   ...); a name no provider owns (a local model) is not guessed.

A model found in neither has cost `None`: an unknown price is reported as unknown.
"""

import datetime
import functools
import importlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from skillsft.pipeline.errors import ConfigError
from skillsft.pipeline.formats import jsonio

PRICE_PACKAGE = "genai-prices"
DEFAULT_BATCH_DISCOUNT = 0.5  # a price file's batch rates, when it gives none
_MILLION = 1_000_000


@dataclass(frozen=True)
class Rates:
    """USD per 1M tokens for one model, from a price file."""

    input: float
    output: float
    cached_input: float | None = None  # None: cached prompt tokens bill as input
    batch_input: float | None = None  # None: batch_discount x input
    batch_output: float | None = None
    batch_discount: float = DEFAULT_BATCH_DISCOUNT
    as_of: str = ""

    def cost(self, prompt: int, completion: int, cached: int, batch: bool) -> float:
        cached = min(cached, prompt)
        cached_rate = self.input if self.cached_input is None else self.cached_input
        rates = (self.input, self.output, cached_rate)
        if batch:
            rates = (
                self.batch_input if self.batch_input is not None else
                self.input * self.batch_discount,
                self.batch_output if self.batch_output is not None else
                self.output * self.batch_discount,
                cached_rate * self.batch_discount,
            )
        return ((prompt - cached) * rates[0] + completion * rates[1] + cached * rates[2]) / (
            _MILLION)


# Teachers that cost nothing: the offline one (teacher/offline/) answers without a model.
FREE = {"offline": Rates(0.0, 0.0)}


@functools.cache
def _price_data() -> ModuleType | None:
    """The bundled price package, imported on first use (about 0.1 s, so never at start-up);
    None when it is not installed."""
    try:
        return importlib.import_module("genai_prices")
    except ImportError:
        return None


def prices_source() -> str:
    """Where prices come from unless `--prices` names a model, for reports and estimates."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return (f"{PRICE_PACKAGE} {version(PRICE_PACKAGE)} (bundled data, the rates in force "
                "on the day of each call)")
    except PackageNotFoundError:
        return f"none ({PRICE_PACKAGE} is not installed: pip install {PRICE_PACKAGE})"


def _bundled_cost(model: str, prompt: int, completion: int, cached: int, batch: bool,
                  day: datetime.date) -> float | None:
    module = _price_data()
    if module is None:
        return None
    usage = module.Usage(input_tokens=prompt, cache_read_tokens=min(cached, prompt),
                         output_tokens=completion)
    when = datetime.datetime.combine(day, datetime.time(12), tzinfo=datetime.UTC)
    try:
        calculated = module.calc_price(usage, model, genai_request_timestamp=when,
                                       price_context={"processing": "batch"} if batch else None)
    except (LookupError, ValueError):  # no such model, or no price for these tokens
        return None
    return float(calculated.total_price)


class PriceTable:
    """Prices calls: the price file's entries first, then the bundled data (module docstring).
    `batch`: at the Batch API's rates."""

    def __init__(self, prices: Mapping[str, Rates | tuple[float, ...]] | None = None, *,
                 batch: bool = False) -> None:
        self.prices: dict[str, Rates] = {**FREE, **{
            model: rates if isinstance(rates, Rates) else Rates(*map(float, rates))
            for model, rates in (prices or {}).items()
        }}
        self.batch = batch

    @classmethod
    def with_overrides(
        cls,
        price_file: Path | None = None,
        overrides: Mapping[str, Rates | tuple[float, ...]] | None = None,
    ) -> "PriceTable":
        """The file, then explicit values (later wins), before the bundled data."""
        merged: dict[str, Rates | tuple[float, ...]] = {}
        if price_file is not None:
            merged.update(load_price_file(price_file))
        merged.update(overrides or {})
        return cls(merged)

    def for_batch(self) -> "PriceTable":
        """The same table at the Batch API's rates."""
        table = PriceTable(batch=True)
        table.prices = dict(self.prices)
        return table

    def listed(self, model: str) -> Rates | None:
        """The price file's entry for the model: exact name, else the longest name followed by
        `-` and a digit (a dated snapshot: `gpt-4o-2024-08-06` is `gpt-4o`, `gpt-4o-mini` not)."""
        if model in self.prices:
            return self.prices[model]
        matches = [name for name in self.prices if model.startswith(name + "-")
                   and model[len(name) + 1: len(name) + 2].isdigit()]
        return self.prices[max(matches, key=len)] if matches else None

    def knows(self, model: str) -> bool:
        return self.cost(model, 0, 0) is not None

    def price(self, model: str) -> tuple[float, float] | None:
        """(input, output) USD per 1M uncached tokens today, or None when unknown."""
        prompt = self.cost(model, _MILLION, 0)
        completion = self.cost(model, 0, _MILLION)
        return None if prompt is None or completion is None else (prompt, completion)

    def cost(self, model: str, prompt_tokens: int, completion_tokens: int,
             cached_tokens: int = 0, at: float | None = None) -> float | None:
        """Dollars for one call's tokens (`cached_tokens` of the prompt's were cached) at the
        rates in force at unix time `at` (None: now), or None when the price is unknown."""
        listed = self.listed(model)
        if listed is not None:
            return listed.cost(prompt_tokens, completion_tokens, cached_tokens, self.batch)
        day = datetime.datetime.fromtimestamp(time.time() if at is None else at,
                                              datetime.UTC).date()
        return _bundled_cost(model, prompt_tokens, completion_tokens, cached_tokens,
                             self.batch, day)


_FIX = ("give [input, output], [input, output, cached_input] or {\"input\": ..., \"output\": "
        "..., \"cached_input\": ...} in USD per 1M tokens (see docs/cli.md, '--prices')")
_RATE_KEYS = ("input", "output", "cached_input", "batch_input", "batch_output")


def _rates(path: Path, model: str, entry: Any, discount: float, as_of: str) -> Rates:
    def fail(why: str) -> ConfigError:
        return ConfigError(f"--prices {path}: the price of {model!r} {why}; {_FIX}")

    if isinstance(entry, dict):
        unknown = sorted(set(entry) - set(_RATE_KEYS))
        if unknown or not {"input", "output"} <= set(entry):
            raise fail(f"has keys {sorted(entry)}" if unknown else "lacks input or output")
        values = {key: entry[key] for key in _RATE_KEYS if key in entry}
    elif isinstance(entry, list | tuple) and len(entry) in (2, 3):
        values = dict(zip(_RATE_KEYS, entry, strict=False))
    else:
        raise fail(f"is {entry!r}")
    for value in values.values():
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise fail(f"has {value!r}, not a number of dollars >= 0")
    return Rates(**{key: float(value) for key, value in values.items()},
                 batch_discount=discount, as_of=as_of)


def load_price_file(path: Path) -> dict[str, Rates]:
    """Read a price file (module docstring); any problem is one ConfigError naming the file,
    the entry and the fix."""
    data = jsonio.load(path)
    table = data.get("usd_per_1m_tokens") if isinstance(data, dict) else None
    meta = data if isinstance(table, dict) else {}
    table = table if isinstance(table, dict) else data
    if not isinstance(table, dict):
        raise ConfigError(f"--prices {path}: expected a JSON object mapping model names to "
                          f"prices; {_FIX}")
    discount = meta.get("batch_discount", DEFAULT_BATCH_DISCOUNT)
    if isinstance(discount, bool) or not isinstance(discount, int | float) or not (
            0 < discount <= 1):
        raise ConfigError(f"--prices {path}: batch_discount must be a share in (0, 1], got "
                          f"{discount!r}")
    as_of = str(meta.get("as_of", ""))
    return {model: _rates(path, model, entry, float(discount), as_of)
            for model, entry in table.items()}
