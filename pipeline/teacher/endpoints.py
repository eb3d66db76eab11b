"""Base URLs as they may be shown and stored: credentials inside a URL never leave memory.

A user may write the credential into the base URL itself (`https://user:secret@host/v1`,
`...?api-key=...`). Everything that is written, logged or handed to Luigi uses `redact_url`;
whatever must tell two such URLs apart (fingerprints, the learned response modes) uses
`url_digest`, a hash of the full URL, so changing the credential is still noticed without the
credential being readable anywhere.
"""

import hashlib
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDACTED = "***"
# Query parameters that carry credentials (compared case-insensitively, `-` and `_` alike).
SECRET_QUERY_PARAMETERS = frozenset(
    {"key", "apikey", "api_key", "token", "access_token", "auth", "secret", "password", "sig"}
)


def _is_secret_parameter(name: str) -> bool:
    return name.lower().replace("-", "_") in SECRET_QUERY_PARAMETERS


def redact_url(url: str) -> str:
    """The URL with user info and credential query values replaced by `***`."""
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
