"""Run the fake OpenAI-compatible server in the foreground until Ctrl-C.

    python -m skillsft.testing [--port 0] [--latency 0.1] [--stages] [--p-rate-limit 0.1] ...

Prints `PORT <n>` on its first line once it listens, so a parent process can read the port it
got (`--port 0` picks a free one). Any API key is accepted.
"""

import argparse

from skillsft.testing.openai_server import FAULTS, FakeOpenAIServer, ServerConfig
from skillsft.testing.stage_responder import stage_responder


def parse_config(argv: list[str] | None = None) -> tuple[ServerConfig, int]:
    """The server configuration and port the command line asks for."""
    parser = argparse.ArgumentParser(prog="python -m skillsft.testing",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before every answer")
    parser.add_argument("--retry-after", type=float, default=0.05)
    parser.add_argument("--hang-seconds", type=float, default=5.0)
    for fault in FAULTS:
        parser.add_argument(f"--p-{fault.replace('_', '-')}", type=float, default=0.0,
                            help=f"probability of a {fault.replace('_', ' ')} per attempt")
    parser.add_argument("--refuse-json-schema", action="store_true")
    parser.add_argument("--batch-polls", type=int, default=2)
    parser.add_argument("--expire-batches", type=int, default=0)
    parser.add_argument("--max-in-flight", type=int, default=0,
                        help="answer 429 to a request above this many in flight (0: no cap)")
    parser.add_argument("--stages", action="store_true",
                        help="answer skillsft's stage prompts plausibly (a whole run succeeds); "
                        "without it every answer is the minimal instance of the asked schema")
    args = parser.parse_args(argv)
    config = ServerConfig(
        latency=args.latency,
        retry_after=args.retry_after,
        hang_seconds=args.hang_seconds,
        refuse_json_schema=args.refuse_json_schema,
        batch_polls=args.batch_polls,
        expire_batches=args.expire_batches,
        max_in_flight=args.max_in_flight,
        seed=args.seed,
        responder=stage_responder if args.stages else None,
        **{f"p_{fault}": getattr(args, f"p_{fault}") for fault in FAULTS},
    )
    return config, args.port


def main(argv: list[str] | None = None) -> None:
    config, port = parse_config(argv)
    server = FakeOpenAIServer(config, port=port)
    print(f"PORT {server.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
