"""Sharded teacher stages (tasks/shards.py) against the local OpenAI-compatible server.

- whatever `--shards N` (1, a few, more shards than records), memories and distillation write
  the bytes, rejects and counters of an unsharded run, on an input with invalid records, a
  duplicated record and prompts the server fails for good;
- two `skillsft run` processes sharing one luigid on 127.0.0.1 both do shards, never the same
  one twice, never pay a request twice, keep the machine's concurrency limit between them, and
  write the corpus of a one-worker run.
"""

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import orjson
import pytest

from skillsft.cli import main
from skillsft.pipeline.teacher.openai.negotiation import PROBE_PROMPT
from skillsft.tasks.targets import iter_manifests
from skillsft.testing.openai_server import ServerFault
from skillsft.testing.stage_responder import stage_responder
from tests.support.fixtures import TEST_API_KEY
from tests.tasks.test_e2e_server import REPO_ROOT, corpus, finish

SAMPLE = REPO_ROOT / "examples" / "rollouts" / "alfworld"
BROKEN_GOAL = "put a hot tomato in sinkbasin"  # env000: every request about it fails for good


def failing_for_one_goal(body):
    if BROKEN_GOAL in str(body.get("messages")):
        raise ServerFault(400, "the server refuses this prompt")  # a permanent failure
    return stage_responder(body)


@pytest.fixture(scope="module")
def stage_inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Stage-1 records (plus an invalid one, a duplicate and one without trajectories) and a
    skill bank, from an offline run of the sample."""
    work = tmp_path_factory.mktemp("shard_inputs")
    assert main(["run", "alfworld", "--teacher", "offline", "--work-dir", str(work)]) == 0
    records = json.loads((work / "processed_trajectories.json").read_text())
    records[3:3] = [{"env_id": "broken", "task": 7}, dict(records[1])]
    records.append({"env_id": "empty", "task": "look around", "type": "all_success",
                    "trajectories": []})
    (work / "input.json").write_text(json.dumps(records))
    return work


def stage_run(inputs: Path, out: Path, base_url: str, shards: int, monkeypatch) -> dict[str, bytes]:
    monkeypatch.setenv("OPENAI_API_KEY", TEST_API_KEY)
    common = ["alfworld", "--teacher", "openai", "--base-url", base_url, "--shards", str(shards),
              "--max-failure-rate", "0.9", "--input", str(inputs / "input.json")]
    assert main(["memories", *common, "--output", str(out / "generated_memories.json")]) == 0
    assert main(["distill", *common, "--skill-bank", str(inputs / "skill_bank.json"),
                 "--output", str(out / "distilled_trajectories.json")]) == 0
    names = ["generated_memories.json", "memories_rejects.jsonl", "distilled_trajectories.json",
             "distill_rejects.jsonl"]
    made = {name: (out / name).read_bytes() for name in names}
    for name, manifest in iter_manifests(out):
        made[f"counts of {name}"] = orjson.dumps(manifest["counts"], option=orjson.OPT_SORT_KEYS)
    return made


@pytest.mark.parametrize("shards", [1, 2, 3, 40], ids=lambda n: f"shards{n}")
def test_sharded_stages_write_the_unsharded_bytes(
    tmp_path: Path, stage_inputs: Path, server_factory, shards: int, monkeypatch
) -> None:
    server = server_factory(responder=failing_for_one_goal)
    unsharded = stage_run(stage_inputs, tmp_path / "one", server.base_url, 1, monkeypatch)
    sharded = stage_run(stage_inputs, tmp_path / "many", server.base_url, shards, monkeypatch)
    assert sharded == unsharded
    # the input really had every kind of reject, in every phase
    for kind in (b'"invalid_record"', b'"teacher_error"', b'"no_trajectories"'):
        assert kind in unsharded["memories_rejects.jsonl"]
    for kind in (b'"invalid_record"', b'"teacher"'):
        assert kind in unsharded["distill_rejects.jsonl"]
    parts = sorted((tmp_path / "many" / "shards" / "memories").glob("part-*.json"))
    assert len(parts) == (shards if shards > 1 else 0)
    # the split copies no record: its index points into stage 1's file
    assert not list((tmp_path / "many" / "shards" / "trajectories").glob("*/part-*.json"))


def replicate_sample(root: Path, copies: int) -> None:
    """`copies` env folders from the sample's, each copy's prompts made unique."""
    sources = sorted(p for p in SAMPLE.iterdir() if p.is_dir())
    for number in range(copies):
        target = root / f"env{number:03d}"
        target.mkdir(parents=True)
        for file in sorted(sources[number % len(sources)].glob("*.txt")):
            text = file.read_text().replace("You are in the middle of a room.",
                                            f"You are in the middle of a room (copy {number}).", 1)
            (target / file.name).write_text(text)


def run_process(rollouts: Path, work: Path, base_url: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "skillsft", "run", "alfworld", "--teacher", "openai",
         "--base-url", base_url, "--rollout-dir", str(rollouts), "--work-dir", str(work),
         "--concurrency", "3", "--max-concurrency", "3", "--shards", "6",
         "--n-success-envs", "1000", "--n-fail-envs", "1000", *extra],
        cwd=REPO_ROOT, env={**os.environ, "OPENAI_API_KEY": TEST_API_KEY},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )


def answering_once_both_workers_joined(scheduler: str):
    """The test server's responder: no answer until luigid shows both processes running a task,
    so that neither can do every shard before the other has joined (a loaded machine starts
    them seconds apart)."""
    joined = {"yes": False}

    def respond(body):
        if PROBE_PROMPT in str(body.get("messages")):  # the pre-flight, before any worker
            return stage_responder(body)
        deadline = time.monotonic() + 120
        while not joined["yes"] and time.monotonic() < deadline:
            with urllib.request.urlopen(scheduler + "/api/worker_list?data={}", timeout=5) as r:
                # both processes are running a task: an idle Luigi worker polls for work only
                # every 0.2-0.3 s (skillsft/luigi_options.IDLE_WAIT; Luigi's own default is
                # 1-6 s), time enough for the first to do every shard if answers flowed; a
                # worker that never gets one times out here
                workers = json.loads(r.read())["response"]
                joined["yes"] = (len({w["pid"] for w in workers}) >= 2
                                 and all(w["num_running"] for w in workers))
            time.sleep(0.05)
        return stage_responder(body)

    return respond


def test_two_worker_processes_share_the_shards(
    tmp_path: Path, server_factory, scheduler_url: str  # noqa: F811 - the fixture
) -> None:
    rollouts = tmp_path / "rollouts"
    replicate_sample(rollouts, 40)
    alone_server = server_factory(responder=stage_responder, latency=0.03)
    finish(run_process(rollouts, tmp_path / "alone", alone_server.base_url))

    server = server_factory(responder=answering_once_both_workers_joined(scheduler_url),
                            latency=0.03)
    work = tmp_path / "shared"
    workers = [run_process(rollouts, work, server.base_url, "--scheduler-url", scheduler_url)
               for _ in range(2)]
    for process in workers:
        finish(process)

    assert corpus(work, "alfworld") == corpus(tmp_path / "alone", "alfworld")
    made_by: dict[str, tuple[str, int]] = {}
    for stage in ("memories", "distill"):
        for part in sorted((work / "shards" / stage).glob("part-*.json")):
            worker = orjson.loads(part.read_bytes().split(b"\n", 1)[0])["worker"]  # head line
            made_by[f"{stage}/{part.name}"] = (worker["host"], worker["pid"])
    assert len(made_by) == 12
    assert {pid for _, pid in made_by.values()} == {p.pid for p in workers}, made_by
    # every request answered once, as in the one-worker run, and never more than the machine's
    # limit of 3 in flight although each process alone may send 3
    assert max(server.stats.paid_by_prompt.values()) == 1
    assert server.stats.paid_by_prompt == alone_server.stats.paid_by_prompt
    assert server.stats.peak_in_flight <= 3


def test_a_shard_reads_its_records_through_the_index_and_refuses_a_changed_file(
        tmp_path: Path) -> None:
    from skillsft.pipeline.errors import InputError
    from skillsft.pipeline.formats import jsonio
    from skillsft.pipeline.formats.record_stream import scan_array
    from skillsft.pipeline.stages.shards import index_spans, partition
    from skillsft.tasks.shards import read_part

    records = [{"env_id": f"env{n}", "task": "t", "trajectories": []} for n in range(9)]
    source = tmp_path / "processed_trajectories.json"
    source.write_bytes(jsonio.dumps(records))
    with open(source, "rb") as handle:
        parts = index_spans(scan_array(handle), 2)
    index = tmp_path / "index.json"
    index.write_bytes(orjson.dumps({
        "source": str(source), "bytes": source.stat().st_size,
        "parts": [{"positions": p.positions, "spans": p.spans} for p in parts]}))
    for shard, copied in enumerate(partition(records, 2)):
        part = read_part(index, source, shard, tmp_path / "no-part-file.json")
        assert part["records"] == copied.records and part["positions"] == copied.positions
    source.write_bytes(jsonio.dumps(records[:-1]))
    with pytest.raises(InputError, match="changed after it was split"):
        read_part(index, source, 0, tmp_path / "no-part-file.json")
