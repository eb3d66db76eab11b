"""Live vs Batch API on the bundled samples, and the cost estimate against what was then billed.

    .venv/bin/python bench/batch_and_estimate.py [--envs alfworld webshop search]

For each environment, against one fake OpenAI-compatible server (skillsft.testing, the
stage responder): `skillsft estimate`, then `skillsft run` live, then `skillsft run --batch
--batch-wait` into another work dir. Prints per teacher stage: the estimate's requests and
input tokens, the live run's calls and server-reported prompt tokens (with the ratio), the
batch run's requests, batches and live calls (which must be 0; the response-mode probe of the
pre-flight is counted apart), whether the two corpora are equal byte for byte (the server's
answers depend on the whole request body, so they are only when every batch body is the live
one), and the dollars both runs report (built-in price table, gpt-4o-mini). Everything is
measured in this process, in the same run, on the same machine state.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from skillsft.tasks.targets import iter_manifests
from skillsft.testing.openai_server import FakeOpenAIServer, ServerConfig
from skillsft.testing.stage_responder import stage_responder

REPO = Path(__file__).resolve().parents[1]

ROW = re.compile(r"^\s+(memories|aggregate|distill|total)\s+\S*\s+(\d+)\s+(\d+)\s+(\d+)\s+"
                 r"(\d+)\s+(\d+)\s+(\S+)\s+(\S+)$", re.M)
STAGES = ("memories", "aggregate", "distill")


def skillsft(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "skillsft", *args], cwd=REPO,
                          env={**os.environ, "OPENAI_API_KEY": "sk-bench"},
                          capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"skillsft {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return done.stdout


def corpus_records(work: Path, env: str) -> list[bytes]:
    return (work / f"{env}_sft_data.jsonl").read_bytes().splitlines()


def usage(work: Path) -> dict[str, dict]:
    return {u["stage"]: u for _, m in iter_manifests(work) for u in m.get("teacher", [])}


def measure(env: str, scratch: Path) -> None:
    with FakeOpenAIServer(ServerConfig(responder=stage_responder)) as server:
        common = ("--teacher", "openai", "--base-url", server.base_url)
        live_dir, batch_dir = scratch / f"{env}-live", scratch / f"{env}-batch"
        estimate = {m.group(1): m.groups()[1:] for m in ROW.finditer(
            skillsft("estimate", env, *common, "--work-dir", str(live_dir)))}
        skillsft("run", env, *common, "--work-dir", str(live_dir))
        live_calls, live_probes = server.stats.stage_requests, server.stats.probes
        skillsft("run", env, *common, "--work-dir", str(batch_dir), "--batch", "--batch-wait",
                 "--batch-poll", "0.01")
        batch_live_calls = server.stats.stage_requests - live_calls
        batch_probes = server.stats.probes - live_probes
        batches = len(server.batches.batches)
        items = server.stats.batch_items
    live, batch = usage(live_dir), usage(batch_dir)
    live_records, batch_records = corpus_records(live_dir, env), corpus_records(batch_dir, env)
    differing = sum(a != b for a, b in zip(live_records, batch_records, strict=False))
    differing += abs(len(live_records) - len(batch_records))
    print(f"\n{env}: live run {live_calls} HTTP requests (+{live_probes} mode probes); batch "
          f"run {items} batch items in {batches} batches, {batch_live_calls} live requests "
          f"(+{batch_probes} mode probes); corpus records differing: {differing} of "
          f"{len(live_records)}")
    print(f"  {'stage':<10} {'est req':>8} {'live req':>8} {'batch req':>9} {'est in tok':>10} "
          f"{'billed in':>10} {'ratio':>6} {'est $live':>10} {'live $':>10} {'batch $':>10}")
    for stage in STAGES:
        requests, _, _, tokens_in, _, usd_live, _ = estimate[stage]
        billed = live[stage]["prompt_tokens"]
        print(f"  {stage:<10} {requests:>8} {live[stage]['calls_new']:>8} "
              f"{batch[stage]['calls_new']:>9} {tokens_in:>10} {billed:>10} "
              f"{int(tokens_in) / billed:>6.2f} {usd_live:>10} "
              f"{live[stage]['cost_usd']:>10.6f} {batch[stage]['cost_usd']:>10.6f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["alfworld", "webshop", "search"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="skillsft-bench-") as scratch:
        for env in args.envs:
            measure(env, Path(scratch))


if __name__ == "__main__":
    main()
