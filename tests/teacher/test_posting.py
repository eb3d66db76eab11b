"""ChatPoster gives what the SDK's own post gives: the same answer, the same errors."""

import asyncio
from typing import Any

import httpx2
import openai
import orjson
import pytest
from openai import AsyncOpenAI
from openai._models import FinalRequestOptions
from pydantic import BaseModel

from skillsft.pipeline.teacher.openai.chat_request import body_bytes, chat_body
from skillsft.pipeline.teacher.openai.posting import ChatPoster, public_status_error

API_KEY = "sk-posting-test"
PATH = "/chat/completions"


class Plan(BaseModel):
    steps: list[str]


def body(mode: str = "json_schema", text: str = "plan a day") -> bytes:
    return body_bytes(chat_body("gpt-4o-mini", ({"role": "user", "content": text},),
                                {"temperature": 0.0, "max_tokens": 64}, mode, Plan))  # type: ignore[arg-type]


async def both(base_url: str, payload: bytes, timeout: float = 30.0) -> list[Any]:
    """What the SDK's post and ChatPoster.post each return or raise, in that order."""
    http_client = httpx2.AsyncClient()
    client = AsyncOpenAI(api_key=API_KEY, base_url=base_url, max_retries=0, timeout=timeout,
                         http_client=http_client)
    poster = ChatPoster(client, http_client, PATH)
    outcomes: list[Any] = []
    try:
        for post in (lambda: client.post(PATH, cast_to=httpx2.Response, content=payload),
                     lambda: poster.post(payload)):
            try:
                answer = await post()
            except openai.APIError as exc:
                outcomes.append(exc)
            else:
                outcomes.append(answer.content if isinstance(answer, httpx2.Response)
                                else answer)
    finally:
        await client.close()
    return outcomes


def test_an_answer_is_the_bytes_the_sdk_gets(server_factory) -> None:
    server = server_factory()
    sdk, ours = asyncio.run(both(server.base_url, body()))
    assert isinstance(ours, bytes)
    assert orjson.loads(ours)["choices"] == orjson.loads(sdk)["choices"]
    assert server.stats.raw_bodies[-1] == server.stats.raw_bodies[-2] == body()
    assert server.stats.authorization_seen == {f"Bearer {API_KEY}"}


@pytest.mark.parametrize("config, kind", [
    ({"p_rate_limit": 1.0}, openai.RateLimitError),
    ({"p_server_error": 1.0}, openai.InternalServerError),
    ({"refuse_json_schema": True}, openai.BadRequestError),
    ({"p_drop": 1.0}, openai.APIConnectionError),
])
def test_an_error_is_the_one_the_sdk_raises(server_factory, config, kind) -> None:
    server = server_factory(**config)
    sdk, ours = asyncio.run(both(server.base_url, body()))
    assert type(ours) is type(sdk) and isinstance(ours, kind)
    assert str(ours) == str(sdk)
    if isinstance(sdk, openai.APIStatusError):
        assert isinstance(ours, openai.APIStatusError)
        assert (ours.status_code, ours.code, ours.body) == (sdk.status_code, sdk.code, sdk.body)
        assert ours.response.headers.get("Retry-After") == sdk.response.headers.get(
            "Retry-After")


@pytest.mark.parametrize("config", [
    {"p_rate_limit": 1.0}, {"p_server_error": 1.0}, {"refuse_json_schema": True},
])
def test_without_the_sdks_private_builder_an_error_is_still_the_sdks(server_factory,
                                                                     config) -> None:
    """The SDK builds its errors with a private method; should a release rename it, the poster
    builds the same error from the public classes (type, message, status, code, body)."""
    server = server_factory(**config)
    sdk, _ = asyncio.run(both(server.base_url, body()))
    assert isinstance(sdk, openai.APIStatusError)
    ours = public_status_error(sdk.response)
    assert type(ours) is type(sdk) and str(ours) == str(sdk)
    assert (ours.status_code, ours.code, ours.body) == (sdk.status_code, sdk.code, sdk.body)


def test_a_timeout_is_the_sdks_timeout(server_factory) -> None:
    server = server_factory(p_hang=1.0, hang_seconds=2.0)
    sdk, ours = asyncio.run(both(server.base_url, body(), timeout=0.3))
    assert type(sdk) is type(ours) is openai.APITimeoutError


def test_a_request_is_the_one_the_sdk_would_send() -> None:
    """Same URL (query included), headers, cookies, body and timeout as the SDK's own request,
    but for the SDK's X-Stainless-Read-Timeout, a telemetry header we do not send."""
    async def compare() -> None:
        http_client = httpx2.AsyncClient(params={"tenant": "t1"}, headers={"X-Extra": "1"})
        client = AsyncOpenAI(api_key=API_KEY, base_url="http://127.0.0.1:9/v1", max_retries=0,
                             timeout=30.0, default_query={"api-version": "2"},
                             http_client=http_client)
        poster = ChatPoster(client, http_client, PATH)
        http_client.cookies.set("lb", "node-3")  # a cookie an answer set: sent from then on
        for timeout in (None, 1.5):
            ours = poster.request(body(), timeout)
            options = FinalRequestOptions.construct(  # type: ignore[call-arg]
                method="post", url=PATH, content=body(),
                **({} if timeout is None else {"timeout": timeout}))
            theirs = client._build_request(await client._prepare_options(options))
            assert (ours.method, ours.url, ours.content) == (
                theirs.method, theirs.url, theirs.content)
            theirs.headers.pop("x-stainless-read-timeout")
            assert sorted(ours.headers.multi_items()) == sorted(theirs.headers.multi_items())
            assert ours.extensions == theirs.extensions
        assert "lb=node-3" in ours.headers["cookie"]
        assert ours.url.params["api-version"] == "2" and ours.url.params["tenant"] == "t1"
        await client.close()

    asyncio.run(compare())
