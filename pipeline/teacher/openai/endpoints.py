"""Base URLs as they may be shown and stored: credentials inside a URL never leave memory.

A user may write the credential into the base URL itself (`https://user:secret@host/v1`,
`...?api-key=...`). Everything that is written, logged or handed to Luigi uses `redact_url`;
whatever must tell two such URLs apart (fingerprints, the learned response modes) uses
`url_digest`, a hash of the full URL, so changing the credential is still noticed without the
credential being readable anywhere.
"""

import hashlib
import os
import re
from collections.abc import Mapping, MutableMapping
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from skillsft.pipeline.errors import ConfigError

REDACTED = "***"
# Query parameters that carry credentials (compared case-insensitively, `-` and `_` alike).
SECRET_QUERY_PARAMETERS = frozenset(
    {"key", "apikey", "api_key", "token", "access_token", "auth", "secret", "password", "sig"}
)


# A comma starts another URL only when a scheme follows it: a comma inside a query value
# (`?key=a,b`) must never cut a credential in two and leave half of it unredacted.
_NEXT_URL = re.compile(r",\s*(?=[A-Za-z][A-Za-z0-9+.-]*://)")


def split_urls(text: str) -> list[str]:
    """The URLs of a comma-separated list (`--base-url` given several times, or a
    comma-separated OPENAI_BASE_URL); a single URL is a list of one."""
    return [part.strip() for part in _NEXT_URL.split(text.strip()) if part.strip()]


def _is_secret_parameter(name: str) -> bool:
    return name.lower().replace("-", "_") in SECRET_QUERY_PARAMETERS


def redact_url(url: str) -> str:
    """The URL with user info and credential query values replaced by `***` (each URL of a
    comma-separated list)."""
    urls = split_urls(url)
    if len(urls) > 1:
        return ",".join(redact_url(one) for one in urls)
    try:
        parts = urlsplit(url)
    except ValueError:
        return REDACTED
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rsplit('@', 1)[1]}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode(
            [(k, REDACTED if _is_secret_parameter(k) else v) for k, v in pairs], safe="*"
        )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def has_credentials(url: str) -> bool:
    return redact_url(url) != url


def url_digest(url: str) -> str:
    """A short hash of the full URL (credentials included), safe to store."""
    return hashlib.sha256(url.encode()).hexdigest()[:16]


def secret_parts(url: str) -> list[str]:
    """The credential strings inside a URL (user info, credential query values)."""
    urls = split_urls(url)
    if len(urls) > 1:
        return [secret for one in urls for secret in secret_parts(one)]
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    found = [part for part in (parts.username, parts.password) if part]
    found += [v for k, v in parse_qsl(parts.query, keep_blank_values=True)
              if _is_secret_parameter(k) and v]
    return found


def scrub(text: str, url: str) -> str:
    """`text` (e.g. a server's or the client's error message) without the URL's credentials."""
    text = text.replace(url, redact_url(url))
    for secret in sorted(secret_parts(url), key=len, reverse=True):
        if len(secret) >= 3:  # a one-letter user name would shred the text; it is no secret
            text = text.replace(secret, REDACTED)
    return text


# Where the command hands a credential-bearing base URL to its Luigi workers (inherited by
# worker processes; never a Luigi parameter), besides the user's own variables.
HANDOFF_VARIABLE = "SKILLSFT_FULL_BASE_URL"
_URL_VARIABLES = (HANDOFF_VARIABLE, "OPENAI_BASE_URL", "DEEPSEEK_BASE_URL")


def hand_over(url: str, environ: MutableMapping[str, str]) -> str:
    """Keep a credential-bearing URL where this process's workers find it; returns the digest
    to pass as a parameter ('' when the URL carries no credentials)."""
    if not has_credentials(url):
        return ""
    environ[HANDOFF_VARIABLE] = url
    return url_digest(url)


def full_base_url(
    shown: str, digest: str, environ: Mapping[str, str] | None = None
) -> str:
    """The URL to call for a task's (redacted URL, digest) parameters."""
    if not digest:
        return shown
    env = os.environ if environ is None else environ
    for variable in _URL_VARIABLES:
        value = env.get(variable, "").strip()
        for candidate in (value, *split_urls(value)):
            if candidate and url_digest(candidate) == digest:
                return candidate
    raise ConfigError(
        f"the base URL {shown} carries credentials this process cannot see; set OPENAI_BASE_URL "
        "to the full URL in the environment of every Luigi worker"
    )


def split_query(url: str) -> tuple[str, dict[str, str]]:
    """The URL without its query, and the query's parameters: the openai client appends paths
    to the base URL as text, so a query (`?api-key=...`) must travel as `default_query`."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", parts.fragment)), query


def url_with_path(url: str, suffix: str) -> str:
    """`url` with `suffix` appended to its path, its query kept (e.g. `.../v1/models?key=`)."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/") + "/" + suffix.lstrip("/")
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))
