"""The one exception that is not a failure: a stage whose batches are still at the provider.

Kept apart from the teacher (and its openai import) because the command line reads it when it
reports a run, and importing the client there would slow every `skillsft` start.
"""

from skillsft.pipeline.errors import SkillsftError


class BatchesPending(SkillsftError):  # noqa: N818 - a state, reported as "waiting"
    """The stage's batches are still at the provider; the same command collects them later."""

    def __init__(self, stage: str, batch_ids: list[str], items: int) -> None:
        shown = ", ".join(batch_ids[:5]) + (" ..." if len(batch_ids) > 5 else "")
        super().__init__(
            f"{items} requests in {len(batch_ids)} batch(es) at the provider "
            f"({shown}); batches finish within 24 hours, usually much sooner: re-run the same "
            "command to collect them (or add --batch-wait to wait)"
        )
        self.stage = stage
        self.batch_ids = batch_ids
