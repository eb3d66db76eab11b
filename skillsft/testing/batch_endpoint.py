"""The Batch API half of the local OpenAI-compatible server: /v1/files and /v1/batches.

A batch moves one state per poll, as a provider's would over hours: `validating` on creation,
`in_progress` at the first GET, and at the `batch_polls`-th GET `completed` (or `expired` for
the first `expire_batches` batches created). Cancelling (POST .../cancel) makes it `cancelling`,
then `cancelled` at the next GET, with nothing processed. Items are answered when the batch
finishes, by the same function that answers live requests, so the answer depends on the prompt
and the server's fault knobs (server_error, malformed, truncated) hit batch items too: a
server_error item lands in the error file with status 500; in an expired batch about half the
items (chosen by prompt hash) land there with code `batch_expired`.

`on_batch_created(batch_id)` runs after a batch exists and before the client hears its id:
the kill -9 tests kill the client there.
"""

import email.parser
import email.policy
import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# Answers one request body: (HTTP status, response body).
ItemAnswerer = Callable[[dict[str, Any]], tuple[int, dict[str, Any]]]
TERMINAL = ("completed", "failed", "expired", "cancelled")


@dataclass
class StoredFile:
    id: str
    data: bytes
    filename: str
    purpose: str
    created_at: int = field(default_factory=lambda: int(time.time()))

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "object": "file", "bytes": len(self.data),
                "created_at": self.created_at, "filename": self.filename,
                "purpose": self.purpose, "status": "processed"}


@dataclass
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"

    @classmethod
    def json(cls, status: int, payload: Any) -> "Response":
        return cls(status, json.dumps(payload).encode())


def _error(status: int, message: str) -> Response:
    return Response.json(status, {"error": {"message": message, "type": "invalid_request_error"}})


class BatchEndpoint:
    """Files and batches, held in memory; thread-safe."""

    def __init__(self, answer_item: ItemAnswerer, *, batch_polls: int = 2,
                 expire_batches: int = 0,
                 on_batch_created: Callable[[str], None] | None = None) -> None:
        self.answer_item = answer_item
        self.batch_polls = batch_polls
        self.expire_batches = expire_batches
        self.on_batch_created = on_batch_created
        self.files: dict[str, StoredFile] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.polls: dict[str, int] = {}
        self.created_order: list[str] = []
        self.items_answered = 0
        self._lock = threading.RLock()

    # Routing -----------------------------------------------------------------------------

    @staticmethod
    def handles(path: str) -> bool:
        parts = path.split("?", 1)[0].strip("/").split("/")
        return len(parts) >= 2 and parts[1] in ("files", "batches")

    def handle(self, method: str, path: str, headers: Any, raw: bytes) -> Response:
        route, _, query = path.partition("?")
        parts = route.strip("/").split("/")[1:]  # drop "v1"
        with self._lock:
            if parts == ["files"] and method == "POST":
                return self._upload(headers, raw)
            if parts[0] == "files" and len(parts) == 2 and method == "GET":
                stored = self.files.get(parts[1])
                return Response.json(200, stored.as_json()) if stored else _error(404, "no file")
            if parts[0] == "files" and len(parts) == 3 and parts[2] == "content":
                stored = self.files.get(parts[1])
                if stored is None:
                    return _error(404, f"no file {parts[1]}")
                return Response(200, stored.data, "application/octet-stream")
            if parts == ["batches"] and method == "POST":
                return self._create(json.loads(raw or b"{}"))
            if parts == ["batches"] and method == "GET":
                return self._list(query)
            if parts[0] == "batches" and len(parts) == 2 and method == "GET":
                return self._poll(parts[1])
            if parts[0] == "batches" and len(parts) == 3 and parts[2] == "cancel":
                return self._cancel(parts[1])
        return _error(404, f"no route {method} {path}")

    # Files -------------------------------------------------------------------------------

    def _upload(self, headers: Any, raw: bytes) -> Response:
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"Content-Type: " + headers.get("Content-Type", "").encode() + b"\r\n\r\n" + raw
        )
        fields: dict[str, tuple[bytes, str]] = {}
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            fields[str(name)] = (part.get_payload(decode=True) or b"", part.get_filename() or "")
        if "file" not in fields:
            return _error(400, "multipart field 'file' is missing")
        purpose = fields.get("purpose", (b"", ""))[0].decode()
        stored = StoredFile(f"file-{len(self.files) + 1:05d}", fields["file"][0],
                            fields["file"][1] or "upload.jsonl", purpose)
        self.files[stored.id] = stored
        return Response.json(200, stored.as_json())

    def _store(self, prefix: str, lines: list[dict[str, Any]]) -> str | None:
        if not lines:
            return None
        data = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
        stored = StoredFile(f"file-{prefix}-{len(self.files) + 1:05d}", data,
                            f"{prefix}.jsonl", "batch_output")
        self.files[stored.id] = stored
        return stored.id

    # Batches -----------------------------------------------------------------------------

    def _create(self, body: dict[str, Any]) -> Response:
        source = self.files.get(str(body.get("input_file_id")))
        if source is None:
            return _error(400, f"input_file_id {body.get('input_file_id')!r} does not exist")
        if body.get("endpoint") != "/v1/chat/completions":
            return _error(400, f"endpoint {body.get('endpoint')!r} is not supported")
        try:
            lines = [json.loads(line) for line in source.data.splitlines() if line.strip()]
            ids = [line["custom_id"] for line in lines]
        except (ValueError, KeyError, TypeError):
            return _error(400, "the input file is not JSONL of {custom_id, method, url, body}")
        if len(set(ids)) != len(ids):
            return _error(400, "custom_id values must be unique within a batch")
        batch_id = f"batch_{len(self.batches) + 1:05d}"
        now = int(time.time())
        self.batches[batch_id] = {
            "id": batch_id, "object": "batch", "endpoint": body["endpoint"],
            "input_file_id": source.id, "completion_window": body.get("completion_window", "24h"),
            "status": "validating", "created_at": now, "expires_at": now + 86400,
            "metadata": body.get("metadata") or {}, "output_file_id": None,
            "error_file_id": None,
            "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
        }
        self.polls[batch_id] = 0
        self.created_order.append(batch_id)
        if self.on_batch_created is not None:
            self.on_batch_created(batch_id)
        return Response.json(200, self.batches[batch_id])

    def _list(self, query: str) -> Response:
        newest_first = [self.batches[i] for i in reversed(self.created_order)]
        return Response.json(200, {"object": "list", "data": newest_first, "has_more": False,
                                   "first_id": newest_first[0]["id"] if newest_first else None,
                                   "last_id": newest_first[-1]["id"] if newest_first else None})

    def _poll(self, batch_id: str) -> Response:
        batch = self.batches.get(batch_id)
        if batch is None:
            return _error(404, f"no batch {batch_id}")
        self.polls[batch_id] += 1
        now = int(time.time())
        if batch["status"] == "cancelling":
            batch.update(status="cancelled", cancelled_at=now)
        elif batch["status"] not in TERMINAL:
            if self.polls[batch_id] >= self.batch_polls:
                expire = self.created_order.index(batch_id) < self.expire_batches
                self._finish(batch, expire)
            else:
                batch.update(status="in_progress", in_progress_at=now)
        return Response.json(200, batch)

    def _cancel(self, batch_id: str) -> Response:
        batch = self.batches.get(batch_id)
        if batch is None:
            return _error(404, f"no batch {batch_id}")
        if batch["status"] not in TERMINAL:
            batch.update(status="cancelling", cancelling_at=int(time.time()))
        return Response.json(200, batch)

    def _finish(self, batch: dict[str, Any], expire: bool) -> None:
        items = [json.loads(line) for line in self.files[batch["input_file_id"]].data.splitlines()
                 if line.strip()]
        outputs: list[dict[str, Any]] = []
        errors: list[dict[str, Any]] = []
        for index, item in enumerate(items):
            line_id = f"batch_req_{batch['id']}_{index}"
            if expire and _half(item["custom_id"]):
                errors.append({"id": line_id, "custom_id": item["custom_id"], "response": None,
                               "error": {"code": "batch_expired",
                                         "message": "This request could not be executed before "
                                         "the completion window expired."}})
                continue
            status, body = self.answer_item(item["body"])
            self.items_answered += 1
            line = {"id": line_id, "custom_id": item["custom_id"], "error": None,
                    "response": {"status_code": status, "request_id": line_id, "body": body}}
            (outputs if status == 200 else errors).append(line)
        now = int(time.time())
        batch.update(
            status="expired" if expire else "completed",
            **({"expired_at": now} if expire else {"completed_at": now}),
            output_file_id=self._store("output", outputs),
            error_file_id=self._store("errors", errors),
            request_counts={"total": len(items), "completed": len(outputs),
                            "failed": len(errors)},
        )


def _half(custom_id: str) -> bool:
    return hashlib.sha256(custom_id.encode()).digest()[0] < 128
