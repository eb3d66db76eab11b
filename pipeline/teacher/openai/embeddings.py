"""Embeddings from an OpenAI-compatible `/v1/embeddings` endpoint, journaled like chat answers.

Every vector is written to the stage's journal (pipeline/teacher/journal.py, fsynced) before it
is used, keyed by sha256 over the model and the text; a re-run reads the journal and asks only
for texts it has never embedded, so an interrupted run resumes without paying twice. The key
never reaches the journal, a log or an error message.
"""

import hashlib
import logging
import time
from collections.abc import Sequence
from pathlib import Path

import orjson
from openai import OpenAI, OpenAIError

from skillsft.pipeline.errors import SkillsftError
from skillsft.pipeline.teacher.journal import Journal, JournalRecord
from skillsft.pipeline.teacher.openai.endpoints import redact_url, split_query
from skillsft.pipeline.teacher.settings import TeacherSettings

log = logging.getLogger("skillsft.teacher")

EMBEDDINGS_STAGE = "embeddings"
BATCH = 64  # texts per request


class EmbeddingError(SkillsftError):
    """The embeddings endpoint failed; what is journaled so far is kept for the re-run."""


def embedding_key(model: str, text: str) -> str:
    return hashlib.sha256(orjson.dumps(["embedding", model, text])).hexdigest()


class EmbeddingClient:
    """`embed(texts)` -> one vector per text, from the journal when known, else the endpoint."""

    def __init__(self, settings: TeacherSettings, model: str, journal_dir: Path) -> None:
        if settings.api_key is None:
            raise EmbeddingError(
                "--embedding-model needs an API key (OPENAI_API_KEY); without one, leave the "
                "flag out to use the lexical scorer")
        self.model = model
        self.endpoint = settings.first_endpoint()
        # What messages may name: the URL with its credentials redacted (endpoints.py).
        self.shown_endpoint = redact_url(self.endpoint)
        self.journal = Journal(Path(journal_dir) / f"{EMBEDDINGS_STAGE}.jsonl")
        # The openai client appends paths to the base URL as text: a query (`?api-key=...`)
        # travels as default_query, as the chat runtime sends it.
        base_url, query = split_query(self.endpoint)
        self.client = OpenAI(api_key=settings.api_key.get_secret_value(), base_url=base_url,
                             default_query=query or None, timeout=settings.timeout,
                             max_retries=settings.max_retries)
        self.calls_new = 0
        self.calls_from_journal = 0

    def _known(self, text: str) -> list[float] | None:
        record = self.journal.latest_response(embedding_key(self.model, text))
        return orjson.loads(record.raw_text) if record and record.raw_text else None

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        unique = list(dict.fromkeys(texts))
        missing = [t for t in unique if self._known(t) is None]
        self.calls_from_journal += len(unique) - len(missing)
        for start in range(0, len(missing), BATCH):
            batch = missing[start: start + BATCH]
            try:
                response = self.client.embeddings.create(model=self.model, input=batch)
            except OpenAIError as exc:
                raise EmbeddingError(
                    f"embeddings from {self.shown_endpoint} (model {self.model}) failed: "
                    f"{type(exc).__name__}; re-run to retry (vectors already received are "
                    "kept in the journal)") from None
            vectors = sorted(response.data, key=lambda item: item.index)
            if len(vectors) != len(batch):
                raise EmbeddingError(f"{self.shown_endpoint} returned {len(vectors)} vectors for "
                                     f"{len(batch)} texts (model {self.model})")
            for text, item in zip(batch, vectors, strict=True):
                self.journal.append(JournalRecord(
                    key=embedding_key(self.model, text), kind="response",
                    stage=EMBEDDINGS_STAGE, model=self.model, time=time.time(),
                    raw_text=orjson.dumps(item.embedding).decode()))
            self.calls_new += 1
        return [self._known(t) or [] for t in texts]
