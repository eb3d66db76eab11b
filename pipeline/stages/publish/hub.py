"""Stage 5, the Hub half: commit one environment's local export to a dataset repo.

The card is merged with the one already on the Hub, and the commit names the revision that
merge read (`parent_commit`): when another publish (another environment, into the same repo)
commits in between, the Hub refuses ours, and we read the new card, merge again and retry, so
concurrent publishes of two environments keep both sections. Shards of this environment that
the new export no longer has are deleted in the same commit.

The token is huggingface_hub's business (`HF_TOKEN`, else the login cache): we never read it
except to scrub it out of any error message we pass on, and never print or write it.
"""

import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

import httpx2  # huggingface_hub's HTTP client: its transport errors are worth a retry
from huggingface_hub import (
    CommitInfo,
    CommitOperationAdd,
    CommitOperationDelete,
    HfApi,
    RepoFile,
    get_token,
    hf_hub_url,
)
from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, RevisionNotFoundError
from huggingface_hub.utils import build_hf_headers, hf_raise_for_status, http_backoff

from skillsft.pipeline.errors import SkillsftError
from skillsft.pipeline.stages.publish.export import (
    CARD_FILE,
    LocalExport,
    PublishOptions,
    card_text,
    export_local,
)
from skillsft.pipeline.stages.report import build_report

log = logging.getLogger("skillsft.publish")

# Hub answers worth another try: timeouts, rate limits, server errors.
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# A commit whose parent is no longer the head: 412 on the Hub (409 from some mirrors).
CONFLICT_STATUS = frozenset({409, 412})

T = TypeVar("T")


class PublishError(SkillsftError):
    """Publishing failed; the message never contains the Hub token."""


@dataclass
class PublishResult:
    repo_id: str
    revision: str
    dry_run: bool
    files: list[tuple[str, int]]  # (path in repo, bytes) committed, or that would be
    deleted: list[str]  # stale files of this environment removed from the repo
    rows: int
    splits: dict[str, int]
    commit_url: str | None = None
    notes: list[str] = field(default_factory=list)

    def summary_lines(self) -> list[str]:
        """What the CLI prints: one line per file (with its size), then the outcome."""
        verb = "would upload" if self.dry_run else "uploaded"
        lines = [f"{verb} to {self.repo_id}@{self.revision}:"]
        lines += [f"  {path}  {size} bytes" for path, size in self.files]
        lines += [f"  delete {path}" for path in self.deleted]
        if self.commit_url:
            lines.append(f"commit: {self.commit_url}")
        lines += [f"note: {note}" for note in self.notes]
        return lines


# -- the Hub ----------------------------------------------------------------------------------


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, HfHubHTTPError) and exc.response is not None:
        return exc.response.status_code in TRANSIENT_STATUS
    return isinstance(exc, httpx2.TransportError)


def with_retries(what: str, call: Callable[[], T], options: PublishOptions) -> T:
    """Run one Hub operation, retrying transient failures with exponential back-off.

    huggingface_hub retries some of its requests itself (`http_backoff`) but not repo
    creation or the commit; every operation here is safe to repeat (create is exist_ok, a
    repeated commit of identical files is a no-op on the Hub).
    """
    wait = options.retry_wait_seconds
    for attempt in range(options.max_retries + 1):
        try:
            return call()
        except Exception as exc:
            if not is_transient(exc) or attempt == options.max_retries:
                raise
            log.warning("Hub %s failed (%s); retry %d/%d in %.1f s", what,
                        type(exc).__name__, attempt + 1, options.max_retries, wait)
            time.sleep(wait)
            wait = min(30.0, wait * 2)
    raise AssertionError("unreachable")


def is_conflict(exc: HfHubHTTPError) -> bool:
    """The Hub's answer to a commit whose `parent_commit` is no longer the branch head."""
    return exc.response is not None and exc.response.status_code in CONFLICT_STATUS


def head_commit(api: HfApi, repo_id: str, revision: str) -> str | None:
    """The commit the branch points at now (the parent our commit must have); None when the
    Hub does not say (then the commit is made without the guard, as before)."""
    return api.dataset_info(repo_id, revision=revision).sha


def fetch_card(api: HfApi, repo_id: str, revision: str, options: PublishOptions) -> str | None:
    """The repo's README.md at `revision`, or None when it has none yet."""
    url = hf_hub_url(repo_id, CARD_FILE, repo_type="dataset", revision=revision,
                     endpoint=api.endpoint)
    response = http_backoff("GET", url, headers=build_hf_headers(token=api.token),
                            max_retries=options.max_retries,
                            base_wait_time=options.retry_wait_seconds)
    if response.status_code == 404:
        return None
    hf_raise_for_status(response)
    return response.text


def remote_files(api: HfApi, repo_id: str, env: str, revision: str) -> list[str]:
    """Files under `<env>/` in the repo (empty when the folder does not exist yet)."""
    try:
        entries = api.list_repo_tree(repo_id, path_in_repo=env, recursive=True,
                                     repo_type="dataset", revision=revision)
        return sorted(e.path for e in entries if isinstance(e, RepoFile))
    except (EntryNotFoundError, RevisionNotFoundError):
        return []


def commit_operations(export: LocalExport, card: bytes, stale: Sequence[str]) -> list:
    """Fresh operations for one commit attempt (huggingface_hub marks used ones as spent)."""
    operations: list = [
        CommitOperationAdd(path_in_repo=p.relative_to(export.root).as_posix(),
                           path_or_fileobj=str(p))
        for p in export.paths if p.name != CARD_FILE
    ]
    operations.append(CommitOperationAdd(path_in_repo=CARD_FILE, path_or_fileobj=card))
    operations += [CommitOperationDelete(path_in_repo=path) for path in stale]
    return operations


def scrub(text: str, secret: str | None) -> str:
    return text.replace(secret, "***") if secret else text


def publish(
    work_dir: str | Path,
    env: str,
    repo_id: str,
    options: PublishOptions | None = None,
    api: HfApi | None = None,
) -> PublishResult:
    """Export locally, then (unless dry run) commit this environment's files to a dataset repo.

    `api` is injectable so tests (and users with a private Hub endpoint) can pass their own
    `HfApi`. Errors are re-raised as `PublishError` with the token scrubbed out.
    """
    options = options or PublishOptions()
    revision = options.revision or "main"
    options = replace(options, repo_id=options.repo_id or repo_id)
    export = export_local(work_dir, env, options)
    if options.dry_run:
        return PublishResult(
            repo_id=repo_id, revision=revision, dry_run=True, files=export.files(), deleted=[],
            rows=export.rows, splits=export.splits,
            notes=[*export.notes,
                   "dry run: nothing was sent; the card was not merged with the Hub's"],
        )
    if not options.allow_offline and build_report(work_dir, env).details.smoke_test:
        raise PublishError(
            f"{work_dir}: this {env} corpus was written by the offline teacher (a smoke-test "
            "corpus, not training data); re-run with --teacher openai, or pass --allow-offline "
            "to publish it anyway")
    api = api or HfApi(library_name="skillsft")
    token = api.token or get_token()
    if not token:
        raise PublishError(
            "no Hugging Face token: set HF_TOKEN or run `hf auth login`, then publish again"
        )
    try:
        return upload(api, export, env, repo_id, revision, options)
    except Exception as exc:
        message = scrub(f"publishing {env} to {repo_id}@{revision} failed: {exc}", token)
        raise PublishError(message) from None  # the chained original could carry the token


def commit_at_head(api: HfApi, export: LocalExport, env: str, repo_id: str, revision: str,
                   message: str, options: PublishOptions) -> tuple[CommitInfo, str, list[str]]:
    """One commit attempt: the card merged and the stale files listed at the branch's head
    commit, and the commit made with that head as `parent_commit`, so the Hub refuses it (412)
    when the branch has moved on since. Returns the commit, the card and the deleted files."""
    parent = with_retries("read the head commit", lambda: head_commit(api, repo_id, revision),
                          options)
    at = parent or revision
    existing = fetch_card(api, repo_id, at, options)
    card = card_text(export.root.parent, env, export, existing, options)
    local = {p.relative_to(export.root).as_posix() for p in export.paths}
    stale = [path for folder in (env, *export.extra_folders) for path in with_retries(
        "list files", lambda f=folder: remote_files(api, repo_id, f, at), options)
        if path not in local]
    info = with_retries("commit", lambda: api.create_commit(
        repo_id, commit_operations(export, card.encode(), stale), commit_message=message,
        repo_type="dataset", revision=revision, parent_commit=parent), options)
    return info, card, stale


def upload(api: HfApi, export: LocalExport, env: str, repo_id: str, revision: str,
           options: PublishOptions) -> PublishResult:
    with_retries("create_repo", lambda: api.create_repo(
        repo_id, repo_type="dataset", private=options.private, exist_ok=True), options)
    if revision != "main":
        with_retries("create_branch", lambda: api.create_branch(
            repo_id, branch=revision, repo_type="dataset", exist_ok=True), options)
    message = options.commit_message or f"skillsft: publish {env} ({export.rows} rows)"
    for attempt in range(options.max_retries + 1):
        try:
            info, card, stale = commit_at_head(api, export, env, repo_id, revision, message,
                                               options)
            break
        except HfHubHTTPError as exc:
            if not is_conflict(exc) or attempt == options.max_retries:
                raise
            log.warning("Hub commit to %s@%s raced another commit; merging the card again "
                        "(%d/%d)", repo_id, revision, attempt + 1, options.max_retries)
            time.sleep(options.retry_wait_seconds * random.random())
    (export.root / CARD_FILE).write_text(card, encoding="utf-8")  # the local mirror = the commit
    log.info("published %s to %s@%s: %s", env, repo_id, revision, info.commit_url)
    return PublishResult(
        repo_id=repo_id, revision=revision, dry_run=False, files=export.files(), deleted=stale,
        rows=export.rows, splits=export.splits, commit_url=info.commit_url, notes=export.notes,
    )
