"""What a corpus export carries beside the SFT config: preference pairs and the skill document.

- `<env>_preferences/train-*.parquet`: the pairs of `<env>_preference_pairs.jsonl` as their own
  config in the same repo, in exactly the `prompt`, `chosen`, `rejected` string columns TRL's
  DPO trainer reads (`load_dataset(repo, "alfworld_preferences")`). The metadata stays in the
  jsonl file: extra columns are not what a DPO loader expects.
- `skills/<env>-skills/SKILL.md`: the skill document written by the run, as it is.

Each is exported only when the run made it; an empty pairs file gives no config (and a note).
"""

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from datasets import Dataset, Features, SplitInfo, Value

from skillsft.pipeline.formats.dataset_card import CardConfig

PREFERENCE_FEATURES = Features(
    {"prompt": Value("string"), "chosen": Value("string"), "rejected": Value("string")}
)
SKILLS_DIR = "skills"


def preference_config(env: str) -> str:
    return f"{env}_preferences"


def pairs_file(env: str) -> str:
    return f"{env}_preference_pairs.jsonl"


@dataclass
class ExtraExport:
    paths: list[Path] = field(default_factory=list)
    configs: list[tuple[CardConfig, str]] = field(default_factory=list)  # (config, card section)
    folders: list[str] = field(default_factory=list)  # repo folders this export owns
    notes: list[str] = field(default_factory=list)


def read_pairs(path: Path, notes: list[str]) -> list[dict[str, str]]:
    rows = []
    for number, line in enumerate(path.read_bytes().splitlines(), start=1):
        try:
            item = orjson.loads(line)
            rows.append({name: str(item[name]) for name in PREFERENCE_FEATURES})
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            notes.append(f"{path.name} line {number}: unreadable pair skipped ({exc})")
    return rows


def export_preferences(work_dir: Path, env: str, root: Path, extra: ExtraExport) -> None:
    source = work_dir / pairs_file(env)
    name = preference_config(env)
    final = root / name
    shutil.rmtree(final, ignore_errors=True)
    if not source.is_file():
        return
    extra.folders.append(name)
    rows = read_pairs(source, extra.notes)
    if not rows:
        extra.notes.append(f"{source.name} holds no pair: no {name} config published")
        return
    dataset = Dataset.from_dict(
        {column: [r[column] for r in rows] for column in PREFERENCE_FEATURES},
        features=PREFERENCE_FEATURES,
    )
    final.mkdir(parents=True)
    shard = final / "train-00000-of-00001.parquet"
    dataset.to_parquet(str(shard))
    config = CardConfig(
        env=name, features=PREFERENCE_FEATURES,
        splits=(SplitInfo(name="train", num_bytes=dataset.data.nbytes, num_examples=len(rows)),),
        download_size=shard.stat().st_size,
    )
    section = "\n".join([
        f"## Config `{name}`",
        "",
        f"- Rows: {len(rows)} step-level preference pairs (`prompt`, `chosen`, `rejected`, the "
        "columns TRL's DPO trainer reads), from anchor states: states reached by a won and a "
        "lost episode of the same task, at their earliest divergence.",
        "- `prompt` is the instruction the SFT config has for that state, with the same skill "
        "block; `chosen` is the winning episode's thought and action, `rejected` the losing "
        "episode's.",
    ])
    extra.paths.append(shard)
    extra.configs.append((config, section))


def export_skill_document(work_dir: Path, env: str, root: Path, extra: ExtraExport) -> None:
    name = f"{env}-skills"
    source = work_dir / SKILLS_DIR / name / "SKILL.md"
    target = root / SKILLS_DIR / name / "SKILL.md"
    if not source.is_file():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    extra.folders.append(f"{SKILLS_DIR}/{name}")
    extra.paths.append(target)


def export_extras(work_dir: Path, env: str, root: Path) -> ExtraExport:
    extra = ExtraExport()
    export_preferences(work_dir, env, root, extra)
    export_skill_document(work_dir, env, root, extra)
    return extra
