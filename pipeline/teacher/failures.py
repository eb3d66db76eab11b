"""Which failed requests a later run pays for again.

A request that failed after the client's retries and the re-asks is journaled as a `failure`
record under its key, with its kind. The next runs call it again only when the failure was
transient (timeouts, dropped connections, 5xx, rate limits that outlasted every round) and it
has failed at most `--retry-failed` times so far; a permanent failure (a 400 such as a context
too long, a refused response format, an answer that stayed invalid after the re-asks) is not
paid for again. Either stays a reported failure until the user forces the stage
(`--force STAGE`), which retries every failure of that stage once more.
"""

import re
from collections.abc import Sequence

TRANSIENT_KINDS = frozenset({"timeout", "connection", "server_error", "rate_limited",
                             "api_error"})
_HTTP_5XX = re.compile(r"^http_5\d\d$")


def failure_kind(error: str) -> str:
    """The counter name of a failure: the text before the first colon of its error."""
    return error.split(":", 1)[0].strip() or "unknown"


def is_transient(kind: str) -> bool:
    return kind in TRANSIENT_KINDS or bool(_HTTP_5XX.match(kind))


def retryable_after(errors: Sequence[str], retry_failed: int) -> bool:
    """Whether a next run would call a request whose failures so far are `errors`."""
    return bool(errors) and is_transient(failure_kind(errors[-1])) and (
        len(errors) <= retry_failed)


def skip_reason(errors: Sequence[str], retry_failed: int, forced: bool) -> str | None:
    """Why a request that failed before is not called again (None: call it)."""
    if not errors or forced or retryable_after(errors, retry_failed):
        return None
    last = errors[-1]
    kind = failure_kind(last)
    detail = last.split(":", 1)[1].strip() if ":" in last else last
    if not is_transient(kind):
        why = "a permanent failure is not paid for again"
    else:
        why = f"failed in {len(errors)} runs, more than --retry-failed {retry_failed}"
    return (f"{kind}: {detail[:300]} (earlier run; {why}; fix the cause and re-run with "
            "--force STAGE to try again)")
