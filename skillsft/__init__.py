"""skillsft: turn LLM-agent rollouts into skill-augmented SFT corpora (see README.md)."""

__version__ = "0.1.0"
