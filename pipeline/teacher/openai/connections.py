"""The HTTP client of one endpoint: its connection pool, and a cheaper check of idle connections.

Every time a request starts or ends, httpcore's pool walks all its connections and asks each
idle one whether the server has closed it (`has_expired`: is the socket readable?). The answer
itself is one `poll` system call, but the way there goes through anyio's typed attributes,
which build a table of lookups (and call `getpeername`) for every question. With 64 requests
in flight that is about 60 questions per request and, measured with cProfile on
`bench/teacher.py --cpu`, about a quarter of the client's CPU. `QuickReadableBackend` wraps the
pool's network backend so that each stream keeps its raw socket from the start and answers
`is_readable` with the one `poll`; everything else is passed through unchanged.

The wrap reaches into the client (`_transport._pool._network_backend`: httpx has no parameter
for a network backend, and passing a transport of our own would turn off proxies taken from the
environment). If a later httpx2 or httpcore2 names things differently, the client is left
as it is (correct, only slower), and tests/teacher/test_connections.py says so.
"""

import select
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import httpcore2
import httpx2
from openai import DefaultAsyncHttpxClient


def socket_is_readable(sock: socket.socket | None) -> bool:
    """Whether a read would return at once (data, or the b"" of a closed connection); a
    socket that is gone counts as readable, so its connection is dropped."""
    if sock is None or sock.fileno() < 0:
        return True
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


class QuickReadableStream(httpcore2.AsyncNetworkStream):
    def __init__(self, inner: httpcore2.AsyncNetworkStream) -> None:
        self.inner = inner
        self.raw_socket: socket.socket | None = inner.get_extra_info("socket")

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self.inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self.inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore2.AsyncNetworkStream:
        # TLS runs over the same TCP socket, which is the one whose readability tells
        return QuickReadableStream(await self.inner.start_tls(ssl_context, server_hostname,
                                                              timeout))

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            return socket_is_readable(self.raw_socket)
        return self.inner.get_extra_info(info)


class QuickReadableBackend(httpcore2.AsyncNetworkBackend):
    def __init__(self, inner: httpcore2.AsyncNetworkBackend) -> None:
        self.inner = inner

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None,
                          ) -> httpcore2.AsyncNetworkStream:
        return QuickReadableStream(await self.inner.connect_tcp(
            host, port, timeout=timeout, local_address=local_address,
            socket_options=socket_options))

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None,
                                  ) -> httpcore2.AsyncNetworkStream:
        return QuickReadableStream(await self.inner.connect_unix_socket(
            path, timeout=timeout, socket_options=socket_options))

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


def quicken(transport: httpx2.AsyncHTTPTransport) -> bool:
    """Wrap the transport's network backend (module docstring); False when it cannot."""
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if not isinstance(pool, httpcore2.AsyncConnectionPool) or not isinstance(
            backend, httpcore2.AsyncNetworkBackend):
        return False
    if not isinstance(backend, QuickReadableBackend):
        pool._network_backend = QuickReadableBackend(backend)  # noqa: SLF001
    return True


def endpoint_http_client(connections: int,
                         on_response: Callable[[httpx2.Response], Awaitable[None]],
                         ) -> httpx2.AsyncClient:
    """The SDK's default async client (its timeouts, redirects, proxies from the environment)
    with room for `connections` and `on_response` seeing every answer."""
    limits = httpx2.Limits(max_connections=connections, max_keepalive_connections=connections)
    client = DefaultAsyncHttpxClient(event_hooks={"response": [on_response]}, limits=limits)
    # its own default transport (a transport passed in would turn off the environment's
    # proxies); a proxy's transport is mounted apart and left as it is
    quicken(client._transport)  # type: ignore[arg-type]  # noqa: SLF001
    return client
