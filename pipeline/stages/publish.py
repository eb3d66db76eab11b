"""Stage 5: the corpus as a `datasets` dataset, exported locally and published to the Hub.

`export_local` writes exactly what a Hub repo for this environment holds, under
`WORK_DIR/hub/`: `<env>/<split>-NNNNN-of-NNNNN.parquet` shards (the layout `datasets` reads as
one config per folder) and the repo's `README.md` card. `publish` then uploads that folder's
files for this environment in one commit, after merging the card with the one already on the
Hub, so publishing webshop into a repo that holds alfworld keeps alfworld. Shards of this
environment that the new export no longer has are deleted in the same commit.

The validation split is drawn by trajectory, not by record: all turns of one trajectory land
in the same split, so validation never sees a trajectory the training split taught. The draw
is a seeded shuffle of the sorted trajectory ids, so the same corpus and seed give the same
split on every machine. Without the provenance file nobody knows which record belongs to which
trajectory: then everything goes to `train`, and the export says so.

The token is huggingface_hub's business (`HF_TOKEN`, else the login cache): we never read it
except to scrub it out of any error message we pass on, and never print or write it.
"""

import logging
import math
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

import httpx2  # huggingface_hub's HTTP client: its transport errors are worth a retry
from datasets import Dataset, Features, SplitInfo, Value
from huggingface_hub import (
    CommitOperationAdd,
    CommitOperationDelete,
    HfApi,
    RepoFile,
    get_token,
    hf_hub_url,
)
from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, RevisionNotFoundError
from huggingface_hub.utils import build_hf_headers, hf_raise_for_status, http_backoff

from skillsft.pipeline.errors import InputError, SkillsftError
from skillsft.pipeline.formats.card_usage import environment_lines, with_usage
from skillsft.pipeline.formats.dataset_card import (
    CardConfig,
    add_configs,
    generation_settings,
    merged_card,
    without_empty_stage_rows,
)
from skillsft.pipeline.formats.publish_extras import export_extras
from skillsft.pipeline.formats.token_lengths import DEFAULT_CUTOFF_LEN, TokenLengths, token_lengths
from skillsft.pipeline.formats.trainer_files import (
    METADATA_FEATURES,
    METADATA_FOLDER,
    load_bank,
    metadata_columns,
    metadata_config_name,
    write_dataset_info,
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
# Hub answers worth another try: timeouts, rate limits, server errors.
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})

T = TypeVar("T")


class PublishError(SkillsftError):
    """Publishing failed; the message never contains the Hub token."""


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
    # Preference pairs and the skill document, when the run made them (pipeline/publish_extras)
    extra_configs: list[tuple[CardConfig, str]] = field(default_factory=list)
    extra_folders: list[str] = field(default_factory=list)
    metadata_configs: list[CardConfig] = field(default_factory=list)  # <env>_metadata
    token_lengths: TokenLengths | None = None
    dataset_info: Path | None = None  # LLaMA-Factory's entry, local only

    def files(self) -> list[tuple[str, int]]:
        """(path in repo, size in bytes) of every file an upload would commit."""
        return [(p.relative_to(self.root).as_posix(), p.stat().st_size) for p in self.paths]


@dataclass
class PublishResult:
    repo_id: str
    revision: str
    dry_run: bool
    files: list[tuple[str, int]]  # (path in repo, bytes) committed, or that would be
    deleted: list[str]  # stale files of this environment removed from the repo
    rows: int
    splits: dict[str, int]
    commit_url: str | None = None
    notes: list[str] = field(default_factory=list)

    def summary_lines(self) -> list[str]:
        """What the CLI prints: one line per file (with its size), then the outcome."""
        verb = "would upload" if self.dry_run else "uploaded"
        lines = [f"{verb} to {self.repo_id}@{self.revision}:"]
        lines += [f"  {path}  {size} bytes" for path, size in self.files]
        lines += [f"  delete {path}" for path in self.deleted]
        if self.commit_url:
            lines.append(f"commit: {self.commit_url}")
        lines += [f"note: {note}" for note in self.notes]
        return lines


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


def write_shards(dataset: Dataset, folder: Path, split: str, max_shard_bytes: int) -> list[Path]:
    num_shards = max(1, math.ceil(dataset.data.nbytes / max_shard_bytes))
    paths = []
    for index in range(num_shards):
        path = folder / f"{split}-{index:05d}-of-{num_shards:05d}.parquet"
        dataset.shard(num_shards, index, contiguous=True).to_parquet(str(path))
        paths.append(path)
    return paths


def export_local(
    work_dir: str | Path, env: str, options: PublishOptions | None = None
) -> LocalExport:
    """Write `WORK_DIR/hub/<env>/*.parquet` and `WORK_DIR/hub/README.md` from the corpus.

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
    metadata = (metadata_columns(env, provenance, load_bank(work_dir))
                if provenance is not None else None)
    split_infos: list[SplitInfo] = []
    metadata_infos: list[SplitInfo] = []
    shard_names: dict[str, list[str]] = {}
    for split in (TRAIN, VALIDATION):
        chosen = [i for i, s in enumerate(splits) if s == split]
        rows = [corpus.items[i] for i in chosen]
        if not rows and split != TRAIN:
            continue
        alpaca = {"instruction": [r.instruction for r in rows], "output": [r.output for r in rows]}
        dataset = Dataset.from_dict(alpaca, features=FEATURES)
        written = write_shards(dataset, staging, split, options.max_shard_bytes)
        shard_names[split] = [f"{env}/{p.name}" for p in written]
        split_infos.append(SplitInfo(name=split, num_bytes=dataset.data.nbytes,
                                     num_examples=len(dataset)))
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
    metadata_configs = [CardConfig(
        env=metadata_config_name(env), features=METADATA_FEATURES,
        splits=tuple(metadata_infos), folder=f"{env}/{METADATA_FOLDER}",
        download_size=sum(p.stat().st_size for p in metadata_shards),
    )] if metadata_infos else []
    lengths = token_lengths(corpus.items, options.tokenizer, options.cutoff_len)
    dataset_info = write_dataset_info(root, env, shard_names)

    config = CardConfig(
        env=env,
        features=FEATURES,
        splits=tuple(split_infos),
        download_size=sum(p.stat().st_size for p in shards),
    )
    extras = export_extras(work_dir, env, root)
    notes += extras.notes
    card_path = root / CARD_FILE
    existing = card_path.read_text(encoding="utf-8") if card_path.is_file() else None
    export = LocalExport(
        root=root,
        paths=[*shards, *metadata_shards, *extras.paths, card_path],
        rows=sum(s.num_examples for s in split_infos),
        splits={s.name: s.num_examples for s in split_infos},
        card_config=config,
        notes=notes,
        extra_configs=extras.configs,
        extra_folders=extras.folders,
        metadata_configs=metadata_configs,
        token_lengths=lengths,
        dataset_info=dataset_info,
    )
    card_path.write_text(card_text(work_dir, env, export, existing, options), encoding="utf-8")
    for note in notes:
        log.warning(note)
    return export


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
    return with_usage(add_configs(card, export.metadata_configs), options.repo_id,
                      options.citation, options.cutoff_len)


# -- the Hub ----------------------------------------------------------------------------------


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, HfHubHTTPError) and exc.response is not None:
        return exc.response.status_code in TRANSIENT_STATUS
    return isinstance(exc, httpx2.TransportError)


def with_retries(what: str, call: Callable[[], T], options: PublishOptions) -> T:
    """Run one Hub operation, retrying transient failures with exponential back-off.

    huggingface_hub retries some of its requests itself (`http_backoff`) but not repo
    creation or the commit; every operation here is safe to repeat (create is exist_ok, a
    repeated commit of identical files is a no-op on the Hub).
    """
    wait = options.retry_wait_seconds
    for attempt in range(options.max_retries + 1):
        try:
            return call()
        except Exception as exc:
            if not is_transient(exc) or attempt == options.max_retries:
                raise
            log.warning("Hub %s failed (%s); retry %d/%d in %.1f s", what,
                        type(exc).__name__, attempt + 1, options.max_retries, wait)
            time.sleep(wait)
            wait = min(30.0, wait * 2)
    raise AssertionError("unreachable")


def fetch_card(api: HfApi, repo_id: str, revision: str, options: PublishOptions) -> str | None:
    """The repo's README.md at `revision`, or None when it has none yet."""
    url = hf_hub_url(repo_id, CARD_FILE, repo_type="dataset", revision=revision,
                     endpoint=api.endpoint)
    response = http_backoff("GET", url, headers=build_hf_headers(token=api.token),
                            max_retries=options.max_retries,
                            base_wait_time=options.retry_wait_seconds)
    if response.status_code == 404:
        return None
    hf_raise_for_status(response)
    return response.text


def remote_files(api: HfApi, repo_id: str, env: str, revision: str) -> list[str]:
    """Files under `<env>/` in the repo (empty when the folder does not exist yet)."""
    try:
        entries = api.list_repo_tree(repo_id, path_in_repo=env, recursive=True,
                                     repo_type="dataset", revision=revision)
        return sorted(e.path for e in entries if isinstance(e, RepoFile))
    except (EntryNotFoundError, RevisionNotFoundError):
        return []


def commit_operations(export: LocalExport, card: bytes, stale: Sequence[str]) -> list:
    """Fresh operations for one commit attempt (huggingface_hub marks used ones as spent)."""
    operations: list = [
        CommitOperationAdd(path_in_repo=p.relative_to(export.root).as_posix(),
                           path_or_fileobj=str(p))
        for p in export.paths if p.name != CARD_FILE
    ]
    operations.append(CommitOperationAdd(path_in_repo=CARD_FILE, path_or_fileobj=card))
    operations += [CommitOperationDelete(path_in_repo=path) for path in stale]
    return operations


def scrub(text: str, secret: str | None) -> str:
    return text.replace(secret, "***") if secret else text


def publish(
    work_dir: str | Path,
    env: str,
    repo_id: str,
    options: PublishOptions | None = None,
    api: HfApi | None = None,
) -> PublishResult:
    """Export locally, then (unless dry run) commit this environment's files to a dataset repo.

    `api` is injectable so tests (and users with a private Hub endpoint) can pass their own
    `HfApi`. Errors are re-raised as `PublishError` with the token scrubbed out.
    """
    options = options or PublishOptions()
    revision = options.revision or "main"
    options = replace(options, repo_id=options.repo_id or repo_id)
    export = export_local(work_dir, env, options)
    if options.dry_run:
        return PublishResult(
            repo_id=repo_id, revision=revision, dry_run=True, files=export.files(), deleted=[],
            rows=export.rows, splits=export.splits,
            notes=[*export.notes,
                   "dry run: nothing was sent; the card was not merged with the Hub's"],
        )
    if not options.allow_offline and build_report(work_dir, env).details.smoke_test:
        raise PublishError(
            f"{work_dir}: this {env} corpus was written by the offline teacher (a smoke-test "
            "corpus, not training data); re-run with --teacher openai, or pass --allow-offline "
            "to publish it anyway")
    api = api or HfApi(library_name="skillsft")
    token = api.token or get_token()
    if not token:
        raise PublishError(
            "no Hugging Face token: set HF_TOKEN or run `hf auth login`, then publish again"
        )
    try:
        return upload(api, export, env, repo_id, revision, options)
    except Exception as exc:
        message = scrub(f"publishing {env} to {repo_id}@{revision} failed: {exc}", token)
        raise PublishError(message) from None  # the chained original could carry the token


def upload(api: HfApi, export: LocalExport, env: str, repo_id: str, revision: str,
           options: PublishOptions) -> PublishResult:
    with_retries("create_repo", lambda: api.create_repo(
        repo_id, repo_type="dataset", private=options.private, exist_ok=True), options)
    if revision != "main":
        with_retries("create_branch", lambda: api.create_branch(
            repo_id, branch=revision, repo_type="dataset", exist_ok=True), options)
    existing = fetch_card(api, repo_id, revision, options)
    card = card_text(export.root.parent, env, export, existing, options)
    (export.root / CARD_FILE).write_text(card, encoding="utf-8")  # the local mirror = the commit
    local = {p.relative_to(export.root).as_posix() for p in export.paths}
    stale = [path for folder in (env, *export.extra_folders) for path in with_retries(
        "list files", lambda f=folder: remote_files(api, repo_id, f, revision), options)
        if path not in local]
    message = options.commit_message or f"skillsft: publish {env} ({export.rows} rows)"
    info = with_retries("commit", lambda: api.create_commit(
        repo_id, commit_operations(export, card.encode(), stale), commit_message=message,
        repo_type="dataset", revision=revision), options)
    log.info("published %s to %s@%s: %s", env, repo_id, revision, info.commit_url)
    return PublishResult(
        repo_id=repo_id, revision=revision, dry_run=False, files=export.files(), deleted=stale,
        rows=export.rows, splits=export.splits, commit_url=info.commit_url, notes=export.notes,
    )
