"""Posting a prepared chat body to one endpoint, without the SDK's per-request work.

`AsyncOpenAI.post` re-derives everything on every call: it copies its request options twice,
merges the default and auth headers again, parses the URL and the query again, and wraps the
answer for casting. For a body we already hold as bytes (chat_request.py) all of that comes out
the same each time, and after HTTP itself it was the largest share of the client's CPU per
request. A `ChatPoster` takes the URL, headers and timeout from the client once and sends
through the client's own httpx client, so the connection pool, its limits and the runtime's
response hook (the 429 watch, runtime.py) are the ones every other call uses.

What a caller sees is what the SDK would give it: the answer's bytes, or the SDK's errors (a 4xx
or 5xx is the APIStatusError subclass the client itself builds from the response, so its
message, body and `code` are the SDK's; a timeout is APITimeoutError; any other failure to get
an answer is APIConnectionError). The client's own retries are off anyway (runtime.py).
"""

from typing import Any

import httpx2
import openai
from openai import AsyncOpenAI


class ChatPoster:
    def __init__(self, client: AsyncOpenAI, http_client: httpx2.AsyncClient, path: str) -> None:
        self.client = client
        self.http_client = http_client
        self.url = httpx2.URL(str(client.base_url).rstrip("/") + path).copy_merge_params(
            dict(client.default_query))
        self.timeout = httpx2.Timeout(client.timeout) if not isinstance(
            client.timeout, httpx2.Timeout) else client.timeout
        self._headers: dict[str, str] | None = None

    def headers(self) -> dict[str, str]:
        """The headers the SDK sends with every request (identification, auth), made once:
        the first call reads the platform, which the SDK also does once."""
        if self._headers is None:
            merged: dict[str, Any] = {**self.client.default_headers, **self.client.auth_headers,
                                      "X-Stainless-Retry-Count": "0"}
            self._headers = {name: value for name, value in merged.items()
                             if isinstance(value, str)}  # the SDK's Omit: not sent
        return self._headers

    async def post(self, body: bytes, timeout: float | None = None) -> bytes:
        """POST `body`; the answer's bytes on a 2xx, else the SDK's error.
        `timeout`: for this call instead of the client's (a request deadline that is near)."""
        request = self.http_client.build_request(
            "POST", self.url, headers=self.headers(), content=body,
            timeout=self.timeout if timeout is None else httpx2.Timeout(timeout))
        try:
            response = await self.http_client.send(request)
        except httpx2.TimeoutException as exc:
            raise openai.APITimeoutError(request=request) from exc
        except Exception as exc:  # as the SDK does: anything else is no answer
            raise openai.APIConnectionError(request=request) from exc
        if not response.is_success:  # what the SDK's raise_for_status catches
            raise self.client._make_status_error_from_response(response)  # noqa: SLF001
        return response.content
