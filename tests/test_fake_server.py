"""`python -m skillsft.testing`: the fake OpenAI-compatible server users can point the tool at."""

import json
import time
import urllib.request

import pytest

from skillsft.testing.process import server_stats, start_server_process

DISTILL_PROMPT = "Write exactly one thought for each step_index in [0, 2, 5]."
SCHEMA = {"type": "object", "properties": {"thoughts": {"type": "array", "items": {
    "type": "object", "properties": {"step_index": {"type": "integer"},
                                     "thought": {"type": "string"}},
    "required": ["step_index", "thought"], "additionalProperties": False}}},
    "required": ["thoughts"], "additionalProperties": False}


def ask(base_url: str, prompt: str) -> dict:
    body = {"model": "any", "messages": [{"role": "user", "content": prompt}],
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "a", "schema": SCHEMA, "strict": True}}}
    request = urllib.request.Request(f"{base_url}/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json",
                                      "Authorization": "Bearer anything"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(json.loads(response.read())["choices"][0]["message"]["content"])


@pytest.mark.parametrize(("flags", "indices"), [((), None), (("--stages",), [0, 2, 5])],
                         ids=["schema-only", "stages"])
def test_the_server_runs_alone_and_answers_by_the_prompt(flags, indices) -> None:
    process, base_url = start_server_process(*flags)
    try:
        answer = ask(base_url, DISTILL_PROMPT)
        stats = server_stats(base_url)
    finally:
        process.kill()
        process.wait()
    asked = [thought["step_index"] for thought in answer["thoughts"]]
    if indices is None:  # the minimal instance of the schema knows nothing of the prompt
        assert asked != [0, 2, 5]
    else:
        assert asked == indices
    assert stats["total"] == stats["paid"] == 1


def test_the_server_counts_waves_and_requests_in_flight(server_factory) -> None:
    """Requests that overlap share a wave, one arriving at an idle server opens the next (the
    bench replays a run's requests wave after wave); the in-flight time integral exceeds the
    busy time exactly when requests overlapped."""
    import threading

    both_arrived = threading.Barrier(2, timeout=30)

    def answer(body: dict) -> str:
        if body["messages"][-1]["content"].startswith("together"):
            both_arrived.wait()  # neither is answered before the other has arrived
        return json.dumps({"thoughts": []})

    def until_idle() -> None:  # the server counts an answer done just after sending it
        deadline = time.monotonic() + 30
        while server.stats.in_flight and time.monotonic() < deadline:
            time.sleep(0.01)

    server = server_factory(responder=answer)
    ask(server.base_url, "alone first")
    until_idle()
    alone = server.stats.in_flight_seconds - server.stats.busy_seconds
    pair = [threading.Thread(target=ask, args=(server.base_url, f"together {n}"))
            for n in range(2)]
    for thread in pair:
        thread.start()
    for thread in pair:
        thread.join()
    until_idle()
    overlapped = server.stats.in_flight_seconds - server.stats.busy_seconds
    ask(server.base_url, "alone last")
    assert server.stats.waves == [0, 1, 1, 2]
    assert alone == 0 and overlapped > 0  # one in flight, then two for a while
