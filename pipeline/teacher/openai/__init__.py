"""The teacher that calls any OpenAI-compatible chat-completions endpoint."""
