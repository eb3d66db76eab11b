"""Stage 5, the local half: the corpus as a `datasets` dataset, exported under `WORK_DIR/hub/`.

`export_local` writes exactly what a Hub repo for this environment holds:
`<env>/<split>-NNNNN-of-NNNNN.parquet` shards (the layout `datasets` reads as one config per
folder), the other configs (trainer_configs.py, extras.py) and the repo's `README.md` card.
`hub.publish` then uploads that folder's files for this environment in one commit.

The validation split is drawn by trajectory, not by record: all turns of one trajectory land
in the same split, so validation never sees a trajectory the training split taught. The draw
is a seeded shuffle of the sorted trajectory ids, so the same corpus and seed give the same
split on every machine. Without the provenance file nobody knows which record belongs to which
trajectory: then everything goes to `train`, and the export says so.
"""

import logging
import random
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from datasets import Dataset, Features, SplitInfo, Value

from skillsft.pipeline import workdir
from skillsft.pipeline.envs import ENVS, get_env
from skillsft.pipeline.errors import InputError, SkillsftError
from skillsft.pipeline.formats.record_files import CONVERSATIONS, load_records
from skillsft.pipeline.formats.token_lengths import DEFAULT_CUTOFF_LEN, TokenLengths, token_lengths
from skillsft.pipeline.stages.corpus_bank import corpus_bank
from skillsft.pipeline.stages.publish.card import (
    CardConfig,
    add_configs,
    generation_settings,
    merged_card,
    with_default_config,
    without_empty_stage_rows,
)
from skillsft.pipeline.stages.publish.card_usage import environment_lines, with_usage
from skillsft.pipeline.stages.publish.extras import export_extras, preference_config
from skillsft.pipeline.stages.publish.parquet import WrittenConfig, write_config, write_shards
from skillsft.pipeline.stages.publish.skill_free import (
    flatten_history,
    noskill_config,
    skill_free_records,
)
from skillsft.pipeline.stages.publish.trainer_configs import (
    ALPACA,
    CONVERSATIONAL_FEATURES,
    RANKING,
    SHAREGPT,
    TRAJECTORY_FEATURES,
    conversational_columns,
    conversational_config,
    llama_factory_entries,
    trajectories_config,
    trajectory_columns,
    write_dataset_info,
)
from skillsft.pipeline.stages.publish.trainer_files import (
    METADATA_FEATURES,
    METADATA_FOLDER,
    load_bank,
    metadata_columns,
    metadata_config_name,
)
from skillsft.pipeline.stages.report import (
    HUB_DIR,
    Provenance,
    build_report,
    load_corpus,
    load_provenance,
)

log = logging.getLogger("skillsft.publish")

FEATURES = Features({"instruction": Value("string"), "output": Value("string")})
CARD_FILE = "README.md"
TRAIN, VALIDATION = "train", "validation"


@dataclass(frozen=True)
class PublishOptions:
    validation_fraction: float = 0.0  # share of trajectories held out; 0 means train only
    seed: int = 42
    private: bool = False
    revision: str | None = None  # branch to commit to; created from main when missing
    dry_run: bool = False
    commit_message: str | None = None
    license: str | None = None  # None keeps the card's license (a new card says "other")
    pretty_name: str | None = None
    repo_id: str | None = None  # for the card's load_dataset lines (a placeholder without)
    citation: str | None = None  # BibTeX of the data's origin, shown in the card
    tokenizer: str | None = None  # the student's tokenizer for the token lengths
    skill_variants: str = ""  # "none": also <env>_noskill, the records without their block
    cutoff_len: int = DEFAULT_CUTOFF_LEN
    max_shard_bytes: int = 500 * 1024 * 1024
    max_retries: int = 5
    retry_wait_seconds: float = 2.0  # first back-off wait; doubles up to 30 s
    # An offline-teacher corpus is a smoke test; uploading one needs this explicit consent.
    allow_offline: bool = False


@dataclass
class LocalExport:
    root: Path  # WORK_DIR/hub: mirrors the repo layout
    paths: list[Path]  # files of this environment to upload: shards, then README.md
    rows: int
    splits: dict[str, int]  # split -> rows
    card_config: CardConfig
    notes: list[str] = field(default_factory=list)
    # Preference pairs and the skill document, when the run made them (extras.py)
    extra_configs: list[tuple[CardConfig, str]] = field(default_factory=list)
    extra_folders: list[str] = field(default_factory=list)
    # Configs listed in the card's YAML only (no section of their own): <env>_metadata,
    # <env>_conversational, <env>_trajectories
    side_configs: list[CardConfig] = field(default_factory=list)
    token_lengths: TokenLengths | None = None
    dataset_info: Path | None = None  # LLaMA-Factory's entries, local only

    def files(self) -> list[tuple[str, int]]:
        """(path in repo, size in bytes) of every file an upload would commit."""
        return [(p.relative_to(self.root).as_posix(), p.stat().st_size) for p in self.paths]


# -- split and export -------------------------------------------------------------------------


def split_by_trajectory(
    provenance: Sequence[Provenance], fraction: float, seed: int
) -> list[str]:
    """The split of each record (same order), holding out whole trajectories."""
    trajectories = sorted({line.trajectory_id for line in provenance})
    if fraction <= 0 or len(trajectories) < 2:
        return [TRAIN] * len(provenance)
    random.Random(seed).shuffle(trajectories)
    held_out_count = min(len(trajectories) - 1, max(1, round(fraction * len(trajectories))))
    held_out = set(trajectories[:held_out_count])
    return [VALIDATION if line.trajectory_id in held_out else TRAIN for line in provenance]


def record_splits(work_dir: Path, env: str, kept: list[int], options: PublishOptions,
                  notes: list[str]) -> list[str]:
    """Split names for the kept corpus records (by their index in the corpus file)."""
    if options.validation_fraction <= 0:
        return [TRAIN] * len(kept)
    provenance = load_provenance(work_dir, env)
    if not provenance.found:
        notes.append(f"no {env}_sft_provenance.jsonl: no validation split, all rows in train")
        return [TRAIN] * len(kept)
    if provenance.warnings or len(provenance.items) <= max(kept, default=-1):
        notes.append(
            f"{env}_sft_provenance.jsonl does not match the corpus line for line "
            f"({len(provenance.items)} readable lines): no validation split, all rows in train"
        )
        return [TRAIN] * len(kept)
    aligned = [provenance.items[i] for i in kept]
    return split_by_trajectory(aligned, options.validation_fraction, options.seed)


def export_local(
    work_dir: str | Path, env: str, options: PublishOptions | None = None
) -> LocalExport:
    """Write `WORK_DIR/hub/<env>/*.parquet`, the other configs of this environment and
    `WORK_DIR/hub/README.md` from the corpus.

    Raises `InputError` when there is no readable corpus. Unreadable records are skipped and
    listed in `notes` (and the report's checks then show rows published < records).
    """
    options = options or PublishOptions()
    work_dir = Path(work_dir)
    corpus = load_corpus(work_dir, env)
    if not corpus.found:
        raise InputError(corpus.warnings[0])
    notes = list(corpus.warnings)
    kept = corpus.kept
    splits = record_splits(work_dir, env, kept, options, notes)

    root = work_dir / HUB_DIR
    staging = root / f".{env}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    provenance = aligned_provenance(work_dir, env, kept, notes)
    bank = corpus_bank(work_dir)
    metadata = (metadata_columns(env, provenance, load_bank(bank.path if bank and bank.current
                                                            else None))
                if provenance is not None else None)
    split_infos: list[SplitInfo] = []
    metadata_infos: list[SplitInfo] = []
    conversational: dict[str, dict[str, list]] = {}
    for split in (TRAIN, VALIDATION):
        chosen = [i for i, s in enumerate(splits) if s == split]
        rows = [corpus.items[i] for i in chosen]
        if not rows and split != TRAIN:
            continue
        alpaca = {"instruction": [r.instruction for r in rows], "output": [r.output for r in rows]}
        dataset = Dataset.from_dict(alpaca, features=FEATURES)
        write_shards(dataset, staging, split, options.max_shard_bytes)
        split_infos.append(SplitInfo(name=split, num_bytes=dataset.data.nbytes,
                                     num_examples=len(dataset)))
        conversational[split] = conversational_columns(rows)
        if metadata is not None:
            columns = {name: [values[i] for i in chosen] for name, values in metadata.items()}
            with_meta = Dataset.from_dict({**alpaca, **columns}, features=METADATA_FEATURES)
            (staging / METADATA_FOLDER).mkdir(exist_ok=True)
            write_shards(with_meta, staging / METADATA_FOLDER, split, options.max_shard_bytes)
            metadata_infos.append(SplitInfo(name=split, num_bytes=with_meta.data.nbytes,
                                            num_examples=len(with_meta)))
    final = root / env
    shutil.rmtree(final, ignore_errors=True)
    staging.rename(final)
    shards = sorted(final.glob("*.parquet"))
    metadata_shards = sorted((final / METADATA_FOLDER).glob("*.parquet"))
    side_configs = [CardConfig(
        env=metadata_config_name(env), features=METADATA_FEATURES,
        splits=tuple(metadata_infos), folder=f"{env}/{METADATA_FOLDER}",
        download_size=sum(p.stat().st_size for p in metadata_shards),
    )] if metadata_infos else []
    written = [write_config(root, conversational_config(env), CONVERSATIONAL_FEATURES,
                            conversational, options.max_shard_bytes),
               export_trajectories(work_dir, env, root, provenance, splits, options, notes),
               export_noskill(work_dir, env, root, corpus.items, kept, splits, options, notes)]
    lengths = token_lengths(corpus.items, options.tokenizer, options.cutoff_len)

    config = CardConfig(
        env=env,
        features=FEATURES,
        splits=tuple(split_infos),
        download_size=sum(p.stat().st_size for p in shards),
    )
    extras = export_extras(work_dir, env, root, bank)
    notes += extras.notes
    side_configs += [w.config for w in written if w is not None] + extras.side_configs
    dataset_info = write_dataset_info(root, env, llama_factory_entries(
        options.repo_id or str(root.resolve()),
        dataset_info_layouts([config, *side_configs, *(c for c, _ in extras.configs)], env)))
    card_path = root / CARD_FILE
    existing = card_path.read_text(encoding="utf-8") if card_path.is_file() else None
    export = LocalExport(
        root=root,
        paths=[*shards, *metadata_shards, *(p for w in written if w for p in w.paths),
               *extras.paths, card_path],
        rows=sum(s.num_examples for s in split_infos),
        splits={s.name: s.num_examples for s in split_infos},
        card_config=config,
        notes=notes,
        extra_configs=extras.configs,
        extra_folders=[*(w.config.env for w in written if w), *extras.folders],
        side_configs=side_configs,
        token_lengths=lengths,
        dataset_info=dataset_info,
    )
    card_path.write_text(card_text(work_dir, env, export, existing, options), encoding="utf-8")
    for note in notes:
        log.warning(note)
    return export


def export_trajectories(work_dir: Path, env: str, root: Path,
                        provenance: list[Provenance] | None, splits: list[str],
                        options: PublishOptions, notes: list[str]) -> WrittenConfig | None:
    """The `<env>_trajectories` config: the distilled conversations whose records are in the
    corpus, each in its records' split (None, with a note, when that cannot be told)."""
    name = trajectories_config(env)
    source = work_dir / workdir.DISTILLED
    if provenance is None or not source.is_file():
        shutil.rmtree(root / name, ignore_errors=True)
        if provenance is not None:
            notes.append(f"no {workdir.DISTILLED}: no {name} config")
        return None
    try:
        loaded = load_records(source, CONVERSATIONS, "publish")
    except SkillsftError as exc:
        notes.append(f"{exc}: no {name} config")
        shutil.rmtree(root / name, ignore_errors=True)
        return None
    notes += [f"{r.detail}: conversation left out of {name}" for r in loaded.rejects]
    split_of = {line.trajectory_id: split for line, split in zip(provenance, splits, strict=True)}
    columns = trajectory_columns(loaded.records, split_of, list(dict.fromkeys(splits)))
    return write_config(root, name, TRAJECTORY_FEATURES, columns, options.max_shard_bytes)


def export_noskill(work_dir: Path, env: str, root: Path, records: list, kept: list[int],
                   splits: list[str], options: PublishOptions,
                   notes: list[str]) -> WrittenConfig | None:
    """`<env>_noskill` (with `--skill-variants none`): every corpus record again, flattened from
    its conversation as the layout renders it without the experience block, so it has the same
    output, order and split; None (with a note) when they do not line up with the corpus."""
    name = noskill_config(env)
    shutil.rmtree(root / name, ignore_errors=True)
    if options.skill_variants != "none":
        return None
    source = work_dir / workdir.DISTILLED
    try:
        variants = skill_free_records(source, get_env(env), flatten_history(work_dir, env))
    except (OSError, SkillsftError) as exc:
        notes.append(f"{exc}: no {name} config")
        return None
    if len(variants) != len(records) or any(
            variants[i].output != records[i].output for i in kept):
        notes.append(f"{source.name} no longer flattens to the corpus record for record: no "
                     f"{name} config (run flatten again)")
        return None
    columns = {split: {"instruction": [], "output": []} for split in dict.fromkeys(splits)}
    for index, split in zip(kept, splits, strict=True):
        columns[split]["instruction"].append(variants[index].instruction)
        columns[split]["output"].append(variants[index].output)
    return write_config(root, name, FEATURES, columns, options.max_shard_bytes)


def dataset_info_layouts(configs: list[CardConfig], env: str
                         ) -> dict[str, tuple[dict, list[str]]]:
    """The LLaMA-Factory layout and splits of each config it can read, by config name."""
    layouts = {env: ALPACA, metadata_config_name(env): ALPACA, noskill_config(env): ALPACA,
               trajectories_config(env): SHAREGPT, preference_config(env): RANKING}
    return {c.env: (layouts[c.env], [s.name for s in c.splits]) for c in configs
            if c.env in layouts}


def aligned_provenance(work_dir: Path, env: str, kept: list[int],
                       notes: list[str]) -> list[Provenance] | None:
    """The provenance line of each kept corpus record, or None (with a note) when the file is
    missing or does not match the corpus line for line."""
    provenance = load_provenance(work_dir, env)
    if not provenance.found:
        notes.append(f"no {env}_sft_provenance.jsonl: no {metadata_config_name(env)} config")
        return None
    if provenance.warnings or len(provenance.items) <= max(kept, default=-1):
        notes.append(f"{env}_sft_provenance.jsonl does not match the corpus line for line: no "
                     f"{metadata_config_name(env)} config")
        return None
    return [provenance.items[i] for i in kept]


def card_text(work_dir: Path, env: str, export: LocalExport, existing: str | None,
              options: PublishOptions) -> str:
    report = build_report(work_dir, env, options.cutoff_len)
    settings = "\n".join([generation_settings(without_empty_stage_rows(report)),
                          *environment_lines(report, export.token_lengths)])
    card = merged_card(existing, export.card_config, settings, license=options.license,
                       pretty_name=options.pretty_name)
    for extra_config, section in export.extra_configs:  # preference pairs, skill document
        card = merged_card(card, extra_config, section, license=options.license,
                           pretty_name=options.pretty_name)
    card = with_default_config(add_configs(card, export.side_configs), set(ENVS))
    return with_usage(card, options.repo_id, options.citation, options.cutoff_len)
