"""The export's two passes over the corpus, each a stream (export.py runs them).

1. `survey_corpus`: how many records, whether the provenance file lines up with the corpus
   record for record (the metadata config, the trajectories config and the validation split
   need it to), which trajectories the records come from (the split draws from them) and the
   token lengths, all before anything is written.
2. `read_corpus_configs`: each record's rows, in its split, to the spools (parquet.py) of the
   configs fed from the corpus: alpaca, metadata, conversational and, with `--skill-variants
   none`, the skill-free records rendered again beside it (`SkillFreeStream`).

Provenance lines are matched to records by position as the two files are read side by side
(`with_provenance`), so neither is held.
"""

import random
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from datasets import Features, Value

from skillsft.pipeline import workdir
from skillsft.pipeline.envs import get_env
from skillsft.pipeline.errors import InputError, SkillsftError
from skillsft.pipeline.formats.token_lengths import TokenLengths, TokenLengthTally
from skillsft.pipeline.stages.publish.parquet import ConfigSpools
from skillsft.pipeline.stages.publish.skill_free import (
    flatten_history,
    noskill_config,
    skill_free_records,
)
from skillsft.pipeline.stages.publish.trainer_configs import (
    CONVERSATIONAL_FEATURES,
    conversational_config,
    conversational_row,
)
from skillsft.pipeline.stages.publish.trainer_files import (
    METADATA_FEATURES,
    MetadataRows,
    metadata_config_name,
)
from skillsft.pipeline.stages.report.readers import (
    HUB_DIR,
    Provenance,
    Read,
    corpus_records,
    jsonl_records,
    provenance_file,
)
from skillsft.schemas.conversation import AlpacaRecord
from skillsft.schemas.skill_bank import SkillBank

FEATURES = Features({"instruction": Value("string"), "output": Value("string")})
TRAIN, VALIDATION = "train", "validation"


def held_out_trajectories(trajectory_ids: set[str], fraction: float, seed: int) -> set[str]:
    """The trajectories the validation split gets: a seeded shuffle of the sorted ids, so the
    same corpus and seed hold out the same ones on every machine (none below two)."""
    trajectories = sorted(trajectory_ids)
    if fraction <= 0 or len(trajectories) < 2:
        return set()
    random.Random(seed).shuffle(trajectories)
    held_out_count = min(len(trajectories) - 1, max(1, round(fraction * len(trajectories))))
    return set(trajectories[:held_out_count])


RecordWithLine = tuple[int, AlpacaRecord, Provenance | None]


def with_provenance(records: Iterator[tuple[int, AlpacaRecord]],
                    lines: Iterator[Provenance] | None) -> Iterator[RecordWithLine]:
    """(position, record, provenance line) of each corpus record: the line is the readable
    provenance line at the record's position in the corpus file (None past the last, or
    without `lines`). The lines after the last record are read too, so a `Read` that tallies
    them is complete when this ends."""
    position = -1
    line: Provenance | None = None
    for index, record in records:
        while lines is not None and position < index:
            line = next(lines, None)
            position += 1
            if line is None:
                lines = None
        yield index, record, line if lines is not None else None
    for _ in lines or ():
        pass


@dataclass
class CorpusSurvey:
    """What one streamed pass over the corpus and its provenance tells before anything is
    written: whether the provenance lines up with the records, which trajectories they come
    from, and their token lengths."""

    last_position: int  # -1 without records
    warnings: list[str]
    provenance: Read
    trajectories: set[str]
    lengths: TokenLengths

    @property
    def aligned(self) -> bool:
        """The provenance file holds a readable line for every corpus record, and no other."""
        return (self.provenance.found and not self.provenance.warnings
                and self.provenance.count > self.last_position)


def survey_corpus(work_dir: Path, env: str, tokenizer: str | None,
                  cutoff_len: int) -> CorpusSurvey:
    """The first pass; `InputError` when there is no readable corpus."""
    lengths = TokenLengthTally(tokenizer, cutoff_len)
    read, provenance = Read(), Read()
    last_position, trajectories = -1, set()
    lines = jsonl_records(work_dir / provenance_file(env), Provenance, provenance)
    for position, record, line in with_provenance(corpus_records(work_dir, env, read), lines):
        last_position = position
        lengths.add(record)
        if line is not None:
            trajectories.add(line.trajectory_id)
    if not read.found:
        raise InputError(read.warnings[0])
    return CorpusSurvey(last_position, read.warnings, provenance, trajectories,
                        lengths.result())


def held_out_of(survey: CorpusSurvey, env: str, fraction: float, seed: int,
                notes: list[str]) -> set[str]:
    """The held-out trajectories (none, with a note, when the provenance cannot tell)."""
    if fraction <= 0:
        return set()
    if not survey.provenance.found:
        notes.append(f"no {env}_sft_provenance.jsonl: no validation split, all rows in train")
        return set()
    if not survey.aligned:
        notes.append(
            f"{env}_sft_provenance.jsonl does not match the corpus line for line "
            f"({survey.provenance.count} readable lines): no validation split, all rows in train"
        )
        return set()
    return held_out_trajectories(survey.trajectories, fraction, seed)


def metadata_wanted(survey: CorpusSurvey, env: str, notes: list[str]) -> bool:
    """Whether `<env>_metadata` (and `<env>_trajectories`) can be told (a note when not)."""
    if not survey.provenance.found:
        notes.append(f"no {env}_sft_provenance.jsonl: no {metadata_config_name(env)} config")
    elif not survey.aligned:
        notes.append(f"{env}_sft_provenance.jsonl does not match the corpus line for line: no "
                     f"{metadata_config_name(env)} config")
    return survey.aligned


class SkillFreeStream:
    """`<env>_noskill`'s rows beside the corpus pass: the skill-free record of each corpus
    record in turn, checked against it (same output). The first mismatch or unreadable
    conversation drops the config with a note; `finish` catches a stream longer than the
    corpus."""

    def __init__(self, work_dir: Path, env: str, spools: ConfigSpools) -> None:
        self.name = noskill_config(env)
        self.source = work_dir / workdir.DISTILLED
        self.spools: ConfigSpools | None = spools
        self.variants = skill_free_records(self.source, get_env(env),
                                           flatten_history(work_dir, env))
        self.note: str | None = None

    def _next(self) -> AlpacaRecord | None:
        try:
            return next(self.variants, None)
        except (OSError, SkillsftError) as exc:
            self._drop(f"{exc}: no {self.name} config")
            return None

    def _drop(self, note: str) -> None:
        if self.spools is not None:
            self.spools.remove()
            self.spools = None
            self.note = note

    def _mismatch(self) -> None:
        self._drop(f"{self.source.name} no longer flattens to the corpus record for record: no "
                   f"{self.name} config (run flatten again)")

    def add(self, split: str, record: AlpacaRecord) -> None:
        if self.spools is None:
            return
        variant = self._next()
        if self.spools is None:
            return
        if variant is None or variant.output != record.output:
            self._mismatch()
            return
        self.spools.add(split, {"instruction": variant.instruction, "output": variant.output})

    def finish(self) -> ConfigSpools | None:
        if self.spools is not None and self._next() is not None:
            self._mismatch()
        return self.spools


@dataclass
class CorpusConfigs:
    """The spools the corpus pass filled: one per config fed from corpus records."""

    alpaca: ConfigSpools
    metadata: ConfigSpools | None
    conversational: ConfigSpools
    skill_free: ConfigSpools | None
    skill_free_note: str | None
    split_order: list[str]  # the splits in the order records first went to them
    split_of: dict[str, str]  # trajectory id -> split (with the metadata config only)


def read_corpus_configs(work_dir: Path, env: str, folder: Path, held_out: set[str],
                        with_metadata: bool, bank: SkillBank | None,
                        skill_free_too: bool) -> CorpusConfigs:
    """The second pass over the corpus: each record's rows go to the spools of its split."""
    alpaca = ConfigSpools(folder, env, FEATURES)
    alpaca.spool(TRAIN)  # the alpaca config always has a train split, even an empty one
    metadata = ConfigSpools(folder, metadata_config_name(env), METADATA_FEATURES) \
        if with_metadata else None
    if metadata is not None:
        metadata.spool(TRAIN)
    conversational = ConfigSpools(folder, conversational_config(env), CONVERSATIONAL_FEATURES)
    shutil.rmtree(work_dir / HUB_DIR / noskill_config(env), ignore_errors=True)
    skill_free = SkillFreeStream(work_dir, env, ConfigSpools(folder, noskill_config(env),
                                                             FEATURES)) \
        if skill_free_too else None
    metadata_rows = MetadataRows(env, bank)
    split_order: dict[str, None] = {}
    split_of: dict[str, str] = {}
    lines = (jsonl_records(work_dir / provenance_file(env), Provenance, Read())
             if with_metadata else None)
    for _, record, line in with_provenance(corpus_records(work_dir, env, Read()), lines):
        split = VALIDATION if line is not None and line.trajectory_id in held_out else TRAIN
        split_order.setdefault(split)
        alpaca.add(split, {"instruction": record.instruction, "output": record.output})
        conversational.add(split, conversational_row(record))
        if metadata is not None and line is not None:
            metadata.add(split, metadata_rows.row(record, line))
            split_of[line.trajectory_id] = split
        if skill_free is not None:
            skill_free.add(split, record)
    return CorpusConfigs(
        alpaca=alpaca, metadata=metadata, conversational=conversational,
        skill_free=skill_free.finish() if skill_free else None,
        skill_free_note=skill_free.note if skill_free else None,
        split_order=list(split_order), split_of=split_of)
