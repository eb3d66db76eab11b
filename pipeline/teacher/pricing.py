"""What teacher tokens cost, so a run can report dollars next to tokens.

Prices are list prices in USD per 1M tokens (input, output), uncached input, as published by
the providers; they change, so the table is data (prices.json beside this module) with its
date, and can be overridden from a JSON file (`{"model": [input, output]}`, or a copy of
prices.json) or explicit values. A model missing from the table has
cost `None`: an unknown price is reported as unknown, never guessed.
"""

from collections.abc import Mapping
from pathlib import Path

from skillsft.pipeline.errors import ConfigError
from skillsft.pipeline.formats import jsonio

PRICE_FILE = Path(__file__).with_name("prices.json")  # the built-in table, as data
_BUILT_IN = jsonio.load(PRICE_FILE)
PRICES_AS_OF: str = _BUILT_IN["as_of"]
BATCH_DISCOUNT: float = _BUILT_IN["batch_discount"]  # the Batch API's share of the live price

# model -> (USD per 1M input tokens, USD per 1M output tokens)
DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    model: (float(pair[0]), float(pair[1]))
    for model, pair in _BUILT_IN["usd_per_1m_tokens"].items()
}


class PriceTable:
    """Looks a model up by exact name, else by the longest table name it starts with.

    The prefix rule maps dated snapshots (`gpt-4o-2024-08-06`) to their family while keeping
    `gpt-4o-mini` apart from `gpt-4o`.
    """

    def __init__(self, prices: Mapping[str, tuple[float, float]] | None = None) -> None:
        self.prices: dict[str, tuple[float, float]] = dict(DEFAULT_PRICES)
        if prices:
            self.prices.update(prices)

    @classmethod
    def with_overrides(
        cls,
        price_file: Path | None = None,
        overrides: Mapping[str, tuple[float, float]] | None = None,
    ) -> "PriceTable":
        """Defaults, then the file, then explicit values (later wins)."""
        merged: dict[str, tuple[float, float]] = {}
        if price_file is not None:
            merged.update(load_price_file(price_file))
        merged.update(overrides or {})
        return cls(merged)

    def for_batch(self) -> "PriceTable":
        """The same table at the Batch API's price (`BATCH_DISCOUNT` of the live price)."""
        table = PriceTable()
        table.prices = {model: (pair[0] * BATCH_DISCOUNT, pair[1] * BATCH_DISCOUNT)
                        for model, pair in self.prices.items()}
        return table

    def price(self, model: str) -> tuple[float, float] | None:
        if model in self.prices:
            return self.prices[model]
        matches = [name for name in self.prices if model.startswith(name + "-")]
        return self.prices[max(matches, key=len)] if matches else None

    def cost(self, model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
        """Dollars for the tokens, or None when the model's price is not known."""
        price = self.price(model)
        if price is None:
            return None
        return (prompt_tokens * price[0] + completion_tokens * price[1]) / 1_000_000


def load_price_file(path: Path) -> dict[str, tuple[float, float]]:
    """Read `{"model": [input_usd_per_1m, output_usd_per_1m]}`, or a copy of the built-in
    prices.json (the same under `usd_per_1m_tokens`); errors name the entry to fix."""
    data = jsonio.load(path)
    if isinstance(data, dict) and isinstance(data.get("usd_per_1m_tokens"), dict):
        data = data["usd_per_1m_tokens"]
    if not isinstance(data, dict):
        raise ConfigError(
            f"--prices {path}: expected an object mapping model names to [input, output]"
        )
    prices: dict[str, tuple[float, float]] = {}
    for model, pair in data.items():
        if (
            not isinstance(pair, list | tuple)
            or len(pair) != 2
            or not all(isinstance(value, int | float) and value >= 0 for value in pair)
        ):
            raise ConfigError(
                f"--prices {path}: price for {model!r} must be [input, output] USD per 1M tokens, "
                f"got {pair!r}"
            )
        prices[model] = (float(pair[0]), float(pair[1]))
    return prices
