"""Test helpers other test modules may import (a local OpenAI-compatible server, fixtures)."""
