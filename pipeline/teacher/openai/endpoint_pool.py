"""Several servers serving the same model (a vLLM per GPU node): which one takes the next call.

Each endpoint has its own client and an in-flight count; a call goes to the least loaded
healthy endpoint (ties: the one that has been sent the fewest calls, so an idle pool still
spreads). An endpoint whose probe fails, or that fails `TAKE_OUT_AFTER` calls in a row with no
HTTP answer or a 5xx, is taken out for the rest of the process, with one warning naming its
redacted URL. The last healthy endpoint is never taken out: when every server is down the calls
fail the way they do with one endpoint.

Which endpoint answered never enters the journal key: the servers serve the same model, so an
answer from any of them is the answer.
"""

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

from skillsft.pipeline.teacher.openai.endpoints import redact_url, scrub, split_urls, url_digest
from skillsft.pipeline.teacher.openai.preflight import EndpointCheck, EndpointError, check_endpoint

log = logging.getLogger("skillsft.teacher")

TAKE_OUT_AFTER = 3  # consecutive connection/5xx failures
# Endpoints taken out in this process (digests of the full URLs): the pre-flight's verdict is
# kept for the stages that run after it, in this process or in the workers it forks.
_TAKEN_OUT: set[str] = set()

ClientT = TypeVar("ClientT")


@dataclass
class Endpoint(Generic[ClientT]):
    url: str  # full: never shown, never stored
    client: ClientT
    in_flight: int = 0
    sent: int = 0
    failures_in_a_row: int = 0

    @property
    def shown(self) -> str:
        return redact_url(self.url)

    @property
    def healthy(self) -> bool:
        return url_digest(self.url) not in _TAKEN_OUT


def take_out(url: str, why: str) -> bool:
    """Take `url` out of every pool of this process; False (and nothing done) when it is
    already out. Logs one warning line naming the redacted URL."""
    digest = url_digest(url)
    if digest in _TAKEN_OUT:
        return False
    _TAKEN_OUT.add(digest)
    log.warning("endpoint %s taken out: %s; the other endpoints take its requests",
                redact_url(url), why)
    return True


def is_taken_out(url: str) -> bool:
    return url_digest(url) in _TAKEN_OUT


def forget_taken_out() -> None:
    """As in a new process (tests)."""
    _TAKEN_OUT.clear()


class EndpointPool(Generic[ClientT]):
    """One client per URL of a comma-separated base URL list."""

    def __init__(self, base_url: str, make_client: Callable[[str], ClientT]) -> None:
        self.endpoints = [Endpoint(url, make_client(url)) for url in split_urls(base_url)]
        if not self.endpoints:
            raise ValueError("no base URL given")

    def _candidates(self) -> list[Endpoint[ClientT]]:
        healthy = [endpoint for endpoint in self.endpoints if endpoint.healthy]
        return healthy or self.endpoints  # all out: fail as a single endpoint would

    def pick(self) -> Endpoint[ClientT]:
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
        if endpoint.failures_in_a_row < TAKE_OUT_AFTER or not endpoint.healthy:
            return
        if sum(other.healthy for other in self.endpoints) > 1:
            take_out(endpoint.url, f"{endpoint.failures_in_a_row} failed calls in a row "
                     f"({scrub(detail, endpoint.url)[:160]})")

    def clients(self) -> list[ClientT]:
        return [endpoint.client for endpoint in self.endpoints]


def check_endpoints(
    base_url: str, api_key: str, model: str
) -> tuple[EndpointCheck, list[str]]:
    """The pre-flight of every endpoint in the list: one that fails is taken out (its one-line
    problem is returned for the console, and logged), the others go on; when all fail, the
    first one's error (one line) is raised. Returns the first passing endpoint's check, naming
    how many of the list answer, and the take-out lines."""
    passed: list[EndpointCheck] = []
    problems: list[tuple[str, EndpointError]] = []
    urls = split_urls(base_url)
    for url in urls:
        if is_taken_out(url) and len(urls) > 1:
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
        take_out(url, str(problem))
    lines = [f"endpoint taken out: {problem}" for _, problem in problems]
    check = EndpointCheck(f"{len(passed)} of {len(urls)} endpoints ({redact_url(base_url)})",
                          model, listed=all(check.listed for check in passed))
    return check, lines
