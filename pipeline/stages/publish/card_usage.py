"""The parts of the dataset card a trainer's user reads first: how to load and train on it.

One usage section for the whole repo (every config the card's YAML lists), between its own
markers so re-publishing rewrites it and leaves hand-written text alone: the real
`load_dataset` line for each config, TRL's `SFTTrainer`/`DPOTrainer` on the conversational
configs and LLaMA-Factory's dataset_info entries, and the citation when `--citation` gave
one. Per environment, its section gains the token lengths and how many records each check
dropped.
"""

import orjson
from huggingface_hub import DatasetCard

from skillsft.pipeline.envs import ENVS
from skillsft.pipeline.formats.token_lengths import DEFAULT_CUTOFF_LEN, TokenLengths
from skillsft.pipeline.stages.publish.card import DEFAULT_CONFIG, replace_section
from skillsft.pipeline.stages.publish.extras import (
    conversational_preference_config,
    preference_config,
)
from skillsft.pipeline.stages.publish.trainer_configs import (
    ALPACA,
    RANKING,
    SHAREGPT,
    conversational_config,
    llama_factory_entries,
    trajectories_config,
)
from skillsft.schemas.report import RunReport

USAGE_SECTION = "usage"
PLACEHOLDER_REPO = "<user>/<dataset>"


def config_names(card: DatasetCard) -> list[str]:
    return [c["config_name"] for c in card.data.get("configs") or [] if "config_name" in c]


def usage_section(repo_id: str | None, configs: list[str], citation: str | None,
                  cutoff_len: int = DEFAULT_CUTOFF_LEN) -> str:
    """The Usage section: how to load every config, and TRL's and LLaMA-Factory's recipes for
    the first environment. bench/trainers.py runs these snippets as they stand (repo id and
    student swapped for a local mirror and a tiny model), so they are kept runnable."""
    repo = repo_id or PLACEHOLDER_REPO
    alpaca = [c for c in configs if c in ENVS]  # the environments' alpaca configs
    first = alpaca[0] if alpaca else (configs[0] if configs else "alfworld")
    lines = ["## Usage", ""]
    if not repo_id:
        lines += [f"Replace `{PLACEHOLDER_REPO}` with the repo id this folder is uploaded to.", ""]
    lines += ["```python", "from datasets import load_dataset", ""]
    lines += [f'{_var(c)} = load_dataset("{repo}"' + ("" if c == DEFAULT_CONFIG else f', "{c}"')
              + ")" for c in configs]
    lines += ["```", ""]
    lines += [
        "Configs: `default` is every environment's alpaca rows together; per environment, "
        "`<env>` is alpaca (`instruction`, `output`), `<env>_conversational` the same records "
        "as chat messages (`prompt` = one user message, `completion` = one assistant message), "
        "`<env>_trajectories` each distilled trajectory as one multi-turn `messages` list "
        "(system, user, assistant), `<env>_preferences` the step-level pairs as strings "
        "(`prompt`, `chosen`, `rejected`) and `<env>_preferences_conversational` as messages.",
        ""]
    if any(c.endswith("_noskill") for c in configs):
        lines += ["`<env>_noskill` has the same records without their retrieved-experience "
                  "block: same outputs, same order and splits, row for row with `<env>` and "
                  "`<env>_metadata` (whose `skill_ids` say what was left out). For a "
                  "with/without curriculum (skills in context first, then withdrawn so the "
                  "policy internalizes them, as SKILL0 does), train on `<env>` (or its "
                  "conversational form) first, then continue on `<env>_noskill`.", ""]
    if any(c.endswith("_metadata") for c in configs):
        lines += ["`<env>_metadata` has the alpaca rows plus `environment`, `category`, "
                  "`trajectory_id`, `step` and `skill_ids`: the skills and mistakes shown in "
                  "that record's prompt, as ids of `skills/<env>-skills/skill_bank.json`.", ""]
    lines += trl_lines(repo, first, configs, cutoff_len)
    lines += llama_factory_lines(repo, first, configs)
    if citation:
        lines += ["", "## Citation", "", "```bibtex", citation.strip(), "```"]
    return "\n".join(lines)


def trl_lines(repo: str, env: str, configs: list[str], cutoff_len: int) -> list[str]:
    """TRL's SFT (and DPO, when the pairs are published) on the conversational configs: the
    trainer applies the student's chat template and trains on the completion only."""
    sft = conversational_config(env)
    lines = ["TRL (conversational configs, so the student's chat template is applied):", "",
             "```python",
             "from datasets import load_dataset",
             "from trl import SFTConfig, SFTTrainer",
             "",
             'student = "<student model>"  # a Hub id or a local folder',
             f'train = load_dataset("{repo}", "{sft}", split="train")',
             "trainer = SFTTrainer(model=student, train_dataset=train,",
             f"                     args=SFTConfig(max_length={cutoff_len}))",
             "trainer.train()",
             "```"]
    pairs = conversational_preference_config(env)
    if pairs in configs:
        lines += ["", "```python",
                  "from datasets import load_dataset",
                  "from trl import DPOConfig, DPOTrainer",
                  "",
                  'student = "<student model>"  # best: the SFT checkpoint',
                  f'pairs = load_dataset("{repo}", "{pairs}", split="train")',
                  "trainer = DPOTrainer(model=student, train_dataset=pairs,",
                  f"                     args=DPOConfig(max_length={cutoff_len}))",
                  "trainer.train()",
                  "```"]
    return [*lines, ""]


def llama_factory_lines(repo: str, env: str, configs: list[str]) -> list[str]:
    """LLaMA-Factory's `data/dataset_info.json` entries, one per config it reads."""
    wanted = {env: ALPACA, trajectories_config(env): SHAREGPT, preference_config(env): RANKING}
    entries = llama_factory_entries(repo, {c: (layout, ["train"]) for c, layout in wanted.items()
                                           if c in configs})
    body = orjson.dumps(entries, option=orjson.OPT_INDENT_2).decode()
    return ["LLaMA-Factory (`data/dataset_info.json`; the local export writes one too, for "
            "every config and split):", "", "```json", body, "```"]


def _var(config: str) -> str:
    return "ds_" + config.replace("-", "_")


def with_usage(card_text: str, repo_id: str | None, citation: str | None,
               cutoff_len: int = DEFAULT_CUTOFF_LEN) -> str:
    card = DatasetCard(card_text)
    card.text = replace_section(card.text, USAGE_SECTION,
                                usage_section(repo_id, config_names(card), citation, cutoff_len))
    return str(card)


def environment_lines(report: RunReport, lengths: TokenLengths | None) -> list[str]:
    """Extra lines of an environment's section: token lengths and records dropped per check."""
    lines: list[str] = []
    if lengths is not None:
        lines += ["", *lengths.card_lines()]
    dropped = {key.removeprefix("dropped_"): value for stage in report.stages
               if stage.stage == "flatten"  # the stage whose checks drop records
               for key, value in stage.counts.items() if key.startswith("dropped_") and value}
    if dropped:
        shown = ", ".join(f"{name} {count}" for name, count in sorted(dropped.items()))
        lines += ["", f"Records dropped by each check: {shown}."]
    return lines
