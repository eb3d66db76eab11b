"""A small in-memory Hugging Face Hub on 127.0.0.1, for upload tests without a network.

It speaks the few endpoints huggingface_hub's dataset upload path calls, over real HTTP, so
the code under test runs unchanged with `HfApi(endpoint=hub.url)`:

    POST /api/repos/create                            create a repo (409 when it exists)
    POST /api/datasets/<repo>/branch/<branch>         create a branch from main
    GET  /datasets/<repo>/resolve/<rev>/<path>        download a file
    GET  /api/datasets/<repo>/tree/<rev>[/<path>]     list files (recursive)
    GET  /api/datasets/<repo>/revision/<rev>          repo info: the head commit (`sha`)
    POST /api/validate-yaml                           check a card's YAML parses
    POST /api/datasets/<repo>/preupload/<rev>         upload modes: always "regular"
    POST /api/datasets/<repo>/commit/<rev>            apply an NDJSON commit

Every request is recorded (method, path, lower-cased headers, body), and `faults` injects
HTTP errors: `hub.faults["commit"] = [503, 503]` makes the next two commits fail with 503.

Every branch has a head commit; `<rev>` may be a branch or any commit id (a snapshot of the
files at that commit), and a commit whose header names a `parentCommit` that is no longer the
branch head is refused with 412, as the Hub does. `hub.before_commit` (a callable), when set,
runs before each commit is applied, outside the lock: a test makes another publish commit
there, so two publishes race for real.
"""

import base64
import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

Reply = tuple[int, dict[str, str], bytes]


def new_oid() -> str:
    return uuid.uuid4().hex + "00000000"


@dataclass
class Repo:
    private: bool
    branches: dict[str, dict[str, bytes]] = field(default_factory=lambda: {"main": {}})
    heads: dict[str, str] = field(default_factory=dict)  # branch -> head commit id
    snapshots: dict[str, dict[str, bytes]] = field(default_factory=dict)  # commit id -> files

    def __post_init__(self) -> None:
        for branch, files in self.branches.items():
            self.record(branch, files)

    def record(self, branch: str, files: dict[str, bytes]) -> str:
        oid = new_oid()
        self.heads[branch] = oid
        self.snapshots[oid] = dict(files)
        return oid


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Commit:
    repo_id: str
    revision: str
    message: str
    added: list[str]
    deleted: list[str]


def json_reply(status: int, payload: Any, headers: dict[str, str] | None = None) -> Reply:
    return status, {"Content-Type": "application/json", **(headers or {})}, json.dumps(
        payload).encode()


def not_found(code: str) -> Reply:
    return json_reply(404, {"error": f"{code}"}, {"X-Error-Code": code})


class FakeHub:
    """The Hub's state and its request handler; serve it with `running_hub()`."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.requests: list[Recorded] = []
        self.commits: list[Commit] = []
        self.faults: dict[str, list[int]] = {}
        self.url = ""
        self.lock = threading.Lock()
        self.before_commit: Any = None

    # -- test helpers -------------------------------------------------------------------------

    def seed_repo(self, repo_id: str, files: dict[str, bytes], private: bool = False) -> None:
        self.repos[repo_id] = Repo(private=private, branches={"main": dict(files)})

    def files(self, repo_id: str, revision: str = "main") -> dict[str, bytes]:
        return self.repos[repo_id].branches[revision]

    # -- dispatch -----------------------------------------------------------------------------

    def handle(self, method: str, target: str, headers: dict[str, str], body: bytes) -> Reply:
        if method == "POST" and "/commit/" in target and self.before_commit is not None:
            hook, self.before_commit = self.before_commit, None
            hook()
        with self.lock:
            self.requests.append(Recorded(method, target, headers, body))
            parts = urlsplit(target)
            path, query = unquote(parts.path), parse_qs(parts.query)
            if method == "GET" and path == "/api/whoami-v2":
                return self.whoami(headers)
            route = self.route(method, path)
            if route is None:
                return json_reply(404, {"error": f"fake hub: no route for {method} {path}"})
            name, handler, args = route
            pending = self.faults.get(name)
            if pending:
                return json_reply(pending.pop(0), {"error": f"injected fault on {name}"})
            return handler(*args, query=query, body=body)

    def route(self, method: str, path: str) -> tuple[str, Any, tuple[str, ...]] | None:
        segments = path.strip("/").split("/")
        if method == "POST" and path == "/api/repos/create":
            return "create", self.create_repo, ()
        if method == "POST" and path == "/api/validate-yaml":
            return "validate", self.validate_yaml, ()
        if method == "GET" and segments[:2] == ["api", "datasets"] and len(segments) == 4:
            return "revision", self.revision_info, ("/".join(segments[2:4]), "main", "")
        if segments[:2] == ["api", "datasets"] and len(segments) >= 6:
            repo_id, action, rest = "/".join(segments[2:4]), segments[4], segments[5:]
            handlers = {
                ("POST", "branch"): self.create_branch,
                ("GET", "tree"): self.tree,
                ("GET", "revision"): self.revision_info,
                ("POST", "preupload"): self.preupload,
                ("POST", "commit"): self.commit,
            }
            if (method, action) in handlers:
                return action, handlers[(method, action)], (repo_id, rest[0], "/".join(rest[1:]))
        if method == "GET" and segments[0] == "datasets" and segments[3:4] == ["resolve"]:
            repo_id = "/".join(segments[1:3])
            return "resolve", self.resolve, (repo_id, segments[4], "/".join(segments[5:]))
        return None

    def branch(self, repo_id: str, revision: str) -> dict[str, bytes] | Reply:
        """A branch's files, or (read-only) the files at a commit id."""
        repo = self.repos.get(repo_id)
        if repo is None:
            return not_found("RepoNotFound")
        if revision in repo.branches:
            return repo.branches[revision]
        if revision in repo.snapshots:
            return repo.snapshots[revision]
        return not_found("RevisionNotFound")

    # -- endpoints ----------------------------------------------------------------------------

    def whoami(self, headers: dict[str, str]) -> Reply:
        """Every token is user `someone` with write access, except tokens starting with
        `hf_revoked` (401) or `hf_readonly` (a read-only token)."""
        authorization = {k.lower(): v for k, v in headers.items()}.get("authorization", "")
        token = authorization.removeprefix("Bearer ")
        if not token or token.startswith("hf_revoked"):
            return json_reply(401, {"error": "Invalid credentials in Authorization header"})
        role = "read" if token.startswith("hf_readonly") else "write"
        return json_reply(200, {"type": "user", "name": "someone", "orgs": [{"name": "lab"}],
                                "auth": {"accessToken": {"displayName": "t", "role": role}}})

    def create_repo(self, *, query: dict, body: bytes) -> Reply:
        payload = json.loads(body)
        repo_id = f"{payload['organization']}/{payload['name']}"
        if repo_id in self.repos:
            return json_reply(409, {"error": "You already created this dataset repo",
                                    "url": f"{self.url}/datasets/{repo_id}"})
        self.repos[repo_id] = Repo(private=payload.get("visibility") == "private")
        return json_reply(200, {"url": f"{self.url}/datasets/{repo_id}", "name": repo_id})

    def create_branch(self, repo_id: str, branch: str, _: str, *, query: dict,
                      body: bytes) -> Reply:
        files = self.branch(repo_id, "main")
        if isinstance(files, tuple):
            return files
        if branch in self.repos[repo_id].branches:
            return json_reply(409, {"error": "Reference already exists"})
        self.repos[repo_id].branches[branch] = dict(files)
        self.repos[repo_id].record(branch, files)
        return json_reply(200, {})

    def revision_info(self, repo_id: str, revision: str, _: str, *, query: dict,
                      body: bytes) -> Reply:
        files = self.branch(repo_id, revision)
        if isinstance(files, tuple):
            return files
        repo = self.repos[repo_id]
        sha = repo.heads.get(revision, revision)
        return json_reply(200, {"id": repo_id, "sha": sha, "private": repo.private,
                                "siblings": [{"rfilename": name} for name in sorted(files)]})

    def resolve(self, repo_id: str, revision: str, file_path: str, *, query: dict,
                body: bytes) -> Reply:
        files = self.branch(repo_id, revision)
        if isinstance(files, tuple):
            return files
        if file_path not in files:
            return not_found("EntryNotFound")
        return 200, {"Content-Type": "application/octet-stream"}, files[file_path]

    def tree(self, repo_id: str, revision: str, folder: str, *, query: dict,
             body: bytes) -> Reply:
        files = self.branch(repo_id, revision)
        if isinstance(files, tuple):
            return files
        prefix = f"{folder}/" if folder else ""
        entries = [
            {"type": "file", "path": path, "size": len(data), "oid": uuid.uuid4().hex}
            for path, data in sorted(files.items()) if path.startswith(prefix)
        ]
        if folder and not entries:
            return not_found("EntryNotFound")
        return json_reply(200, entries)

    def validate_yaml(self, *, query: dict, body: bytes) -> Reply:
        content = json.loads(body)["content"]
        try:
            header = content.split("---", 2)[1]
            yaml.safe_load(header)
        except (IndexError, yaml.YAMLError) as exc:
            return json_reply(400, {"errors": [{"message": str(exc)}]})
        return json_reply(200, {"errors": [], "warnings": []})

    def preupload(self, repo_id: str, revision: str, _: str, *, query: dict,
                  body: bytes) -> Reply:
        files = json.loads(body)["files"]
        return json_reply(200, {"files": [
            {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files
        ]})

    def commit(self, repo_id: str, revision: str, _: str, *, query: dict, body: bytes) -> Reply:
        repo = self.repos.get(repo_id)
        if repo is None or revision not in repo.branches:
            return not_found("RepoNotFound" if repo is None else "RevisionNotFound")
        files = dict(repo.branches[revision])  # applied only when the whole commit is valid
        message, added, deleted = "", [], []
        for line in body.splitlines():
            item = json.loads(line)
            key, value = item["key"], item["value"]
            if key == "header":
                message = value["summary"]
                parent = value.get("parentCommit")
                if parent and parent != repo.heads.get(revision):
                    return json_reply(412, {"error": "A commit has happened since. Please "
                                                     "refresh and try again."})
            elif key == "file":
                files[value["path"]] = base64.b64decode(value["content"])
                added.append(value["path"])
            elif key == "deletedFile":
                if value["path"] not in files:
                    return not_found("EntryNotFound")
                del files[value["path"]]
                deleted.append(value["path"])
            else:
                return json_reply(400, {"error": f"fake hub does not support {key}"})
        repo.branches[revision] = files
        oid = repo.record(revision, files)
        self.commits.append(Commit(repo_id, revision, message, added, deleted))
        return json_reply(200, {"commitUrl": f"{self.url}/datasets/{repo_id}/commit/{oid}",
                                "commitOid": oid, "pullRequestUrl": None})


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers_in = {name.lower(): value for name, value in self.headers.items()}
        status, headers, payload = self.hub.handle(self.command, self.path, headers_in, body)
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    do_GET = do_POST = do_HEAD = do_DELETE = do_PUT = _serve

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass


@contextmanager
def running_hub(hub: FakeHub | None = None) -> Iterator[FakeHub]:
    """Serve a FakeHub on a free local port for the duration of the block."""
    hub = hub or FakeHub()
    handler = type("Handler", (_Handler,), {"hub": hub})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
