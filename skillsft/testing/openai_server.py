"""A real OpenAI-compatible HTTP server on 127.0.0.1 for tests and benchmarks.

POST /v1/chat/completions answers with JSON that fits the schema the request carries (the
`response_format` json_schema, or for the weaker modes the schema quoted after "JSON schema:"
in a message), or with whatever a pluggable `responder(request_json) -> str` returns, so stage
tests can answer semantically. The default answer depends on the whole body, as a real
model's may: its free text carries `body_tag(body)`, a digest of every field (model, messages,
generation parameters, response format), so two requests that differ anywhere, a missing
`"strict": true` included, get different answers and make different corpora (re-ask turns
aside: a re-asked request gets its first ask's answer). GET /stats returns the counters as JSON
(for a server run as a subprocess), GET /bodies every chat request body received; POST /reset
clears them.

The Batch API (/v1/files, /v1/batches: states, output and error files, partial failures,
expiry, cancellation) is served by batch_endpoint.py; its items are answered by the same
function as live requests, so they depend on the prompt and meet the same faults.

Faults are injected by configuration and are reproducible: whether a request gets one is
decided by hashing (seed, prompt content hash, how many times this prompt arrived before), so
the same prompt on the same attempt meets the same fate however the requests interleave.

Run it alone (for kill -9 tests, the benchmarks, or to try a setup without paying anyone):
    python -m skillsft.testing --port 0 --latency 0.1 [--stages]
It prints `PORT <n>` on its first line once it listens (see skillsft/testing/__main__.py).
"""

import contextlib
import hashlib
import json
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from skillsft.pipeline.teacher.openai.negotiation import PROBE_PROMPT
from skillsft.testing.batch_endpoint import BatchEndpoint

Responder = Callable[[dict[str, Any]], str]


class ServerFault(Exception):  # noqa: N818 - what a responder raises, not an error of ours
    """Raised by a responder: the server answers this HTTP status instead."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

FAULTS = ("rate_limit", "server_error", "malformed", "truncated", "hang", "drop")


@dataclass
class ServerConfig:
    latency: float = 0.0  # seconds before every answer
    p_rate_limit: float = 0.0  # 429 with Retry-After
    p_server_error: float = 0.0  # 500
    p_malformed: float = 0.0  # 200 whose content is not JSON
    p_truncated: float = 0.0  # 200, finish_reason "length", content cut in half
    p_hang: float = 0.0  # sleep `hang_seconds`, then close without answering
    p_drop: float = 0.0  # close the connection without answering
    retry_after: float = 0.05  # seconds, sent in the Retry-After header
    hang_seconds: float = 5.0
    refuse_json_schema: bool = False  # 400 for response_format json_schema
    refuse_json_object: bool = False  # 400 for response_format json_object (any form)
    refuse_json_object_schema: bool = False  # refuse json_object only when it carries a schema
    refusal_status: int = 400  # llama-cpp-python refuses an unknown format type with a 500
    seed: int = 0
    responder: Responder | None = None
    # The Batch API (batch_endpoint.py): polls until a batch finishes, how many of the first
    # batches expire, and a hook run once a batch exists, before the client hears its id.
    batch_polls: int = 2
    expire_batches: int = 0
    on_batch_created: Callable[[str], None] | None = None
    models: tuple[str, ...] = ()  # listed by GET /v1/models; empty: no such route (404)
    max_in_flight: int = 0  # >0: a 429 (with Retry-After) for a request above this many
    rate_limit_first: int = 0  # a 429 (with Retry-After) for the first N stage requests
    budget_spent_first: int = 0  # the first N answers say x-ratelimit-remaining-requests: 0
    # Answer like a reasoning model (REASONING_SHAPES): "think" opens the content with a
    # <think> block, "unopened" only closes one (the template opened it), "field" sends the
    # thinking as `reasoning_content` beside the content, "field_only" sends everything, the
    # drafted answer too, as `reasoning_content` and no content (a model that never stopped
    # thinking, as vLLM's reasoning parser reports it); "" (default) does not think.
    reasoning: str = ""
    # Prompt caching: this share of each prompt's tokens reported as
    # usage.prompt_tokens_details.cached_tokens (as providers with prompt caching do).
    cached_prompt_share: float = 0.0
    omit_usage: bool = False  # answer without any `usage`, as some proxies do

    def probabilities(self) -> tuple[float, ...]:
        return (
            self.p_rate_limit,
            self.p_server_error,
            self.p_malformed,
            self.p_truncated,
            self.p_hang,
            self.p_drop,
        )


@dataclass
class ServerStats:
    total: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0
    by_prompt: Counter[str] = field(default_factory=Counter)  # every arrival per prompt hash
    paid_by_prompt: Counter[str] = field(default_factory=Counter)  # 200 answers per prompt hash
    faults: Counter[str] = field(default_factory=Counter)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    raw_bodies: list[bytes] = field(default_factory=list)  # as received, byte for byte
    # For each body above, its wave: requests that arrived while at least one earlier request
    # was still being answered share a wave, and a request arriving at an idle server opens
    # the next one. A pipeline's stages (and aggregation levels) wait for each other, so each
    # is one wave; bench/end_to_end.py replays them in order for the machine's own ideal.
    waves: list[int] = field(default_factory=list)
    authorization_seen: set[str] = field(default_factory=set)
    embedded_texts: list[str] = field(default_factory=list)  # every text sent to /embeddings
    batch_items: int = 0  # batch lines answered (each one paid like a live request)
    probes: int = 0  # response-mode probes (negotiation.PROBE_PROMPT), also in the counts above
    arrivals: list[tuple[float, int]] = field(default_factory=list)  # (monotonic s, status)
    billed: list[tuple[float, int]] = field(default_factory=list)  # (monotonic s, tokens) per 200
    connections: int = 0  # TCP connections accepted (a client that reuses them opens few)
    # Chat requests in flight integrated over time, and the time with any in flight: their
    # ratio is how many the clients kept in flight while they had work (bench/end_to_end.py).
    in_flight_seconds: float = 0.0
    busy_seconds: float = 0.0
    in_flight_changed: float = 0.0  # monotonic time of the last change of in_flight

    def count_in_flight(self, change: int) -> None:
        """Move `in_flight` by `change` (+1 a request arrived, -1 it was answered), keeping
        the time integrals; called under the server's lock."""
        now = time.monotonic()
        if self.in_flight:
            elapsed = now - self.in_flight_changed
            self.in_flight_seconds += self.in_flight * elapsed
            self.busy_seconds += elapsed
        self.in_flight += change
        self.in_flight_changed = now

    @property
    def stage_requests(self) -> int:
        """Requests of the pipeline's stages: everything but the response-mode probes."""
        return self.total - self.probes

    def as_json(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "in_flight": self.in_flight,
            "peak_in_flight": self.peak_in_flight,
            "by_prompt": dict(self.by_prompt),
            "paid_by_prompt": dict(self.paid_by_prompt),
            "paid": sum(self.paid_by_prompt.values()),
            "faults": dict(self.faults),
            "batch_items": self.batch_items,
            "probes": self.probes,
            "connections": self.connections,
        }


def prompt_hash(body: dict[str, Any]) -> str:
    """Hash of the conversation sent (messages only), the unit the counters are kept by."""
    messages = json.dumps(body.get("messages", []), sort_keys=True)
    return hashlib.sha256(messages.encode()).hexdigest()


def fault_for(config: ServerConfig, content_hash: str, attempt: int) -> str | None:
    digest = hashlib.sha256(f"{config.seed}:{content_hash}:{attempt}".encode()).digest()
    draw = int.from_bytes(digest[:8], "big") / 2**64
    cumulative = 0.0
    for name, probability in zip(FAULTS, config.probabilities(), strict=True):
        cumulative += probability
        if draw < cumulative:
            return name
    return None


# The opening of the teacher's re-ask (structured.reask_messages), after the reply it quotes.
REASK_OPENING = "Your previous reply could not be used"


def without_reasks(messages: list[Any]) -> list[Any]:
    """The conversation minus re-ask turns (a quoted bad reply and the correction after it)."""
    kept: list[Any] = []
    for message in messages:
        content = str(message.get("content", "")) if isinstance(message, dict) else ""
        if content.startswith(REASK_OPENING) and kept and kept[-1].get("role") == "assistant":
            kept.pop()
            continue
        kept.append(message)
    return kept


def body_tag(body: dict[str, Any]) -> str:
    """A digest of the whole request body (key order aside): any field that differs, the
    response format and generation parameters included, gives another tag. Re-ask turns are
    left out, so a re-asked request gets the answer its clean first ask gets (as the fault
    tests need: a run that met faults makes the corpus of one that did not)."""
    whole = {**body, "messages": without_reasks(list(body.get("messages", [])))}
    return hashlib.sha256(json.dumps(whole, sort_keys=True).encode()).hexdigest()[:10]


def example_from_schema(schema: dict[str, Any], root: dict[str, Any] | None = None,
                        tag: str = "") -> Any:
    """A minimal instance of a JSON schema (the subset pydantic emits); free strings (not
    enums or constants) carry `tag`."""
    root = schema if root is None else root
    if "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            target = target[part]
        return example_from_schema(target, root, tag)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    for combinator in ("anyOf", "oneOf", "allOf"):
        if combinator in schema:
            options = [o for o in schema[combinator] if o.get("type") != "null"]
            return example_from_schema(options[0] if options else {"type": "null"}, root, tag)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        properties = schema.get("properties", {})
        return {name: example_from_schema(sub, root, tag) for name, sub in properties.items()}
    if kind == "array":
        item = example_from_schema(schema.get("items", {"type": "string"}), root, tag)
        return [item] * max(1, schema.get("minItems", 1))
    if kind == "integer":
        return int(schema.get("minimum", 1))
    if kind == "number":
        return float(schema.get("minimum", 1.0))
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    text = f"example {tag}" if tag else "example"
    return text + "x" * max(0, schema.get("minLength", 0) - len(text))


def is_probe(body: dict[str, Any]) -> bool:
    """A response-mode probe of the teacher (negotiation.py), not a stage request."""
    return any(m.get("content") == PROBE_PROMPT for m in body.get("messages", []))


def strict_mode_problem(schema: Any, where: str = "schema") -> str | None:
    """What OpenAI's strict mode would reject in a schema: an object that is not closed or
    does not require every property, or a keyword it does not take."""
    if isinstance(schema, list):
        for index, item in enumerate(schema):
            if problem := strict_mode_problem(item, f"{where}[{index}]"):
                return problem
        return None
    if not isinstance(schema, dict):
        return None
    for keyword in ("minLength", "maxLength", "default"):
        if keyword in schema:
            return f"{where}: '{keyword}' is not permitted in strict mode"
    if schema.get("type") == "object" or "properties" in schema:
        if schema.get("additionalProperties") is not False:
            return f"{where}: 'additionalProperties' is required to be supplied and to be false"
        if sorted(schema.get("required", [])) != sorted(schema.get("properties", {})):
            return f"{where}: 'required' is required to include every key in 'properties'"
    for key, value in schema.items():
        children = value.values() if key in ("properties", "$defs") else [value]
        for child in children:
            if isinstance(child, dict | list) and (
                problem := strict_mode_problem(child, f"{where}.{key}")
            ):
                return problem
    return None


def schema_of_request(body: dict[str, Any]) -> dict[str, Any] | None:
    response_format = body.get("response_format") or {}
    if response_format.get("type") == "json_schema":
        return response_format["json_schema"]["schema"]
    if response_format.get("type") == "json_object" and "schema" in response_format:
        return response_format["schema"]
    decoder = json.JSONDecoder()
    for message in body.get("messages", []):
        content = str(message.get("content", ""))
        marker = content.find("JSON schema:")
        if marker >= 0:
            start = content.find("{", marker)
            try:
                return decoder.raw_decode(content, start)[0]
            except ValueError:
                continue
    return None


EMBEDDING_DIMENSIONS = 64


def text_vector(text: str) -> list[float]:
    """A unit bag-of-words vector: each word (4+ letters) hashed into one of 64 dimensions."""
    vector = [0.0] * EMBEDDING_DIMENSIONS
    for word in re.findall(r"[a-z]{4,}", text.lower()):
        vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % EMBEDDING_DIMENSIONS] += 1.0
    norm = sum(v * v for v in vector) ** 0.5 or 1.0
    return [v / norm for v in vector]


def schema_answer(body: dict[str, Any]) -> str:
    """The minimal instance of the request's schema, its free text tagged with the body."""
    schema = schema_of_request(body)
    return json.dumps(example_from_schema(schema, tag=body_tag(body)) if schema else {})


def chat_completion(
    config: ServerConfig, body: dict[str, Any], content_hash: str, attempt: int,
    fault: str | None,
) -> dict[str, Any]:
    """The body of a 200 answer: the responder's (or the schema's) answer to this prompt, spoilt
    when the fault says so. Live requests and batch items are answered by this one function."""
    content = config.responder(body) if config.responder else schema_answer(body)
    finish_reason = "stop"
    if fault == "malformed":
        content = "{" + content[: len(content) // 2] + " <- not JSON"
    elif fault == "truncated":
        content = content[: len(content) // 2]
        finish_reason = "length"
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if config.reasoning:
        message = reasoning_message(config.reasoning, content, content_hash)
    prompt_tokens = count_prompt_tokens(body)
    completion_tokens = max(1, len((message["content"] or "") + message.get("reasoning_content",
                                                                             "")) // 4)
    return {
        "id": f"chatcmpl-{content_hash[:12]}-{attempt}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "test-model"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason,
            }
        ],
        "usage": {  # the live handler leaves it out when config.omit_usage
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {
                "cached_tokens": int(prompt_tokens * config.cached_prompt_share)},
        },
    }


REASONING_SHAPES = {
    "think": "<think>{thought}</think>\n\n{answer}",
    "unopened": "{thought}\n</think>\n{answer}",
    "field": "{answer}",
    "field_only": "",
}


def reasoning_message(shape: str, answer: str, content_hash: str) -> dict[str, Any]:
    """A reasoning model's message: its thinking, which holds a JSON fragment that is not the
    answer (as a model weighing forms writes), around the answer, in one of REASONING_SHAPES."""
    thought = (f"Request {content_hash[:8]}: I consider the {{\"x\": 1}} form first, then "
               f"settle on the schema's form, drafted as {answer[:40]}")
    message = {"role": "assistant",
               "content": REASONING_SHAPES[shape].format(thought=thought, answer=answer)}
    if shape == "field":
        message["reasoning_content"] = thought
    if shape == "field_only":
        message.update(content=None, reasoning_content=f"{thought}\n{answer}")
    return message


def count_prompt_tokens(body: dict[str, Any]) -> int:
    """What the server bills as prompt tokens: a quarter of the messages' JSON length."""
    return len(json.dumps(body.get("messages", []))) // 4


def format_refusal(
    config: ServerConfig, body: dict[str, Any]
) -> tuple[str, int, dict[str, Any]] | None:
    """(fault name, status, error body) when the request's response format is refused: a
    strict schema OpenAI would reject, or a mode the configuration refuses. Live requests and
    batch items meet the same checks."""
    requested = body.get("response_format") or {}
    format_type = requested.get("type")
    if format_type == "json_object" and "schema" in requested:
        format_type = "json_object_schema"
    if format_type == "json_schema" and requested["json_schema"].get("strict"):
        problem = strict_mode_problem(requested["json_schema"]["schema"])
        if problem:
            return "invalid_strict_schema", 400, {"error": {
                "message": f"Invalid schema for response_format: {problem}",
                "type": "invalid_request_error", "param": "response_format"}}
    if (
        (format_type == "json_schema" and config.refuse_json_schema)
        or (format_type.startswith("json_object") if format_type else False)
        and config.refuse_json_object
        or (format_type == "json_object_schema" and config.refuse_json_object_schema)
    ):
        message = f"response_format type {format_type!r} is not supported by this model"
        return f"refused_{format_type}", config.refusal_status, {"error": {
            "message": message, "type": "invalid_request_error", "param": "response_format",
            "code": None}}
    return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else headers and body wait ~40 ms for a delayed ACK
    server: "_HTTPServer"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # keep test output quiet

    def setup(self) -> None:
        """Once per accepted connection (a handler serves all requests of one connection)."""
        super().setup()
        with self.server.owner.lock:
            self.server.owner.stats.connections += 1

    def _batch_route(self, method: str, raw: bytes = b"") -> bool:
        """Serve /v1/files and /v1/batches; False when the path is not theirs."""
        endpoint = self.server.owner.batches
        if not endpoint.handles(self.path):
            return False
        response = endpoint.handle(method, self.path, self.headers, raw)
        try:
            self.send_response(response.status)
            self.send_header("Content-Type", response.content_type)
            self.send_header("Content-Length", str(len(response.body)))
            self.end_headers()
            self.wfile.write(response.body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        return True

    def do_GET(self) -> None:
        self.path = self.path.split("?", 1)[0]  # a credential in the query is not a route
        if self._batch_route("GET"):
            return
        models = self.server.owner.config.models
        if self.path.rstrip("/").endswith("/models") and models:
            self._send_json(200, {"object": "list", "data": [
                {"id": name, "object": "model", "owned_by": "test"} for name in models]})
        elif self.path.rstrip("/").endswith("/stats"):
            with self.server.owner.lock:
                payload = self.server.owner.stats.as_json()
            self._send_json(200, payload)
        elif self.path.rstrip("/").endswith("/bodies"):  # every chat body received, in order
            with self.server.owner.lock:
                bodies = list(self.server.owner.stats.bodies)
            self._send_json(200, {"bodies": bodies})
        else:
            self._send_json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        self.path = self.path.split("?", 1)[0]
        length = int(self.headers.get("Content-Length", 0))
        raw = self.rfile.read(length)
        if self._batch_route("POST", raw):
            return
        if self.path.rstrip("/").endswith("/reset"):
            self.server.owner.reset()
            self._send_json(200, {"ok": True})
            return
        if self.path.rstrip("/").endswith("/embeddings"):
            self._embeddings(json.loads(raw))
            return
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send_json(404, {"error": {"message": f"no route {self.path}"}})
            return
        owner = self.server.owner
        body = json.loads(raw)
        content_hash = prompt_hash(body)
        with owner.lock:
            stats = owner.stats
            attempt = stats.by_prompt[content_hash]
            stats.total += 1
            stats.by_prompt[content_hash] += 1
            stats.count_in_flight(+1)
            stats.peak_in_flight = max(stats.peak_in_flight, stats.in_flight)
            stats.bodies.append(body)
            stats.raw_bodies.append(raw)
            stats.waves.append((stats.waves[-1] if stats.waves else -1) + (stats.in_flight == 1))
            stats.probes += is_probe(body)
            stats.authorization_seen.add(self.headers.get("Authorization", ""))
        try:
            self._answer(owner, body, content_hash, attempt)
        finally:
            with owner.lock:
                owner.stats.count_in_flight(-1)

    def _embeddings(self, body: dict[str, Any]) -> None:
        """POST /v1/embeddings: one vector per input, from the words of that input, so texts
        sharing words are close and a mixed-up vector changes a similarity."""
        owner = self.server.owner
        texts = body.get("input", [])
        texts = [texts] if isinstance(texts, str) else list(texts)
        with owner.lock:
            owner.stats.total += 1
            owner.stats.embedded_texts.extend(texts)
            owner.stats.authorization_seen.add(self.headers.get("Authorization", ""))
        data = [{"object": "embedding", "index": i, "embedding": text_vector(t)}
                for i, t in enumerate(texts)]
        tokens = sum(len(t) // 4 for t in texts)
        self._send_json(200, {"object": "list", "data": data, "model": body.get("model", ""),
                              "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    def _answer(
        self, owner: "FakeOpenAIServer", body: dict[str, Any], content_hash: str, attempt: int
    ) -> None:
        config = owner.config
        refused = format_refusal(config, body)
        if refused is not None:
            fault, status, payload = refused
            owner.count_fault(fault)
            self._send_json(status, payload)
            return
        with owner.lock:
            crowded = bool(config.max_in_flight) and owner.stats.in_flight > config.max_in_flight
            early = not is_probe(body) and len(owner.stats.arrivals) < config.rate_limit_first
            owner.stats.arrivals.append((time.monotonic(), 429 if crowded or early else 200))
        if crowded or early:
            owner.count_fault("over_capacity" if crowded else "rate_limit_first")
            self._send_json(
                429, {"error": {"message": "Rate limit reached", "type": "rate_limit_exceeded"}},
                headers={"Retry-After": str(config.retry_after)},
            )
            return
        fault = fault_for(config, content_hash, attempt)
        if fault:
            owner.count_fault(fault)
        if config.latency:
            time.sleep(config.latency)
        if fault == "rate_limit":
            self._send_json(
                429,
                {"error": {"message": "Rate limit reached", "type": "rate_limit_exceeded"}},
                headers={"Retry-After": str(config.retry_after)},
            )
            return
        if fault == "server_error":
            self._send_json(500, {"error": {"message": "internal error", "type": "server_error"}})
            return
        if fault in ("hang", "drop"):
            if fault == "hang":
                time.sleep(config.hang_seconds)
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        try:
            answer = chat_completion(config, body, content_hash, attempt, fault)
        except ServerFault as refusal:
            self._send_json(refusal.status, {"error": {"message": refusal.message,
                                                       "type": "server_error"}})
            return
        usage = answer["usage"]
        if config.omit_usage:
            del answer["usage"]
        with owner.lock:
            owner.stats.paid_by_prompt[content_hash] += 1
            owner.stats.billed.append((time.monotonic(), usage["total_tokens"]))
            spent = sum(owner.stats.paid_by_prompt.values()) <= config.budget_spent_first
        budget = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1s",
                  "x-ratelimit-remaining-tokens": "90000", "x-ratelimit-reset-tokens": "6m0s"}
        self._send_json(200, answer, headers=budget if spent else None)

    def _send_json(
        self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (timeout); nothing to do


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512
    owner: "FakeOpenAIServer"


class FakeOpenAIServer:
    """The server on a free port in a background thread; use as a context manager."""

    def __init__(self, config: ServerConfig | None = None, port: int = 0) -> None:
        self.config = config or ServerConfig()
        self.stats = ServerStats()
        self.lock = threading.Lock()
        self._httpd = _HTTPServer(("127.0.0.1", port), _Handler)
        self._httpd.owner = self
        self._thread: threading.Thread | None = None
        self.batches = BatchEndpoint(
            self.answer_batch_item,
            batch_polls=self.config.batch_polls,
            expire_batches=self.config.expire_batches,
            on_batch_created=self.config.on_batch_created,
        )

    def answer_batch_item(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """One line of a batch, answered like a live request of the same body (same format
        checks and faults, except those only a live connection can meet: 429, hang, drop)."""
        content_hash = prompt_hash(body)
        with self.lock:
            attempt = self.stats.by_prompt[content_hash]
            self.stats.by_prompt[content_hash] += 1
            self.stats.batch_items += 1
        refused = format_refusal(self.config, body)
        if refused is not None:
            name, status, payload = refused
            self.count_fault(name)
            return status, payload
        fault = fault_for(self.config, content_hash, attempt)
        if fault in ("rate_limit", "hang", "drop"):
            fault = None
        if fault:
            self.count_fault(fault)
        if fault == "server_error":
            return 500, {"error": {"message": "internal error", "type": "server_error"}}
        with self.lock:
            self.stats.paid_by_prompt[content_hash] += 1
        return 200, chat_completion(self.config, body, content_hash, attempt, fault)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def count_fault(self, name: str) -> None:
        with self.lock:
            self.stats.faults[name] += 1

    def reset(self) -> None:
        with self.lock:
            self.stats = ServerStats()

    def start(self) -> "FakeOpenAIServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted (Ctrl-C); the command-line entry point."""
        try:
            self._httpd.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            self._httpd.server_close()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> "FakeOpenAIServer":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
