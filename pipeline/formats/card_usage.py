"""The parts of the dataset card a trainer's user reads first: how to load and train on it.

One usage section for the whole repo (every config the card's YAML lists), between its own
markers so re-publishing rewrites it and leaves hand-written text alone: the real
`load_dataset` line for each config, TRL's `SFTTrainer` and LLaMA-Factory in a few lines each,
and the citation when `--citation` gave one. Per environment, its section gains the token
lengths and how many records each check dropped.
"""

from huggingface_hub import DatasetCard

from skillsft.pipeline.envs import ENVS
from skillsft.pipeline.formats.dataset_card import replace_section
from skillsft.pipeline.formats.token_lengths import DEFAULT_CUTOFF_LEN, TokenLengths
from skillsft.schemas.report import RunReport

USAGE_SECTION = "usage"
PLACEHOLDER_REPO = "<user>/<dataset>"


def config_names(card: DatasetCard) -> list[str]:
    return [c["config_name"] for c in card.data.get("configs") or [] if "config_name" in c]


def usage_section(repo_id: str | None, configs: list[str], citation: str | None,
                  cutoff_len: int = DEFAULT_CUTOFF_LEN) -> str:
    repo = repo_id or PLACEHOLDER_REPO
    alpaca = [c for c in configs if c in ENVS]  # the environments' alpaca configs
    first = alpaca[0] if alpaca else (configs[0] if configs else "alfworld")
    lines = ["## Usage", ""]
    if not repo_id:
        lines += [f"Replace `{PLACEHOLDER_REPO}` with the repo id this folder is uploaded to.", ""]
    lines += ["```python", "from datasets import load_dataset", ""]
    lines += [f'{_var(c)} = load_dataset("{repo}", "{c}")' for c in configs]
    lines += ["```", ""]
    if any(c.endswith("_metadata") for c in configs):
        lines += ["Each environment has an alpaca config (`instruction`, `output`); an "
                  "`<env>_metadata` config, where present, has the same rows plus "
                  "`environment`, `category`, `trajectory_id`, `step` and `skill_ids` (the "
                  "skills and mistakes shown in the prompt).", ""]
    lines += [
              "TRL (`SFTTrainer` takes prompt/completion columns):", "",
              "```python",
              "from trl import SFTConfig, SFTTrainer",
              "",
              f'train = load_dataset("{repo}", "{first}", split="train").rename_columns(',
              '    {"instruction": "prompt", "output": "completion"})',
              'trainer = SFTTrainer(model="<student model>", train_dataset=train,',
              f'                     args=SFTConfig(max_length={cutoff_len}))',
              "```", "",
              "LLaMA-Factory (`data/dataset_info.json`; the local export also writes one):", "",
              "```json",
              f'"skillsft_{first}": {{"hf_hub_url": "{repo}", "subset": "{first}", '
              '"formatting": "alpaca", "columns": {"prompt": "instruction", '
              '"response": "output"}}',
              "```"]
    if citation:
        lines += ["", "## Citation", "", "```bibtex", citation.strip(), "```"]
    return "\n".join(lines)


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
