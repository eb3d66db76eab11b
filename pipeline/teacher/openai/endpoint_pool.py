"""Several servers serving the same model (a vLLM per GPU node): which one takes the next call.

Each endpoint has its own client and an in-flight count; a call goes to the least loaded
healthy endpoint (ties: the one that has been sent the fewest calls, so an idle pool still
spreads). An endpoint whose pre-flight fails, or that fails `TAKE_OUT_AFTER` calls in a row with
no HTTP answer or a 5xx, is taken out for `OUT_FOR_S` seconds, with one warning naming its
redacted URL; then it is let back in on trial, with an info line: the next call goes to it, and
one more failure takes it out again for as long. The last healthy endpoint is never taken out:
when every server is down the calls fail the way they do with one endpoint.

The pool belongs to the process's teacher runtime (runtime.py), so its verdicts hold across
every batch, shard and stage of the process (and are handed to the workers it forks).

Which endpoint answered never enters the journal key: the servers serve the same model, so an
answer from any of them is the answer.
"""

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from skillsft.pipeline.teacher.openai.endpoints import redact_url, scrub, split_urls
from skillsft.pipeline.teacher.openai.preflight import EndpointCheck, EndpointError, check_endpoint

log = logging.getLogger("skillsft.teacher")

TAKE_OUT_AFTER = 3  # consecutive connection/5xx failures
OUT_FOR_S = 300.0  # how long a taken-out endpoint stays out before it is tried again

ClientT = TypeVar("ClientT")


@dataclass
class Endpoint(Generic[ClientT]):
    url: str  # full: never shown, never stored
    client: ClientT
    in_flight: int = 0
    sent: int = 0
    failures_in_a_row: int = 0
    out_until: float | None = None  # clock time it may be tried again; None: in

    @property
    def shown(self) -> str:
        return redact_url(self.url)


class EndpointPool(Generic[ClientT]):
    """One client per URL of a comma-separated base URL list, and the health of each."""

    def __init__(self, base_url: str, make_client: Callable[[str], ClientT], *,
                 out_for_s: float = OUT_FOR_S, clock: Callable[[], float] = time.monotonic,
                 out_until: dict[str, float] | None = None) -> None:
        self.out_for_s = out_for_s
        self.clock = clock
        self.endpoints = [Endpoint(url, make_client(url)) for url in split_urls(base_url)]
        if not self.endpoints:
            raise ValueError("no base URL given")
        for endpoint in self.endpoints:  # the verdicts of the process this one was forked from
            endpoint.out_until = (out_until or {}).get(endpoint.url)

    def healthy(self, endpoint: Endpoint[ClientT]) -> bool:
        """In, or out for long enough: then let back in on trial (one more failure: out)."""
        if endpoint.out_until is None:
            return True
        if self.clock() < endpoint.out_until:
            return False
        endpoint.out_until = None
        endpoint.failures_in_a_row = TAKE_OUT_AFTER - 1
        log.info("endpoint %s was out for %.0fs; trying it again (one more failure takes it "
                 "out again)", endpoint.shown, self.out_for_s)
        return True

    def is_out(self, url: str) -> bool:
        return any(e.url == url and not self.healthy(e) for e in self.endpoints)

    def take_out(self, url: str, why: str) -> bool:
        """Take `url` out for `out_for_s`; False (and nothing done) when it is already out.
        Logs one warning line naming the redacted URL."""
        endpoint = next(e for e in self.endpoints if e.url == url)
        if not self.healthy(endpoint):
            return False
        endpoint.out_until = self.clock() + self.out_for_s
        log.warning("endpoint %s taken out for %.0fs: %s; the other endpoints take its "
                    "requests", endpoint.shown, self.out_for_s, why)
        return True

    def out_until(self) -> dict[str, float]:
        """The endpoints out now and until when (handed to a forked process's pool)."""
        return {e.url: e.out_until for e in self.endpoints if e.out_until is not None}

    def _candidates(self) -> list[Endpoint[ClientT]]:
        healthy = [endpoint for endpoint in self.endpoints if self.healthy(endpoint)]
        return healthy or self.endpoints  # all out: fail as a single endpoint would

    def pick(self) -> Endpoint[ClientT]:
        if len(self.endpoints) == 1:
            return self.endpoints[0]
        return min(self._candidates(), key=lambda e: (e.in_flight, e.sent))

    @contextmanager
    def use(self) -> Iterator[Endpoint[ClientT]]:
        """The least loaded healthy endpoint, counted in flight while the caller holds it."""
        endpoint = self.pick()
        endpoint.in_flight += 1
        endpoint.sent += 1
        try:
            yield endpoint
        finally:
            endpoint.in_flight -= 1

    def succeeded(self, endpoint: Endpoint[ClientT]) -> None:
        endpoint.failures_in_a_row = 0

    def failed(self, endpoint: Endpoint[ClientT], detail: str) -> None:
        """A call got no HTTP answer or a 5xx; enough of them in a row take the endpoint out,
        unless it is the last one left."""
        endpoint.failures_in_a_row += 1
        if endpoint.failures_in_a_row < TAKE_OUT_AFTER or not self.healthy(endpoint):
            return
        if sum(self.healthy(other) for other in self.endpoints) > 1:
            self.take_out(endpoint.url, f"{endpoint.failures_in_a_row} failed calls in a row "
                          f"({scrub(detail, endpoint.url)[:160]})")

    def clients(self) -> list[ClientT]:
        return [endpoint.client for endpoint in self.endpoints]


def check_endpoints(
    pool: EndpointPool[Any], api_key: str, model: str
) -> tuple[EndpointCheck, list[str]]:
    """The pre-flight of every endpoint in the pool: one that fails is taken out (its one-line
    problem is returned for the console, and logged), the others go on; when all fail, the
    first one's error (one line) is raised. Returns the first passing endpoint's check, naming
    how many of the list answer, and the take-out lines."""
    passed: list[EndpointCheck] = []
    problems: list[tuple[str, EndpointError]] = []
    urls = [endpoint.url for endpoint in pool.endpoints]
    base_url = ",".join(urls)
    for url in urls:
        if pool.is_out(url) and len(urls) > 1:
            continue
        try:
            passed.append(check_endpoint(url, api_key, model))
        except EndpointError as problem:
            problems.append((url, problem))
    if not passed:
        if len(problems) == 1:
            raise problems[0][1]
        raise EndpointError(f"none of the {len(urls)} endpoints can be used: {problems[0][1]}")
    if len(urls) == 1:
        return passed[0], []
    for url, problem in problems:
        pool.take_out(url, str(problem))
    lines = [f"endpoint taken out: {problem}" for _, problem in problems]
    check = EndpointCheck(f"{len(passed)} of {len(urls)} endpoints ({redact_url(base_url)})",
                          model, listed=all(check.listed for check in passed))
    return check, lines
