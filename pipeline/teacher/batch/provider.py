"""The provider's Batch API, as few calls as the teacher needs, through the openai client.

Requests go up as one JSONL file (purpose `batch`), one line per request: `custom_id` is the
request's journal key, so a result maps back to its journal entry without any other table, and
`body` is the very bytes a live call of the request would send (chat_request.py).
Results come down as the batch's output file (answers) and error file (items that failed,
expired or were refused); an item in neither (a cancelled batch) is reported as `missing`.
"""

from dataclasses import dataclass
from typing import Any

import orjson
from openai import OpenAI

from skillsft.pipeline.teacher.settings import TeacherSettings

CHAT_ENDPOINT = "/v1/chat/completions"
COMPLETION_WINDOW = "24h"
SUBMISSION_METADATA = "skillsft_submission"
FINAL_STATES = ("completed", "failed", "expired", "cancelled")


@dataclass
class ItemOutcome:
    key: str
    completion: dict[str, Any] | None  # the chat completion body, when the item was answered
    error: str | None = None  # "<kind>: <detail>" otherwise


def item_line(key: str, body: bytes) -> bytes:
    """One line of the input file around a request body (`chat_request.body_bytes`), which is
    embedded as it is, byte for byte."""
    return orjson.dumps({"custom_id": key, "method": "POST", "url": CHAT_ENDPOINT,
                         "body": orjson.Fragment(body)})


class BatchProvider:
    def __init__(self, settings: TeacherSettings) -> None:
        assert settings.api_key is not None
        self.client = OpenAI(
            api_key=settings.api_key.get_secret_value(),
            base_url=settings.first_endpoint(),
            timeout=settings.timeout,
            max_retries=settings.max_retries,
        )

    def upload(self, lines: list[bytes]) -> str:
        data = b"".join(line + b"\n" for line in lines)
        return self.client.files.create(file=("requests.jsonl", data), purpose="batch").id

    def create(self, file_id: str, submission: str) -> Any:
        return self.client.batches.create(
            input_file_id=file_id, endpoint=CHAT_ENDPOINT, completion_window=COMPLETION_WINDOW,
            metadata={SUBMISSION_METADATA: submission},
        )

    def retrieve(self, batch_id: str) -> Any:
        return self.client.batches.retrieve(batch_id)

    def find(self, submission: str, file_id: str | None) -> Any | None:
        """The batch a crashed run created for this submission, if the provider has one."""
        for batch in self.client.batches.list(limit=100):
            metadata = batch.metadata or {}
            if metadata.get(SUBMISSION_METADATA) == submission or (
                file_id and batch.input_file_id == file_id
            ):
                return batch
        return None

    def outcomes(self, batch: Any, keys: list[str]) -> list[ItemOutcome]:
        """Every key of the batch with its answer or its reason for failing."""
        found: dict[str, ItemOutcome] = {}
        for file_id in (batch.output_file_id, batch.error_file_id):
            if not file_id:
                continue
            for line in self.client.files.content(file_id).content.splitlines():
                if line.strip():
                    outcome = parse_result_line(orjson.loads(line))
                    found[outcome.key] = outcome
        missing = f"missing: the batch ended {batch.status} without answering this request"
        return [found.get(key) or ItemOutcome(key, None, missing) for key in keys]


def parse_result_line(line: dict[str, Any]) -> ItemOutcome:
    key = str(line.get("custom_id"))
    response = line.get("response") or {}
    if response.get("status_code") == 200 and isinstance(response.get("body"), dict):
        return ItemOutcome(key, response["body"])
    error = line.get("error") or (response.get("body") or {}).get("error") or {}
    code = error.get("code") or (f"http_{response['status_code']}" if response else "error")
    if response.get("status_code", 0) >= 500:
        code = "server_error"
    kind = code if code.startswith("batch_") else f"batch_{code}"
    return ItemOutcome(key, None, f"{kind}: {error.get('message', 'no message')}")
