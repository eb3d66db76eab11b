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
message, body and `code` are the SDK's, or the same built from the public classes should a
release rename the client's private builder; a timeout is APITimeoutError; any other failure to get
an answer is APIConnectionError). The client's own retries are off anyway (runtime.py).
"""

import contextlib
import json
from typing import Any

import httpx2
import openai
from openai import AsyncOpenAI


class ChatPoster:
    def __init__(self, client: AsyncOpenAI, http_client: httpx2.AsyncClient, path: str) -> None:
        self.client = client
        self.http_client = http_client
        self.url = httpx2.URL(str(client.base_url).rstrip("/") + path)
        self.timeout = httpx2.Timeout(client.timeout) if not isinstance(
            client.timeout, httpx2.Timeout) else client.timeout
        self._headers: dict[str, str] | None = None
        self._merged: tuple[httpx2.URL, httpx2.Headers, dict[str, Any]] | None = None

    def headers(self) -> dict[str, str]:
        """The headers the SDK sends with every request (identification, auth), made once:
        the first call reads the platform, which the SDK also does once."""
        if self._headers is None:
            merged: dict[str, Any] = {**self.client.default_headers, **self.client.auth_headers,
                                      "X-Stainless-Retry-Count": "0"}
            self._headers = {name: value for name, value in merged.items()
                             if isinstance(value, str)}  # the SDK's Omit: not sent
        return self._headers

    def request(self, body: bytes, timeout: float | None = None) -> httpx2.Request:
        """The request `http_client.build_request` would make for `body`, without redoing its
        merges each time: the client's headers and query never change, so they are merged
        once; its cookies (a load balancer's, say) are read on every call, as it does."""
        if self._merged is None:
            headers = httpx2.Headers(self.http_client.headers)
            headers.update(self.headers())
            # as the SDK asks for it: its default query, merged into the client's own params
            query = httpx2.QueryParams(self.http_client.params).merge(
                {name: value for name, value in self.client.default_query.items()
                 if isinstance(value, str)})
            url = self.url.copy_merge_params(query) if query else self.url
            self._merged = (url, headers, {"timeout": self.timeout.as_dict()})
        url, headers, extensions = self._merged
        if timeout is not None:
            extensions = {"timeout": httpx2.Timeout(timeout).as_dict()}
        return httpx2.Request("POST", url, content=body, headers=headers,
                              cookies=self.http_client.cookies, extensions=extensions)

    async def post(self, body: bytes, timeout: float | None = None) -> bytes:
        """POST `body`; the answer's bytes on a 2xx, else the SDK's error.
        `timeout`: for this call instead of the client's (a request deadline that is near)."""
        request = self.request(body, timeout)
        try:
            response = await self.http_client.send(request)
        except httpx2.TimeoutException as exc:
            raise openai.APITimeoutError(request=request) from exc
        except Exception as exc:  # as the SDK does: anything else is no answer
            raise openai.APIConnectionError(request=request) from exc
        if not response.is_success:  # what the SDK's raise_for_status catches
            raise status_error(self.client, response)
        return response.content


# The SDK's error class for an HTTP status (its public classes); any other 4xx is APIStatusError.
_STATUS_ERRORS: dict[int, type[openai.APIStatusError]] = {
    400: openai.BadRequestError, 401: openai.AuthenticationError,
    403: openai.PermissionDeniedError, 404: openai.NotFoundError, 409: openai.ConflictError,
    422: openai.UnprocessableEntityError, 429: openai.RateLimitError,
}


def status_error(client: AsyncOpenAI, response: httpx2.Response) -> openai.APIStatusError:
    """The error the SDK raises for this answer. The client's own builder is private
    (`_make_status_error_from_response`): used while it exists, so message, body and `code`
    are exactly the SDK's; if a release renames it, the same error is made from the public
    classes (`public_status_error`) instead of every 429 and 5xx becoming an AttributeError."""
    make = getattr(client, "_make_status_error_from_response", None)
    return make(response) if make is not None else public_status_error(response)


def public_status_error(response: httpx2.Response) -> openai.APIStatusError:
    """An answer's APIStatusError built from the SDK's public classes: the message names the
    status and, when the answer is JSON with an error message, that message; `body` is the
    JSON's `error` member (or the JSON, or the text)."""
    message = f"Error code: {response.status_code}"
    text = response.text.strip()
    body: Any = text
    with contextlib.suppress(ValueError):  # not JSON: the text is the body
        body = json.loads(text)
    data = body.get("error", body) if isinstance(body, dict) else body
    said = data.get("message") if isinstance(data, dict) else None
    if isinstance(body, dict) and isinstance(said, str) and said:
        message = f"{message} - {said}"
    status = response.status_code
    kind = _STATUS_ERRORS.get(status, openai.InternalServerError if status >= 500
                              else openai.APIStatusError)
    return kind(message, response=response, body=data)
