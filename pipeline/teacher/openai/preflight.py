"""Pre-flight: one cheap look at an (endpoint, model) before any paid request.

`check_endpoint` asks `GET <base>/models` with short connect and first-byte deadlines, and
turns every way that can go wrong into one line naming the (redacted) URL and the fix:
connection refused, unknown host, no answer, 401/403, a page that is not an OpenAI-compatible
API, a model the server does not serve. A server without a `/models` route (404/405) passes
this step; the response-mode probe that follows (OpenAITeacher.negotiate) is the minimal
structured request, and its failures are classified the same way.
"""

import socket
from dataclasses import dataclass

import httpx2

from skillsft.pipeline.errors import ConfigError
from skillsft.pipeline.teacher.openai.endpoints import redact_url, scrub, url_with_path

CONNECT_DEADLINE_S = 5.0
ANSWER_DEADLINE_S = 15.0


class EndpointError(ConfigError):
    """The teacher endpoint cannot be used as configured; the message says how to fix it."""


@dataclass(frozen=True)
class EndpointCheck:
    url: str  # redacted
    model: str
    listed: bool  # the server lists the model (False: it has no /models route)


def transport_problem(url: str, exc: Exception) -> EndpointError:
    """One line for a request that got no HTTP answer."""
    shown = redact_url(url)
    text = f"{exc} {exc.__cause__ or ''} {exc.__context__ or ''}"
    if isinstance(exc, httpx2.ConnectTimeout | httpx2.ReadTimeout | httpx2.TimeoutException):
        return EndpointError(
            f"{shown} did not answer within {ANSWER_DEADLINE_S:.0f}s; check that the server is "
            "up and not overloaded, or that --base-url points at it"
        )
    if isinstance(exc.__cause__, socket.gaierror) or "Name or service not known" in text or (
        "nodename nor servname" in text or "Temporary failure in name resolution" in text
    ):
        return EndpointError(f"{shown}: unknown host; check the host name in --base-url / "
                             "OPENAI_BASE_URL")
    if "refused" in text.lower():
        return EndpointError(f"{shown}: connection refused; start the server or fix the port "
                             "in --base-url / OPENAI_BASE_URL")
    return EndpointError(f"{shown}: cannot connect ({scrub(str(exc), url)[:200]}); check "
                         "--base-url / OPENAI_BASE_URL")


def status_problem(url: str, model: str, status: int, body: str) -> EndpointError | None:
    """One line for an HTTP answer that rules the endpoint out; None if it does not."""
    shown = redact_url(url)
    detail = scrub(body.strip().replace("\n", " "), url)[:160]
    if status in (401, 403):
        return EndpointError(
            f"{shown} rejected the API key (HTTP {status}: {detail}); set OPENAI_API_KEY (or "
            "DEEPSEEK_API_KEY) to a key this server accepts"
        )
    if status == 404 and "model" in body.lower() and model in body:
        return EndpointError(f"{shown} does not serve model {model!r} (HTTP 404: {detail}); "
                             "set --model / MEMORY_MODEL etc. to a model it serves")
    return None


def serves(listed: str, model: str) -> bool:
    """Whether a listed model id answers to `model`: the same id, or the same model with a tag
    or an owner the server adds (Ollama lists `llama3:latest` for `llama3`; some gateways list
    `org/model`)."""
    return listed == model or listed.startswith(model + ":") or listed.endswith("/" + model)


def check_endpoint(url: str, api_key: str, model: str) -> EndpointCheck:
    """Raise EndpointError (one line) unless `url` looks like an OpenAI-compatible API serving
    `model`."""
    shown = redact_url(url)
    timeout = httpx2.Timeout(ANSWER_DEADLINE_S, connect=CONNECT_DEADLINE_S)
    try:
        response = httpx2.get(
            url_with_path(url, "models"), headers={"Authorization": f"Bearer {api_key}"},
            timeout=timeout, follow_redirects=False,
        )
    except httpx2.HTTPError as exc:
        raise transport_problem(url, exc) from None
    if (problem := status_problem(url, model, response.status_code, response.text)) is not None:
        raise problem
    if response.status_code in (404, 405):
        return EndpointCheck(shown, model, listed=False)
    if response.status_code >= 400:
        raise EndpointError(
            f"{shown}/models answered HTTP {response.status_code} "
            f"({scrub(response.text.strip(), url)[:160]}); check --base-url and the server"
        )
    try:
        listed = [str(entry.get("id")) for entry in response.json()["data"]]
    except (ValueError, KeyError, TypeError, AttributeError):
        kind = response.headers.get("content-type", "unknown content type")
        raise EndpointError(
            f"{shown} is not an OpenAI-compatible API (GET /models answered {kind}, not a model "
            "list); --base-url must end at the API root, usually .../v1"
        ) from None
    if listed and not any(serves(entry, model) for entry in listed):
        served = ", ".join(listed[:8]) + (" ..." if len(listed) > 8 else "")
        raise EndpointError(
            f"{shown} does not serve model {model!r} (it serves: {served}); set --model / "
            "MEMORY_MODEL / AGGREGATE_MODEL / DISTILL_MODEL to one of these"
        )
    return EndpointCheck(shown, model, listed=True)
