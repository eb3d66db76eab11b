"""What a corpus export carries beside the SFT configs: preference pairs and the skill bank.

- `<env>_preferences/train-*.parquet`: the pairs of `<env>_preference_pairs.jsonl` as their own
  config in the same repo, in exactly the `prompt`, `chosen`, `rejected` string columns TRL's
  DPO trainer and LLaMA-Factory's ranking datasets read. The metadata stays in the jsonl file:
  extra columns are not what a DPO loader expects.
- `<env>_preferences_conversational`: the same pairs in TRL's conversational form (`prompt` a
  user message, `chosen` and `rejected` an assistant message each), so a DPO run applies the
  student's chat template.
- `skills/<env>-skills/skill_bank.json`: the skill bank the corpus was distilled with
  (pipeline/stages/corpus_bank.py; with `--skill-bank`, that file), byte for byte, so the
  `skill_ids` of the metadata config resolve from the Hub; `skills/<env>-skills/SKILL.md`: the skill
  document written by the run, as it is. One folder per environment, since one repo holds
  several environments and each has its own bank.

Each is exported only when the run made it; an empty pairs file gives no config (and a note).
"""

import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from datasets import Features, List, Value

from skillsft.pipeline import workdir
from skillsft.pipeline.stages.corpus_bank import CorpusBank
from skillsft.pipeline.stages.publish.card import CardConfig
from skillsft.pipeline.stages.publish.parquet import (
    ConfigSpools,
    Spool,
    split_info,
    write_config,
    write_shards,
)
from skillsft.pipeline.stages.publish.trainer_configs import assistant, user
from skillsft.pipeline.stages.skill_document import DOCUMENT_FILE, skill_name_of

PREFERENCE_FEATURES = Features(
    {"prompt": Value("string"), "chosen": Value("string"), "rejected": Value("string")}
)
MESSAGES = List({"role": Value("string"), "content": Value("string")})
CONVERSATIONAL_PREFERENCE_FEATURES = Features(
    {"prompt": MESSAGES, "chosen": MESSAGES, "rejected": MESSAGES})


def preference_config(env: str) -> str:
    return f"{env}_preferences"


def conversational_preference_config(env: str) -> str:
    return f"{env}_preferences_conversational"


def skills_folder(env: str) -> str:
    return f"{workdir.SKILLS_DIR}/{skill_name_of(env)}"


@dataclass
class ExtraExport:
    paths: list[Path] = field(default_factory=list)
    configs: list[tuple[CardConfig, str]] = field(default_factory=list)  # (config, card section)
    folders: list[str] = field(default_factory=list)  # repo folders this export owns
    side_configs: list[CardConfig] = field(default_factory=list)  # YAML only, no section
    notes: list[str] = field(default_factory=list)


def read_pairs(path: Path, notes: list[str]) -> Iterator[dict[str, str]]:
    """The pairs of a pairs file, one line at a time; an unreadable line is a note."""
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                item = orjson.loads(line)
                yield {name: str(item[name]) for name in PREFERENCE_FEATURES}
            except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
                notes.append(f"{path.name} line {number}: unreadable pair skipped ({exc})")


def export_preferences(work_dir: Path, env: str, root: Path, extra: ExtraExport) -> None:
    source = work_dir / workdir.preference_pairs(env)
    name = preference_config(env)
    final = root / name
    shutil.rmtree(final, ignore_errors=True)
    shutil.rmtree(root / conversational_preference_config(env), ignore_errors=True)
    if not source.is_file():
        return
    extra.folders += [name, conversational_preference_config(env)]
    spool_folder = root / f".{name}.spool"
    shutil.rmtree(spool_folder, ignore_errors=True)
    try:
        pairs = ConfigSpools(spool_folder, name, PREFERENCE_FEATURES)
        chat = ConfigSpools(spool_folder, conversational_preference_config(env),
                            CONVERSATIONAL_PREFERENCE_FEATURES)
        for row in read_pairs(source, extra.notes):
            pairs.add("train", row)
            chat.add("train", {"prompt": user(row["prompt"]), "chosen": assistant(row["chosen"]),
                               "rejected": assistant(row["rejected"])})
        if not pairs.by_split:
            extra.notes.append(f"{source.name} holds no pair: no {name} config published")
            return
        export_pairs(root, env, pairs.by_split["train"], chat, extra)
    finally:
        shutil.rmtree(spool_folder, ignore_errors=True)


def export_pairs(root: Path, env: str, pairs: Spool, chat: ConfigSpools,
                 extra: ExtraExport) -> None:
    """The string pairs as one shard whatever their size (as they always were) and their
    conversational twin sharded like every config."""
    name = preference_config(env)
    final = root / name
    final.mkdir(parents=True)
    [shard] = write_shards(pairs, final, "train", max_shard_bytes=max(1, pairs.nbytes))
    config = CardConfig(
        env=name, features=PREFERENCE_FEATURES,
        splits=(split_info("train", pairs),),
        download_size=shard.stat().st_size,
    )
    section = "\n".join([
        f"## Config `{name}`",
        "",
        f"- Rows: {pairs.rows} step-level preference pairs (`prompt`, `chosen`, `rejected`, the "
        "columns TRL's DPO trainer reads), from anchor states: states reached by a won and a "
        "lost episode of the same task, at their earliest divergence.",
        "- `prompt` is the instruction the SFT config has for that state, with the same skill "
        "block; `chosen` is the winning episode's thought and action, `rejected` the losing "
        "episode's.",
    ])
    extra.paths.append(shard)
    extra.configs.append((config, section))
    written = write_config(root, conversational_preference_config(env),
                           CONVERSATIONAL_PREFERENCE_FEATURES, chat.in_order(["train"]),
                           max_shard_bytes=500 * 1024 * 1024)
    if written is not None:
        extra.paths += written.paths
        extra.side_configs.append(written.config)


def export_skill_document(work_dir: Path, env: str, root: Path, extra: ExtraExport) -> None:
    source = work_dir / skills_folder(env) / DOCUMENT_FILE
    target = root / skills_folder(env) / DOCUMENT_FILE
    target.unlink(missing_ok=True)
    if not source.is_file():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    extra.paths.append(target)


def export_skill_bank(env: str, root: Path, bank: CorpusBank | None, extra: ExtraExport) -> None:
    """The bank the corpus was made with, when its file still has the bytes distill read."""
    target = root / skills_folder(env) / workdir.SKILL_BANK
    target.unlink(missing_ok=True)
    if bank is None:
        return
    if not bank.current:
        extra.notes.append(
            f"{bank.path} is not the skill bank this corpus was made with any more (its sha256 "
            f"is no longer {bank.sha256}): {skills_folder(env)}/{workdir.SKILL_BANK} not "
            "uploaded; put the original back there, or run distill again")
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(bank.path, target)
    extra.paths.append(target)


def export_extras(work_dir: Path, env: str, root: Path,
                  bank: CorpusBank | None = None) -> ExtraExport:
    extra = ExtraExport()
    export_preferences(work_dir, env, root, extra)
    export_skill_document(work_dir, env, root, extra)
    export_skill_bank(env, root, bank, extra)
    if any(p.parent == root / skills_folder(env) for p in extra.paths):
        extra.folders.append(skills_folder(env))
    return extra
