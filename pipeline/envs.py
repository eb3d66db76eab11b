"""One description per environment; the only module that knows environment names.

Stage code receives an `EnvSpec` and never branches on `spec.name`: everything that differs
between ALFWorld, WebShop and Search (rollout format, selection, categories, templates,
post-checks) is a field here. A fourth environment is one more `EnvSpec` in `ENVS`.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from pipeline import categories


@dataclass(frozen=True)
class EnvSpec:
    name: str
    # The tag the released memory files use in `tags.environment`.
    memory_environment_tag: str
    categories: tuple[str, ...]
    category_labels: Mapping[str, str]
    classify_task: Callable[[str, str | None], str]
    # Where a skill bank keeps this environment's per-category skills.
    bank_category_key: Literal["task_specific_skills", "query_type_skills"]

    def label(self, category: str) -> str:
        return self.category_labels.get(category, category.replace("_", " ").title())


ALFWORLD = EnvSpec(
    name="alfworld",
    memory_environment_tag="Alfworld",
    categories=tuple(categories.ALFWORLD_LABELS),
    category_labels=categories.ALFWORLD_LABELS,
    classify_task=categories.classify_alfworld,
    bank_category_key="task_specific_skills",
)

WEBSHOP = EnvSpec(
    name="webshop",
    memory_environment_tag="Webshop",
    categories=tuple(categories.WEBSHOP_LABELS),
    category_labels=categories.WEBSHOP_LABELS,
    classify_task=categories.classify_webshop,
    bank_category_key="task_specific_skills",
)

SEARCH = EnvSpec(
    name="search",
    memory_environment_tag="SearchAgent",
    categories=tuple(categories.SEARCH_LABELS),
    category_labels=categories.SEARCH_LABELS,
    classify_task=categories.classify_search,
    bank_category_key="query_type_skills",
)

ENVS: dict[str, EnvSpec] = {spec.name: spec for spec in (ALFWORLD, WEBSHOP, SEARCH)}


def get_env(name: str) -> EnvSpec:
    """Look an environment up by name, with an error that lists the valid names."""
    try:
        return ENVS[name]
    except KeyError:
        raise ValueError(f"unknown environment {name!r}; expected one of {sorted(ENVS)}") from None
