"""The teacher layer: one interface (base.py); OpenAI-compatible and offline implementations."""
