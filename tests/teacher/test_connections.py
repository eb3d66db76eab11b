"""The endpoint's HTTP client: the quick idle-connection check is in place and tells true."""

import asyncio
import socket

import httpcore2

from skillsft.pipeline.teacher.openai.connections import (
    QuickReadableBackend,
    QuickReadableStream,
    endpoint_http_client,
    socket_is_readable,
)


async def _ignore(_response: object) -> None:
    return None


def test_the_endpoint_client_uses_the_quick_check() -> None:
    """Fails when httpx2/httpcore2 rename what connections.quicken reaches into: the client then
    still works, only slower, and this says so."""
    client = endpoint_http_client(8, _ignore)
    pool = client._transport._pool  # type: ignore[attr-defined]
    assert isinstance(pool._network_backend, QuickReadableBackend)
    assert pool._max_connections == 8


def test_readable_means_data_or_a_closed_peer() -> None:
    mine, theirs = socket.socketpair()
    try:
        assert not socket_is_readable(mine)  # idle and open: keep it
        theirs.sendall(b"x")
        assert socket_is_readable(mine)  # data nobody asked for: the pool drops it
        mine.recv(1)
        assert not socket_is_readable(mine)
        theirs.close()
        assert socket_is_readable(mine)  # the server hung up
    finally:
        mine.close()
    assert socket_is_readable(mine)  # gone
    assert socket_is_readable(None)


def test_a_stream_from_the_backend_answers_like_the_one_it_wraps(openai_server) -> None:
    host, port = openai_server.base_url.split("//")[1].split("/")[0].split(":")

    async def check() -> None:
        backend = QuickReadableBackend(httpcore2.AnyIOBackend())
        stream = await backend.connect_tcp(host, int(port), timeout=5)
        assert isinstance(stream, QuickReadableStream)
        assert stream.get_extra_info("is_readable") is False
        assert stream.get_extra_info("server_addr") == stream.inner.get_extra_info("server_addr")
        await stream.write(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        for _ in range(100):  # the answer arrives: now a read would not wait
            if stream.get_extra_info("is_readable"):
                break
            await asyncio.sleep(0.01)
        assert stream.get_extra_info("is_readable") is True
        assert (await stream.read(64)).startswith(b"HTTP/1.")
        await stream.aclose()

    asyncio.run(check())
