"""Stage 5, the local half: the corpus as a `datasets` dataset, exported under `WORK_DIR/hub/`.

`export_local` writes exactly what a Hub repo for this environment holds:
`<env>/<split>-NNNNN-of-NNNNN.parquet` shards (the layout `datasets` reads as one config per
folder), the other configs (trainer_configs.py, extras.py) and the repo's `README.md` card.
`hub.publish` then uploads that folder's files for this environment in one commit.

Nothing here holds the corpus: it is read as a stream, twice (corpus_pass.py: a survey, then
the pass that sends each record's rows to the spools of the configs it feeds, parquet.py), and
the other sources (conversations, pairs) once, so an export holds a bounded number of records.

The validation split is drawn by trajectory, not by record: all turns of one trajectory land
in the same split, so validation never sees a trajectory the training split taught. The draw
is a seeded shuffle of the sorted trajectory ids, so the same corpus and seed give the same
split on every machine. Without the provenance file nobody knows which record belongs to which
trajectory: then everything goes to `train`, and the export says so.
"""

import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from datasets import SplitInfo

from skillsft.pipeline import workdir
from skillsft.pipeline.envs import ENVS
from skillsft.pipeline.errors import SkillsftError
from skillsft.pipeline.formats.record_files import CONVERSATIONS, LoadedRecords, iter_records
from skillsft.pipeline.formats.token_lengths import (
    DEFAULT_CUTOFF_LEN,
    TokenLengths,
)
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
from skillsft.pipeline.stages.publish.corpus_pass import (
    FEATURES,
    TRAIN,
    VALIDATION,
    CorpusConfigs,
    held_out_of,
    metadata_wanted,
    read_corpus_configs,
    survey_corpus,
)
from skillsft.pipeline.stages.publish.extras import export_extras, preference_config
from skillsft.pipeline.stages.publish.parquet import (
    ConfigSpools,
    WrittenConfig,
    split_info,
    write_config,
    write_shards,
)
from skillsft.pipeline.stages.publish.skill_free import (
    noskill_config,
)
from skillsft.pipeline.stages.publish.trainer_configs import (
    ALPACA,
    CONVERSATIONAL_FEATURES,
    RANKING,
    SHAREGPT,
    TRAJECTORY_FEATURES,
    conversational_config,
    llama_factory_entries,
    trajectories_config,
    trajectory_rows,
    write_dataset_info,
)
from skillsft.pipeline.stages.publish.trainer_files import (
    METADATA_FEATURES,
    METADATA_FOLDER,
    load_bank,
    metadata_config_name,
)
from skillsft.pipeline.stages.report import HUB_DIR, build_report
from skillsft.schemas.conversation import Conversation

log = logging.getLogger("skillsft.publish")

CARD_FILE = "README.md"


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


def export_local(
    work_dir: str | Path, env: str, options: PublishOptions | None = None
) -> LocalExport:
    """Write `WORK_DIR/hub/<env>/*.parquet`, the other configs of this environment and
    `WORK_DIR/hub/README.md` from the corpus.

    The corpus is read as a stream, twice: a survey (record count, whether the provenance
    lines up, the trajectories for the split, the token lengths), then the pass that feeds
    every config's rows to its spool (parquet.py), so the export holds a bounded number of
    records whatever the corpus's size.

    Raises `InputError` when there is no readable corpus. Unreadable records are skipped and
    listed in `notes` (and the report's checks then show rows published < records).
    """
    options = options or PublishOptions()
    work_dir = Path(work_dir)
    survey = survey_corpus(work_dir, env, options.tokenizer, options.cutoff_len)
    notes = list(survey.warnings)
    held_out = held_out_of(survey, env, options.validation_fraction, options.seed, notes)
    with_metadata = metadata_wanted(survey, env, notes)

    root = work_dir / HUB_DIR
    staging = root / f".{env}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    spool_folder = root / f".{env}.spool"
    shutil.rmtree(spool_folder, ignore_errors=True)
    try:
        bank = corpus_bank(work_dir)
        corpus = read_corpus_configs(work_dir, env, spool_folder, held_out, with_metadata,
                                     load_bank(bank.path if bank and bank.current else None),
                                     options.skill_variants == "none")
        split_infos = write_split_shards(corpus.alpaca, staging, options)
        metadata_infos: list[SplitInfo] = []
        if corpus.metadata is not None:
            (staging / METADATA_FOLDER).mkdir(exist_ok=True)
            metadata_infos = write_split_shards(corpus.metadata, staging / METADATA_FOLDER,
                                                options)
        final = root / env
        shutil.rmtree(final, ignore_errors=True)
        staging.rename(final)
        written = [write_config(root, conversational_config(env), CONVERSATIONAL_FEATURES,
                                corpus.conversational.in_order([TRAIN, VALIDATION]),
                                options.max_shard_bytes),
                   export_trajectories(work_dir, env, root, spool_folder, corpus, options,
                                       notes),
                   export_noskill(env, root, corpus, options, notes)]
    finally:
        shutil.rmtree(spool_folder, ignore_errors=True)
    shards = sorted(final.glob("*.parquet"))
    metadata_shards = sorted((final / METADATA_FOLDER).glob("*.parquet"))
    side_configs = [CardConfig(
        env=metadata_config_name(env), features=METADATA_FEATURES,
        splits=tuple(metadata_infos), folder=f"{env}/{METADATA_FOLDER}",
        download_size=sum(p.stat().st_size for p in metadata_shards),
    )] if metadata_infos else []

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
        token_lengths=survey.lengths,
        dataset_info=dataset_info,
    )
    card_path.write_text(card_text(work_dir, env, export, existing, options), encoding="utf-8")
    for note in notes:
        log.warning(note)
    return export


def write_split_shards(spools: ConfigSpools, folder: Path,
                       options: PublishOptions) -> list[SplitInfo]:
    """The shards of train (always) and validation (when it has rows) into `folder`."""
    infos = []
    for split, spool in spools.in_order([TRAIN, VALIDATION]).items():
        if split != TRAIN and not spool.rows:
            continue
        write_shards(spool, folder, split, options.max_shard_bytes)
        infos.append(split_info(split, spool))
    return infos


def export_trajectories(work_dir: Path, env: str, root: Path, folder: Path,
                        corpus: CorpusConfigs, options: PublishOptions,
                        notes: list[str]) -> WrittenConfig | None:
    """The `<env>_trajectories` config: the distilled conversations whose records are in the
    corpus, each in its records' split (None, with a note, when that cannot be told)."""
    name = trajectories_config(env)
    source = work_dir / workdir.DISTILLED
    if corpus.metadata is None or not source.is_file():
        shutil.rmtree(root / name, ignore_errors=True)
        if corpus.metadata is not None:
            notes.append(f"no {workdir.DISTILLED}: no {name} config")
        return None
    spools = ConfigSpools(folder, name, TRAJECTORY_FEATURES)
    loaded: LoadedRecords[Conversation] = LoadedRecords([])
    try:
        conversations = iter_records(source, CONVERSATIONS, "publish", loaded)
        for split, row in trajectory_rows(conversations, corpus.split_of):
            spools.add(split, row)
    except SkillsftError as exc:
        notes.append(f"{exc}: no {name} config")
        spools.remove()
        shutil.rmtree(root / name, ignore_errors=True)
        return None
    notes += [f"{r.detail}: conversation left out of {name}" for r in loaded.rejects]
    return write_config(root, name, TRAJECTORY_FEATURES, spools.in_order(corpus.split_order),
                        options.max_shard_bytes)


def export_noskill(env: str, root: Path, corpus: CorpusConfigs, options: PublishOptions,
                   notes: list[str]) -> WrittenConfig | None:
    """`<env>_noskill` (with `--skill-variants none`): every corpus record again, flattened from
    its conversation as the layout renders it without the experience block, so it has the same
    output, order and split; None (with a note) when they do not line up with the corpus."""
    if corpus.skill_free_note:
        notes.append(corpus.skill_free_note)
    if corpus.skill_free is None:
        return None
    return write_config(root, noskill_config(env), FEATURES,
                        corpus.skill_free.in_order(corpus.split_order), options.max_shard_bytes)


def dataset_info_layouts(configs: list[CardConfig], env: str
                         ) -> dict[str, tuple[dict, list[str]]]:
    """The LLaMA-Factory layout and splits of each config it can read, by config name."""
    layouts = {env: ALPACA, metadata_config_name(env): ALPACA, noskill_config(env): ALPACA,
               trajectories_config(env): SHAREGPT, preference_config(env): RANKING}
    return {c.env: (layouts[c.env], [s.name for s in c.splits]) for c in configs
            if c.env in layouts}


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
