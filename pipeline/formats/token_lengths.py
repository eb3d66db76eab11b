"""Token counts, in one place: how long the corpus is in the student's tokens, how much of it a
cutoff would cut, and the characters-per-token estimate that budgets teacher prompts.

Every figure measured against `--cutoff-len` (the report's, the card's) comes from
`token_lengths`, and every count of a text from `counter_for`: the student's tokenizer when one
is given, else the word-piece estimate. Budgets (a distillation window, a memory prompt, a cost
estimate) use `estimate_tokens`, characters / 4, which over-counts on purpose.

Trainers truncate every example at a cutoff (LLaMA-Factory's `cutoff_len`, TRL's
`max_length`) counted in the student model's tokens, prompt and response together. With
`--tokenizer PATH_OR_NAME` the lengths are counted with that tokenizer: a `tokenizer.json`
file or a folder holding one (loaded with `tokenizers`), else a name or folder that
`transformers` finds locally. Nothing is downloaded. Without a tokenizer the lengths are the
report's regex word-piece estimate, and say so: BPE tokenizers count somewhat more.
"""

import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from skillsft.pipeline.errors import ConfigError
from skillsft.pipeline.formats.distribution import distribution
from skillsft.schemas.conversation import AlpacaRecord
from skillsft.schemas.report import Distribution

TokenCounter = Callable[[Sequence[str]], list[int]]

# The training cutoff every length is measured against unless `--cutoff-len` says otherwise.
DEFAULT_CUTOFF_LEN = 8192
# Budgets (teacher windows, cost estimates) count characters / 4: conservative on purpose.
CHARS_PER_TOKEN = 4

# How tokens are approximated, stated once so the report and its readers agree on it.
TOKEN_PIECE = re.compile(r"\w+|[^\w\s]")
TOKEN_APPROXIMATION = (
    "regex word pieces: each run of letters/digits/underscores and each other non-space "
    "character counts as one token (no tokenizer dependency; BPE tokenizers split rare and "
    "long words further, so real counts are somewhat higher)"
)


def _ascii_classes() -> bytes:
    """Each ASCII byte's class under TOKEN_PIECE, asked of the regex itself so the two cannot
    disagree: w (a word character), space (whitespace, \\x1c-\\x1f included), p (any other)."""
    word, space = re.compile(r"\w"), re.compile(r"\s")
    return bytes(ord("w") if word.fullmatch(chr(i)) else ord(" ") if space.fullmatch(chr(i))
                 else ord("p") for i in range(128)) + b"p" * 128


_ASCII_CLASSES = _ascii_classes()


def approx_tokens(text: str) -> int:
    """How many TOKEN_PIECE pieces `text` holds. The report counts every record twice, so an
    ASCII text (nearly all of them) is counted without building the pieces: its bytes are
    mapped to their classes and the pieces are the p bytes plus the runs of w bytes (each run
    starts at the text's start or after a space or a p). Other text goes through the regex."""
    if not text.isascii():
        return len(TOKEN_PIECE.findall(text))
    classes = text.encode().translate(_ASCII_CLASSES)
    return (classes.count(b"p") + classes.count(b"pw") + classes.count(b" w")
            + classes.startswith(b"w"))


def estimate_tokens(text: str) -> int:
    """The budget estimate: characters / 4, rounded up."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)




class TokenLengths(BaseModel):
    method: str  # the tokenizer, or the estimate's description
    exact: bool  # counted with the student's tokenizer
    cutoff: int
    instruction: Distribution = Field(default_factory=Distribution)
    output: Distribution = Field(default_factory=Distribution)
    over_cutoff: int = 0  # records whose instruction + output exceed the cutoff

    def card_lines(self) -> list[str]:
        label = f"tokenizer `{self.method}`" if self.exact else (
            f"estimated, not a tokenizer: {self.method}")
        lines = [f"Token lengths ({label}):", "",
                 "| column | p50 | p90 | p99 | max |", "|---|---|---|---|---|"]
        for name, d in (("instruction", self.instruction), ("output", self.output)):
            lines.append(f"| {name} | {d.p50:.0f} | {d.p90:.0f} | {d.p99:.0f} | {d.max:.0f} |")
        lines += ["", f"Records longer than a cutoff of {self.cutoff} tokens (instruction + "
                  f"output): {self.over_cutoff}."]
        return lines


def load_counter(name_or_path: str) -> TokenCounter:
    """A batch token counter for a local tokenizer; a ConfigError says what to install."""
    path = Path(name_or_path)
    file = path / "tokenizer.json" if path.is_dir() else path
    if file.is_file():
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise ConfigError(f"--tokenizer {name_or_path}: reading tokenizer.json needs the "
                              "`tokenizers` package: pip install 'skillsft[tokenizer]'") from None
        tokenizer = Tokenizer.from_file(str(file))
        return lambda texts: [len(e.ids) for e in tokenizer.encode_batch(
            list(texts), add_special_tokens=False)]
    try:
        from transformers import AutoTokenizer  # type: ignore[import-not-found]
    except ImportError:
        raise ConfigError(f"--tokenizer {name_or_path}: no tokenizer.json there, and loading "
                          "a tokenizer by name needs `transformers`; pass a tokenizer.json file "
                          "or the model folder holding one") from None
    try:
        loaded = AutoTokenizer.from_pretrained(name_or_path, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - transformers raises many kinds; one line for all
        raise ConfigError(f"--tokenizer {name_or_path}: not found locally ({exc}); download "
                          "the model's tokenizer first, or pass its tokenizer.json") from None
    return lambda texts: [len(ids) for ids in loaded(list(texts), add_special_tokens=False)[
        "input_ids"]]


def counter_for(tokenizer: str | None) -> TokenCounter:
    """How texts are counted: in `tokenizer`'s tokens (a path or local name) when one is given,
    else with the word-piece estimate (`approx_tokens`)."""
    if tokenizer:
        return load_counter(tokenizer)
    return lambda texts: [approx_tokens(text) for text in texts]


class TokenLengthTally:
    """`token_lengths` a record at a time, for a corpus read as a stream: the texts wait in
    chunks of `CHUNK` (a tokenizer counts a batch faster than one text at a time) and only
    the two counts per record stay, for the percentiles."""

    CHUNK = 1000

    def __init__(self, tokenizer: str | None = None, cutoff: int = DEFAULT_CUTOFF_LEN) -> None:
        self.count = counter_for(tokenizer)
        self.tokenizer = tokenizer
        self.cutoff = cutoff
        self.instruction: list[int] = []
        self.output: list[int] = []
        self._pending: list[AlpacaRecord] = []

    def add(self, record: AlpacaRecord) -> None:
        self._pending.append(record)
        if len(self._pending) >= self.CHUNK:
            self._flush()

    def _flush(self) -> None:
        self.instruction += self.count([r.instruction for r in self._pending])
        self.output += self.count([r.output for r in self._pending])
        self._pending = []

    def result(self) -> TokenLengths:
        self._flush()
        tokenizer = self.tokenizer
        method, exact = (display_name(tokenizer), True) if tokenizer else (
            TOKEN_APPROXIMATION, False)
        return TokenLengths(
            method=method, exact=exact, cutoff=self.cutoff,
            instruction=distribution(self.instruction), output=distribution(self.output),
            over_cutoff=sum(1 for i, o in zip(self.instruction, self.output, strict=True)
                            if i + o > self.cutoff),
        )


def token_lengths(records: Sequence[AlpacaRecord], tokenizer: str | None = None,
                  cutoff: int = DEFAULT_CUTOFF_LEN) -> TokenLengths:
    """The corpus's lengths and how many records (instruction + output) exceed `cutoff`: the
    one figure the report and the card give against `--cutoff-len`."""
    tally = TokenLengthTally(tokenizer, cutoff)
    for record in records:
        tally.add(record)
    return tally.result()


def display_name(name_or_path: str) -> str:
    """What the card calls the tokenizer: a model name, never a local path."""
    path = Path(name_or_path)
    if path.exists():
        return (path.parent if path.is_file() else path).resolve().name
    return name_or_path
