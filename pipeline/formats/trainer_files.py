"""What a trainer needs beside the alpaca shards: row provenance and a LLaMA-Factory entry.

The alpaca config stays `instruction` + `output`, the two columns every SFT trainer reads
without a mapping. Where each row came from lives in a second config of the same environment,
`<env>_metadata` (`<env>/metadata/<split>-*.parquet`), row-aligned with the alpaca config and
carrying both alpaca columns too, so it can be trained on or filtered directly:

- `environment`, `category` (the task category the skill block was chosen for),
  `trajectory_id`, `step` (the record's turn in its trajectory),
- `skill_ids`: the ids of the general skills, category skills and mistakes shown in the
  record's prompt, read from the run's skill bank with the same selection the renderer uses.

`dataset_info.json` (LLaMA-Factory's registry of datasets) is written beside the export, one
entry per split, pointing at the parquet shards with the alpaca column mapping.
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
DATASET_INFO_FILE = "dataset_info.json"


def metadata_config_name(env: str) -> str:
    return f"{env}_metadata"


def load_bank(work_dir: Path) -> SkillBank | None:
    path = Path(work_dir) / "skill_bank.json"
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
    shown: dict[str, list[str]] = {}
    columns: dict[str, list[Any]] = {name: [] for name in METADATA_FEATURES
                                     if name not in ("instruction", "output")}
    for line in provenance:
        if bank is not None and line.task_type not in shown:
            shown[line.task_type] = shown_item_ids(bank, line.task_type, options)
        columns["environment"].append(spec.name)
        columns["category"].append(line.task_type)
        columns["trajectory_id"].append(line.trajectory_id)
        columns["step"].append(line.turn)
        columns["skill_ids"].append(shown.get(line.task_type, []))
    return columns


def llama_factory_entries(env: str, shards: dict[str, list[str]]) -> dict[str, Any]:
    """dataset_info.json entries: `skillsft_<env>` for train, `skillsft_<env>_<split>` else.

    LLaMA-Factory takes one file (or folder) per entry; a split in several shards gets one
    entry per shard, numbered."""
    entries: dict[str, Any] = {}
    for split, paths in shards.items():
        base = f"skillsft_{env}" + ("" if split == "train" else f"_{split}")
        for index, path in enumerate(paths):
            name = base if len(paths) == 1 else f"{base}_{index:05d}"
            entries[name] = {
                "file_name": path,
                "formatting": "alpaca",
                "columns": {"prompt": "instruction", "response": "output"},
            }
    return entries


def write_dataset_info(root: Path, env: str, shards: dict[str, list[str]]) -> Path:
    """Merge this environment's entries into `root/dataset_info.json` (others are kept)."""
    path = Path(root) / DATASET_INFO_FILE
    try:
        existing = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        existing = {}
    if not isinstance(existing, dict):
        existing = {}
    kept = {name: entry for name, entry in existing.items()
            if not (name == f"skillsft_{env}" or name.startswith(f"skillsft_{env}_"))}
    kept.update(llama_factory_entries(env, shards))
    path.write_bytes(orjson.dumps(kept, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    return path
