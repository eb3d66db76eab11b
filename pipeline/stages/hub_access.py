"""Before any paid work of a run that will publish: can this token write to this repo?

A run with `--repo-id` that learns at the very end that its token is missing, revoked or
read-only has already paid for the whole corpus; the corpus is kept, but the user learns late.
So the run asks the Hub once, up front (`/api/whoami-v2`): the token is accepted, may write
(not a read-only token), and the repo's namespace is the user's own or one of their
organisations'. Every failure is one line naming the repo and the fix; the token never appears.
"""

from typing import Any

from huggingface_hub import HfApi, get_token
from huggingface_hub.errors import HfHubHTTPError

from skillsft.pipeline.errors import ConfigError


def check_hub_access(repo_id: str, api: HfApi | None = None) -> str:
    """One line saying who will publish where; raises ConfigError when that cannot work."""
    api = api or HfApi(library_name="skillsft")
    token = api.token or get_token()
    if not token:
        raise ConfigError(f"--repo-id {repo_id}: no Hugging Face token; set HF_TOKEN or run "
                          "`hf auth login`, or leave out --repo-id to build the corpus only")
    try:
        identity: dict[str, Any] = api.whoami(token=token)
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        if status == 401:
            raise ConfigError(f"--repo-id {repo_id}: the Hugging Face token was rejected; set "
                              "HF_TOKEN to a valid token with write access") from None
        raise ConfigError(f"--repo-id {repo_id}: the Hub did not answer who the token belongs "
                          f"to (HTTP {status}); check HF_ENDPOINT and the network") from None
    except OSError as exc:
        raise ConfigError(f"--repo-id {repo_id}: cannot reach the Hub ({type(exc).__name__}); "
                          "check HF_ENDPOINT and the network") from None
    user = str(identity.get("name", ""))
    role = identity.get("auth", {}).get("accessToken", {}).get("role", "")
    if role == "read":
        raise ConfigError(f"--repo-id {repo_id}: the Hugging Face token of {user} is read-only; "
                          "set HF_TOKEN to a token with write access")
    namespaces = {user, *(str(org.get("name", "")) for org in identity.get("orgs", []))}
    namespace = repo_id.split("/", 1)[0]
    if namespace not in namespaces:
        raise ConfigError(f"--repo-id {repo_id}: the token belongs to {user}, who cannot write "
                          f"under {namespace!r} (namespaces: {', '.join(sorted(namespaces))})")
    return f"{user} may publish to {repo_id}"
