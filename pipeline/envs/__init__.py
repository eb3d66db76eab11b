"""The environment registry: a name -> `EnvSpec` dict, filled in one place (below).

Each environment is one module holding its spec and all of its data (alfworld.py, webshop.py,
search.py); the types they fill in and the machinery that reads them are shared (spec.py,
categories.py, action_semantics.py, prompt_profiles.py, text_turns.py, dump_kind.py; the turn
post-checks are pipeline/formats/postchecks.py). Stage and task code looks an environment up
here by name and never branches on it, so a fourth environment is one new module and one line
in `ENVS` (tests/envs/test_fourth_env.py registers one from a test module).
"""

from skillsft.pipeline.envs import alfworld, search, webshop
from skillsft.pipeline.envs.spec import EnvSpec

ENVS: dict[str, EnvSpec] = {spec.name: spec for spec in (alfworld.SPEC, webshop.SPEC, search.SPEC)}


def get_env(name: str) -> EnvSpec:
    """Look an environment up by name, with an error that lists the valid names."""
    try:
        return ENVS[name]
    except KeyError:
        raise ValueError(f"unknown environment {name!r}; expected one of {sorted(ENVS)}") from None


__all__ = ["ENVS", "EnvSpec", "get_env"]
