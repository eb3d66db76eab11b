"""What a server's headers say about waiting: `Retry-After` (or `retry-after-ms`) on a 429, and
the `x-ratelimit-remaining-*`/`x-ratelimit-reset-*` budget headers of OpenAI and vLLM gateways."""

import re

import httpx2

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_reset(text: str) -> float | None:
    """An `x-ratelimit-reset-*` value in seconds: `1s`, `6m0s`, `20ms`, or a plain number."""
    try:
        return float(text)
    except ValueError:
        parts = _DURATION_PART.findall(text)
        return sum(float(n) * _SECONDS[unit] for n, unit in parts) if parts else None


def exhausted_budget_pause(headers: httpx2.Headers) -> float | None:
    """How long to hold new starts when `x-ratelimit-remaining-requests` or `-tokens` (OpenAI,
    vLLM gateways) says nothing is left: until the matching `x-ratelimit-reset-*`."""
    pauses = []
    for budget in ("requests", "tokens"):
        remaining = headers.get(f"x-ratelimit-remaining-{budget}")
        reset = headers.get(f"x-ratelimit-reset-{budget}")
        try:
            spent = remaining is not None and float(remaining) <= 0
        except ValueError:
            spent = False
        if spent and reset and (seconds := parse_reset(reset)) is not None:
            pauses.append(seconds)
    return max(pauses) if pauses else None


def parse_retry_after(headers: httpx2.Headers) -> float | None:
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is not None:
            try:
                return float(value) / divisor
            except ValueError:
                continue
    return None
