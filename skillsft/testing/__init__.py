"""A fake OpenAI-compatible server, to try a setup or a benchmark without paying a provider.

`python -m skillsft.testing --port 8000 --stages` serves /v1/chat/completions, /v1/models and
the Batch API on 127.0.0.1 and answers every prompt with JSON that fits the schema it asks for
(`--stages` also answers the distillation prompts the way a careful model would, so a whole
`skillsft run ... --base-url http://127.0.0.1:8000/v1` succeeds). Faults (429 bursts, 5xx,
hangs, dropped connections, malformed and truncated answers) are switched on by flags and fall
on prompts reproducibly, so a retry or resume policy can be watched at work.

The test suite and `bench/` use the same server (tests/support adds only pytest fixtures).
Modules: openai_server (the server), batch_endpoint (its Batch API half), stage_responder
(answers to skillsft's stage prompts), process (run it as a child process), toy (a small
request set for teacher benchmarks). Nothing here is imported by the pipeline itself.
"""
