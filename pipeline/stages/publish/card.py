"""The dataset card (README.md) of a published corpus: Hub metadata plus how the data was made.

One Hub repo can hold several environments, one config each (`alfworld`, `webshop`,
`search`), published by separate runs. So the card is never written from scratch: it is the
card already there (on the Hub, or in the local export folder) with this environment's parts
replaced. The YAML merge is done by `datasets`' own helpers (`MetadataConfigs`,
`DatasetInfosDict`), the same ones `push_to_hub` uses; the markdown body keeps one section per
environment between marker comments, so re-publishing one environment rewrites only its
section and leaves the others, and anything a person wrote outside the markers, alone.

Secrets never reach the card: endpoints are reduced to scheme, host and path, and parameters
whose names look like credentials are left out.
"""

import re
from dataclasses import dataclass
from importlib import metadata
from urllib.parse import urlsplit, urlunsplit

from datasets import DatasetInfo, Features, SplitDict, SplitInfo
from datasets.info import DatasetInfosDict
from datasets.utils.metadata import MetadataConfigs
from huggingface_hub import DatasetCard

from skillsft.pipeline.teacher.openai.endpoints import split_urls
from skillsft.schemas.report import SMOKE_TEST_NOTE, RunReport

TASK_CATEGORIES = ("text-generation",)
TAGS = ("agent", "sft", "skills", "skillsft")
DEFAULT_LICENSE = "other"
# The thoughts are written by a teacher model: machine-generated annotations of rollouts that
# the publisher's own agents produced (no Hub dataset they extend: `original`).
ANNOTATIONS_CREATORS = ("machine-generated",)
SOURCE_DATASETS = ("original",)
# The Hub asks a card whose license is `other` to name it and link its text; ours is the card's
# License section until the publisher says otherwise (--license-name, --license-link).
OTHER_LICENSE_NAME = "skillsft-mixed-sources"
OTHER_LICENSE_LINK = "README.md"
DEFAULT_CONFIG = "default"
LICENSE_SECTION = "license"
LICENSE_TEXT = (
    "## License\n\n"
    "The card says `license: other` because nobody chose one yet: each record mixes the "
    "environment's data (observations, tasks, actions of the rollouts) with text a teacher "
    "model wrote (thoughts, skills), so its terms are those of the environment's data and of "
    "the teacher provider. The publisher sets the license with `skillsft publish --license ID`."
)

# (upper bound, label) in the Hub's size_categories vocabulary.
SIZE_CATEGORIES = (
    (1_000, "n<1K"),
    (10_000, "1K<n<10K"),
    (100_000, "10K<n<100K"),
    (1_000_000, "100K<n<1M"),
    (10_000_000, "1M<n<10M"),
    (100_000_000, "10M<n<100M"),
    (1_000_000_000, "100M<n<1B"),
)
SECRET_NAME = re.compile(r"key|token|secret|password|authorization", re.IGNORECASE)
TEACHER_PARAMS = ("teacher", "base_url", "memory_model", "aggregate_model", "distill_model")


@dataclass(frozen=True)
class CardConfig:
    """What the card says about one environment's config: its files and its shape."""

    env: str
    features: Features
    splits: tuple[SplitInfo, ...]
    download_size: int  # bytes of parquet uploaded for this config
    folder: str | None = None  # where its shards are in the repo, when not `<env>/`

    def data_files(self) -> list[dict[str, str]]:
        folder = self.folder or self.env
        return [{"split": s.name, "path": f"{folder}/{s.name}-*"} for s in self.splits]

    def dataset_info(self) -> DatasetInfo:
        splits = SplitDict()
        for split in self.splits:
            splits.add(split)
        dataset_size = sum(s.num_bytes for s in self.splits)
        return DatasetInfo(
            config_name=self.env,
            features=self.features,
            splits=splits,
            download_size=self.download_size,
            dataset_size=dataset_size,
        )


def size_category(rows: int) -> str:
    for bound, label in SIZE_CATEGORIES:
        if rows < bound:
            return label
    return "n>1T"


def public_endpoint(url: str) -> str:
    """The URL without user info, query or fragment (where credentials sometimes hide)."""
    if not url:
        return ""
    if len(urls := split_urls(url)) > 1:  # several servers of the same model
        return ",".join(public_endpoint(one) for one in urls)
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def section_markers(env: str) -> tuple[str, str]:
    return f"<!-- skillsft:{env}:start -->", f"<!-- skillsft:{env}:end -->"


def generation_settings(report: RunReport) -> str:
    """The markdown of one environment's section: how its corpus was produced."""
    d = report.details
    stats = d.corpus_stats
    try:
        version = metadata.version("skillsft")
    except metadata.PackageNotFoundError:
        version = "unknown"
    splits = ", ".join(f"`{s}` {n}" for s, n in sorted(d.published_rows.items())) or "none"
    lines = [
        f"## Config `{report.env}`",
        "",
        *([f"> **{SMOKE_TEST_NOTE}**", ""] if d.smoke_test else []),
        f"- Rows: {stats.records} ({splits}); trajectories: "
        f"{'unknown' if stats.trajectories is None else stats.trajectories}.",
        f"- Generated: {d.generated_at} with skillsft {version}.",
        f"- Skill bank sha256: `{d.skill_bank_sha256 or 'none (no skill_bank.json)'}`.",
    ]
    teachers = teacher_lines(report)
    if teachers:
        lines += ["", "Teacher per stage:", "", *teachers]
    versions = sorted({(k, v) for det in d.stage_details for k, v in det.versions.items()})
    if versions:
        lines += ["", "Prompt and code versions: " + ", ".join(f"`{k}={v}`" for k, v in versions)
                  + "."]
    if d.models:
        lines += ["", "| model | stages | calls | prompt tokens | completion tokens | cost (USD) |",
                  "|---|---|---|---|---|---|"]
        for m in d.models:
            cost = "unknown" if m.cost_usd is None else f"{m.cost_usd:.4f}"
            lines.append(f"| {m.model} | {', '.join(m.stages)} | {m.calls_new} new, "
                         f"{m.calls_from_journal} from journal, {m.calls_failed} failed | "
                         f"{m.prompt_tokens} | {m.completion_tokens} | {cost} |")
    if report.stages:
        lines += ["", "| stage | in | out | rejected |", "|---|---|---|---|"]
        lines += [f"| {s.stage} | {s.inputs} | {s.outputs} | {s.rejected} |"
                  for s in report.stages]
    if stats.records_per_category:
        shown = ", ".join(f"{c} {n}" for c, n in stats.records_per_category.items())
        lines += ["", f"Records per category: {shown}."]
    if d.skill_use is not None:
        u = d.skill_use
        if u.selection:
            lines += ["", f"Skills per record: {u.selection}."]
        lines += ["", f"Skill use: {u.share_naming_a_shown_skill:.1%} of thoughts name a shown "
                  f"skill; the experience block is {u.block_share_mean:.1%} of an instruction on "
                  f"average; {u.records_over_cutoff} record(s) exceed {u.cutoff_len} tokens."]
    return "\n".join(lines)


def teacher_lines(report: RunReport) -> list[str]:
    """One bullet per stage that used a teacher: kind, model(s) and endpoint, never a secret."""
    models_by_stage: dict[str, set[str]] = {}
    for usage in report.teacher:
        models_by_stage.setdefault(usage.stage, set()).add(usage.model or "offline")
    lines = []
    for detail in report.details.stage_details:
        params = {k: v for k, v in detail.params.items()
                  if k in TEACHER_PARAMS and not SECRET_NAME.search(k)}
        models = models_by_stage.get(detail.stage)
        if not models and "teacher" not in params:
            continue
        kind = params.get("teacher", "unknown")
        endpoint = public_endpoint(params.get("base_url", "")) or "provider default"
        where = "no endpoint (offline teacher)" if kind == "offline" else f"endpoint {endpoint}"
        shown = ", ".join(sorted(models)) if models else "no calls"
        lines.append(f"- {detail.stage}: {kind} teacher, model {shown}, {where}")
    return lines


def replace_section(body: str, env: str, section: str) -> str:
    """The body with this environment's marked section replaced, or appended when new."""
    start, end = section_markers(env)
    block = f"{start}\n{section}\n{end}"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(body):
        return pattern.sub(lambda _: block, body, count=1)
    return body.rstrip("\n") + "\n\n" + block + "\n"


def default_body(pretty_name: str) -> str:
    return (
        f"# {pretty_name}\n\n"
        "Skill-augmented supervised fine-tuning data for LLM agents, built by skillsft from "
        "agent rollouts: each record is an alpaca pair (`instruction`, `output`) whose "
        "instruction carries the retrieved skills and whose output is the reasoning and the "
        "action taken. One config per environment (and its `_metadata` config); how to load "
        "them is under Usage.\n"
    )


def merged_card(
    existing: str | None,
    config: CardConfig,
    settings: str,
    *,
    license: str | None = None,
    pretty_name: str | None = None,
) -> str:
    """The card `existing` (None: a new card) with `config`'s metadata and section updated.

    Other configs' YAML entries and body sections are kept as they are. `license` replaces the
    card's license when given; otherwise an existing license is kept and a new card says
    `other` (the corpus mixes environment data and teacher outputs: the publisher decides).
    """
    card = DatasetCard(existing) if existing else DatasetCard("---\n\n---\n")
    data = card.data
    if license or not data.get("license"):
        data.license = license or DEFAULT_LICENSE
    if data.license == DEFAULT_LICENSE:
        data.license_name = data.get("license_name") or OTHER_LICENSE_NAME
        data.license_link = data.get("license_link") or OTHER_LICENSE_LINK
    else:  # a named license: the Hub reads no license_name/license_link for it
        data.pop("license_name", None)
        data.pop("license_link", None)
    data.annotations_creators = sorted({*(data.get("annotations_creators") or []),
                                        *ANNOTATIONS_CREATORS})
    data.source_datasets = sorted({*(data.get("source_datasets") or []), *SOURCE_DATASETS})
    data.task_categories = sorted({*(data.get("task_categories") or []), *TASK_CATEGORIES})
    data.tags = sorted({*(data.get("tags") or []), *TAGS, config.env})
    data.language = data.get("language") or ["en"]
    if pretty_name:
        data.pretty_name = pretty_name
    DatasetInfosDict({config.env: config.dataset_info()}).to_dataset_card_data(data)
    MetadataConfigs({config.env: {"data_files": config.data_files()}}).to_dataset_card_data(data)
    infos = DatasetInfosDict.from_dataset_card_data(data)
    total_rows = sum(split.num_examples for info in infos.values() for split in
                     (info.splits or {}).values())
    data.size_categories = [size_category(total_rows)]
    body = card.text if existing and card.text.strip() else default_body(
        pretty_name or data.get("pretty_name") or "skillsft agent SFT corpus"
    )
    card.text = with_license_section(replace_section(body, config.env, settings),
                                     data.license == DEFAULT_LICENSE)
    return str(card)


def with_license_section(body: str, needed: bool) -> str:
    """The body with the License section the `other` license links to (or without it, once a
    license is named)."""
    start, end = section_markers(LICENSE_SECTION)
    if needed:
        return replace_section(body, LICENSE_SECTION, LICENSE_TEXT)
    pattern = re.compile(r"\n*" + re.escape(start) + r".*?" + re.escape(end) + r"\n?", re.DOTALL)
    return pattern.sub("\n", body)


def add_configs(card_text: str, configs: "list[CardConfig]") -> str:
    """The card with more configs in its YAML header (e.g. an environment's metadata config),
    merged like the main one; the body is left as it is."""
    card = DatasetCard(card_text)
    for config in configs:
        DatasetInfosDict({config.env: config.dataset_info()}).to_dataset_card_data(card.data)
        MetadataConfigs({config.env: {"data_files": config.data_files()}}).to_dataset_card_data(
            card.data)
    return str(card)


def with_default_config(card_text: str, environments: "set[str]") -> str:
    """The card with a `default` config: every environment's alpaca rows, so that
    `load_dataset(repo)` works without a config name. It is rebuilt from the environment configs
    the card lists, after every merge, so it always covers exactly the environments published."""
    card = DatasetCard(card_text)
    configs = [c for c in card.data.get("configs") or [] if c.get("config_name") in environments]
    by_split: dict[str, list[str]] = {}
    for config in sorted(configs, key=lambda c: c["config_name"]):
        for entry in config.get("data_files") or []:
            paths = entry["path"] if isinstance(entry["path"], list) else [entry["path"]]
            by_split.setdefault(entry["split"], []).extend(paths)
    others = [c for c in card.data.get("configs") or [] if c.get("config_name") != DEFAULT_CONFIG]
    if by_split:
        default = {"config_name": DEFAULT_CONFIG, "default": True,
                   "data_files": [{"split": split, "path": paths}
                                  for split, paths in by_split.items()]}
        others = [default, *({k: v for k, v in c.items() if k != "default"} for c in others)]
    card.data.configs = others
    return str(card)


def without_empty_stage_rows(report: RunReport) -> RunReport:
    """The report minus stages that handled nothing (the card's table showed `report | 0 | 0 |
    0`)."""
    kept = [s for s in report.stages if s.inputs or s.outputs or s.rejected]
    return report.model_copy(update={"stages": kept})
