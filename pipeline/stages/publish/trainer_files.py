"""Where each published row came from: the `<env>_metadata` config.

The alpaca config stays `instruction` + `output` (LLaMA-Factory's alpaca columns; TRL reads it
after renaming them to prompt/completion, and reads `<env>_conversational`, trainer_configs.py,
as it is). Where each row came from lives in a second config of the same environment,
`<env>_metadata` (`<env>/metadata/<split>-*.parquet`), row-aligned with the alpaca config and
carrying both alpaca columns too, so it can be trained on or filtered directly:

- `environment`, `category` (the task category the skill block was chosen for),
  `trajectory_id`, `step` (the record's turn in its trajectory),
- `skill_ids`: the ids of the general skills, category skills and mistakes shown in the
  record's prompt, as distill recorded them when it rendered the block (the provenance line's
  `skill_ids`), so they are right under `--skills retrieve` and `--skill-bank` too. Only a
  provenance file older than that field falls back to the category's items in the bank.
"""

from pathlib import Path
from typing import Any

import orjson
from datasets import Features, List, Value
from pydantic import ValidationError

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.formats.render import BlockOptions, shown_item_ids
from skillsft.pipeline.stages.report import Provenance
from skillsft.schemas.conversation import AlpacaRecord
from skillsft.schemas.skill_bank import SkillBank

METADATA_FEATURES = Features({
    "instruction": Value("string"),
    "output": Value("string"),
    "environment": Value("string"),
    "category": Value("string"),
    "trajectory_id": Value("string"),
    "step": Value("int32"),
    "skill_ids": List(Value("string")),
})
METADATA_FOLDER = "metadata"


def metadata_config_name(env: str) -> str:
    return f"{env}_metadata"


def load_bank(path: Path | None) -> SkillBank | None:
    """The bank the corpus was made with (pipeline/stages/corpus_bank.py), when it can be read."""
    if path is None:
        return None
    try:
        return SkillBank.model_validate(orjson.loads(path.read_bytes()))
    except (OSError, orjson.JSONDecodeError, ValidationError):
        return None


class MetadataRows:
    """The `<env>_metadata` row of each corpus record, given its provenance line."""

    def __init__(self, env: str, bank: SkillBank | None,
                 options: BlockOptions | None = None) -> None:
        self.environment = get_env(env).name
        self.bank = bank
        self.options = options
        self.fallback: dict[str, list[str]] = {}  # category -> the bank's items shown for it

    def row(self, record: AlpacaRecord, line: Provenance) -> dict[str, Any]:
        if line.skill_ids is None and self.bank is not None and line.task_type not in self.fallback:
            self.fallback[line.task_type] = shown_item_ids(self.bank, line.task_type, self.options)
        skill_ids = (line.skill_ids if line.skill_ids is not None
                     else self.fallback.get(line.task_type, []))
        return {"instruction": record.instruction, "output": record.output,
                "environment": self.environment, "category": line.task_type,
                "trajectory_id": line.trajectory_id, "step": line.turn, "skill_ids": skill_ids}
