"""The corpus without its skills: the same records, their experience block left out.

SKILL0-style training gives a student the skills in context first and then withdraws them,
so that the policy internalizes them; that needs every record twice, with and without the
block, and nothing else different. The skill-free instruction is not cut out of a finished
record: each distilled conversation is rendered again by its layout with the block's slot
left empty (`without_block`, pipeline/formats/conversations.py) and flattened exactly as
stage 4 flattened it (same post-checks, same history window), so the output, the order and
the ids are those of the corpus. No teacher is asked anything.
"""

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from skillsft.pipeline import workdir
from skillsft.pipeline.errors import InputError
from skillsft.pipeline.formats.conversations import LayoutError, RenderOptions
from skillsft.pipeline.formats.record_files import CONVERSATIONS, LoadedRecords, iter_records
from skillsft.schemas.conversation import AlpacaRecord

if TYPE_CHECKING:
    from skillsft.pipeline.envs import EnvSpec


def noskill_config(env: str) -> str:
    return f"{env}_noskill"


def flatten_history(work_dir: Path, env: str) -> int:
    """The history window stage 4 was run with (its manifest), else the default."""
    try:
        manifest = orjson.loads(workdir.manifest_for(work_dir / workdir.corpus(env)).read_bytes())
        return int(manifest["params"]["history"])
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return RenderOptions().history


def skill_free_records(source: Path, spec: "EnvSpec", history: int) -> Iterator[AlpacaRecord]:
    """Stage 4's records of every readable conversation, rendered without the block, in
    order and one conversation at a time; a conversation stage 4 could not read is skipped as
    stage 4 skipped it."""
    layout = spec.turn_layout()
    options = RenderOptions(history=history)
    for conversation in iter_records(source, CONVERSATIONS, "publish", LoadedRecords([])):
        try:
            layout.alpaca_records(conversation, spec.postchecks, options, Counter())
        except LayoutError:
            continue  # not in the corpus either
        try:
            bare = layout.without_block(conversation)
        except LayoutError as exc:
            raise InputError(f"{source}: {conversation.extra_info.trajectory_id}: {exc}; "
                             "regenerate it with `skillsft distill`") from None
        yield from layout.alpaca_records(bare, spec.postchecks, options, Counter())
