"""The configs a trainer reads as they are, beside the alpaca one: chat messages, not strings.

Instruct students are trained through their chat template, which a trainer applies only to
conversational data. So the same records are also published as:

- `<env>_conversational`: TRL's conversational prompt-completion form, `prompt` = one user
  message (the instruction), `completion` = one assistant message (the output). TRL's
  `SFTTrainer` reads it without a mapping and trains on the completion only.
- `<env>_trajectories`: each distilled trajectory as one multi-turn conversation, `messages` =
  the system prompt, then the user/assistant turns as distilled (`distilled_trajectories.json`,
  ShareGPT roles renamed system/user/assistant, the names TRL's conversational language-modeling
  form and LLaMA-Factory's sharegpt format with OpenAI tags read). Only trajectories that made
  corpus records are published, in the split their records went to.

The preference pairs' conversational twin is written with the string pairs (extras.py).
`dataset_info.json` (LLaMA-Factory's registry) gets one entry per config it can read: alpaca
for the SFT and metadata configs, `ranking` for the pairs, `sharegpt` for the trajectories.
"""

from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
from datasets import Features, List, Value

from skillsft.schemas.conversation import AlpacaRecord, Conversation

MESSAGE = {"role": Value("string"), "content": Value("string")}
CONVERSATIONAL_FEATURES = Features({"prompt": List(MESSAGE), "completion": List(MESSAGE)})
TRAJECTORY_FEATURES = Features({"trajectory_id": Value("string"), "messages": List(MESSAGE)})
ROLE_OF = {"human": "user", "gpt": "assistant"}  # ShareGPT `from` -> chat role
DATASET_INFO_FILE = "dataset_info.json"
# LLaMA-Factory's sharegpt format, told that the messages use OpenAI's role/content keys.
OPENAI_TAGS = {"role_tag": "role", "content_tag": "content", "user_tag": "user",
               "assistant_tag": "assistant", "system_tag": "system"}


def conversational_config(env: str) -> str:
    return f"{env}_conversational"


def trajectories_config(env: str) -> str:
    return f"{env}_trajectories"


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def assistant(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def conversational_row(record: AlpacaRecord) -> dict[str, Any]:
    return {"prompt": user(record.instruction), "completion": assistant(record.output)}


def trajectory_id_of(conversation: Conversation, number: int) -> str:
    """The id flatten gave this conversation's records (stages/flatten.py)."""
    info = conversation.extra_info
    return info.trajectory_id or info.env_id or f"conversation-{number}"


def messages_of(conversation: Conversation) -> list[dict[str, str]]:
    return [{"role": "system", "content": conversation.system},
            *({"role": ROLE_OF[turn.from_], "content": turn.value}
              for turn in conversation.conversations)]


def trajectory_rows(conversations: Iterable[Conversation], split_of: Mapping[str, str]
                    ) -> Iterator[tuple[str, dict[str, Any]]]:
    """(split, row) of each conversation in turn; one whose trajectory made no corpus record
    is left out."""
    for number, conversation in enumerate(conversations):
        trajectory = trajectory_id_of(conversation, number)
        split = split_of.get(trajectory)
        if split is not None:
            yield split, {"trajectory_id": trajectory, "messages": messages_of(conversation)}


# -- LLaMA-Factory ----------------------------------------------------------------------------

ALPACA = {"formatting": "alpaca", "columns": {"prompt": "instruction", "response": "output"}}
RANKING = {"formatting": "alpaca", "ranking": True,
           "columns": {"prompt": "prompt", "chosen": "chosen", "rejected": "rejected"}}
SHAREGPT = {"formatting": "sharegpt", "columns": {"messages": "messages"}, "tags": OPENAI_TAGS}


def llama_factory_entry(source: str, config: str, split: str, layout: Mapping[str, Any]
                        ) -> dict[str, Any]:
    """One dataset_info.json entry: a whole config split, loaded by `datasets` from `source`
    (a Hub repo id, or the export folder itself) by config name, never one entry per shard."""
    return {"hf_hub_url": source, "subset": config, "split": split, **layout}


def llama_factory_entries(source: str, configs: Mapping[str, tuple[Mapping[str, Any],
                                                                    Sequence[str]]]
                          ) -> dict[str, dict[str, Any]]:
    """`skillsft_<config>` for train, `skillsft_<config>_<split>` for other splits."""
    entries = {}
    for config, (layout, splits) in configs.items():
        for split in splits:
            name = f"skillsft_{config}" + ("" if split == "train" else f"_{split}")
            entries[name] = llama_factory_entry(source, config, split, layout)
    return entries


def write_dataset_info(root: Path, env: str, entries: Mapping[str, Any]) -> Path:
    """Merge this environment's entries into `root/dataset_info.json`; other environments'
    entries are kept, this one's old ones (any config of `env`) replaced."""
    path = Path(root) / DATASET_INFO_FILE
    try:
        existing = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        existing = {}
    if not isinstance(existing, dict):
        existing = {}
    kept = {name: entry for name, entry in existing.items()
            if not (name == f"skillsft_{env}" or name.startswith(f"skillsft_{env}_"))}
    kept.update(entries)
    path.write_bytes(orjson.dumps(kept, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    return path
