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

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
from datasets import Features, List, Value
from pydantic import ValidationError

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.formats.render import BlockOptions, shown_item_ids
from skillsft.pipeline.stages.report import Provenance
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


def metadata_columns(
    env: str, provenance: Sequence[Provenance], bank: SkillBank | None,
    options: BlockOptions | None = None,
) -> dict[str, list[Any]]:
    """The metadata columns for rows with this provenance (same order)."""
    spec = get_env(env)
    fallback: dict[str, list[str]] = {}
    columns: dict[str, list[Any]] = {name: [] for name in METADATA_FEATURES
                                     if name not in ("instruction", "output")}
    for line in provenance:
        if line.skill_ids is None and bank is not None and line.task_type not in fallback:
            fallback[line.task_type] = shown_item_ids(bank, line.task_type, options)
        columns["environment"].append(spec.name)
        columns["category"].append(line.task_type)
        columns["trajectory_id"].append(line.trajectory_id)
        columns["step"].append(line.turn)
        columns["skill_ids"].append(line.skill_ids if line.skill_ids is not None
                                    else fallback.get(line.task_type, []))
    return columns
