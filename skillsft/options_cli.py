"""Command-line flags derived from the stage options models (pipeline/options.py).

A flag is the option's name with dashes (`top_k_skills` -> `--top-k-skills`), its help is the
option's help, its value check is named by `Opt.kind` (skillsft/arguments.py) or follows the
field's type. Every flag defaults to None ("not given"), so the option object's own default
applies: the default lives in the options model, nowhere else.
"""

import argparse
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from skillsft.arguments import (
    held_out_share,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    share,
)
from skillsft.pipeline.options import Declared, declared, from_values


def count_range(text: str) -> str:
    """`N` or `N-M` (entries a skill-bank section should end with), checked, kept as text."""
    from skillsft.pipeline.envs.prompt_profiles import CountRange

    try:
        return str(CountRange.parse(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def source_range(text: str) -> Any:
    from pydantic import ValidationError

    from skillsft.pipeline.formats.rollouts.selection import SourceRange

    try:
        return SourceRange.parse(text)
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(
            exc.errors()[0]["msg"].removeprefix("Value error, ")) from None
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def existing_file(text: str) -> str:
    if not Path(text).is_file():
        raise argparse.ArgumentTypeError(f"{text} is not a file")
    return str(Path(text).resolve())


def tokenizer(text: str) -> str:
    """A tokenizer that cannot load fails now, not after the run."""
    from skillsft.pipeline.errors import ConfigError
    from skillsft.pipeline.formats.token_lengths import load_counter

    try:
        load_counter(text)
    except ConfigError as exc:  # its message names the flag and the fix; argparse shows it
        raise argparse.ArgumentTypeError(str(exc).removeprefix(f"--tokenizer {text}: ")) from None
    return text


def license_id(text: str) -> str:
    from skillsft.pipeline.stages.publish_options import license_id as checked

    try:
        return checked(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


KINDS: dict[str, Callable[[str], Any]] = {
    "int": int,
    "positive_int": positive_int,
    "non_negative_int": non_negative_int,
    "non_negative_float": non_negative_float,
    "positive_float": positive_float,
    "share": share,
    "held_out_share": held_out_share,
    "count_range": count_range,
    "source_range": source_range,
    "file": existing_file,
    "tokenizer": tokenizer,
    "license": license_id,
}


# Flags given once per value (`--source-range A --source-range B`); "repeated": plain text.
REPEATED_KINDS = {"source_range", "repeated"}


def flag_of(item: Declared) -> str:
    return item.opt.flag or "--" + item.name.replace("_", "-")


def argument_options(item: Declared) -> dict[str, Any]:
    opt = item.opt
    # The default shown is the model's: it is declared nowhere else.
    plain = "default" in opt.help or item.type is bool or item.default in ("", None, ())
    shown = "" if plain else f" (default {item.default})"
    options: dict[str, Any] = {"dest": item.name, "default": None, "help": opt.help + shown}
    if item.type is bool:
        # A switch sets the value away from its default (`--include-mixed`,
        # `--actions-only-history`).
        return {**options, "action": "store_const", "const": not item.default}
    if opt.choices:
        options["choices"] = list(opt.choices)
    if opt.metavar:
        options["metavar"] = opt.metavar
    if opt.kind in REPEATED_KINDS:
        options["action"] = "append"
    converter = KINDS.get(opt.kind) or (item.type if item.type in (int, float) else None)
    if converter is not None:
        options["type"] = converter
    return options


def add_option_flags(parser: argparse.ArgumentParser, models: Iterable[type],
                     title: str = "stage options") -> None:
    """One flag per user-settable field of these options models (each name once)."""
    taken = {option for action in parser._actions for option in action.option_strings}
    group = parser.add_argument_group(title)
    for model in models:
        for item in declared(model):
            flag = flag_of(item)
            if item.own and flag not in taken:
                group.add_argument(flag, **argument_options(item))
                taken.add(flag)


def options_from_args(model: type, args: argparse.Namespace) -> Any:
    """The options object the parsed flags describe (what was not given keeps its default)."""
    values = {item.name: getattr(args, item.name) for item in declared(model)
              if getattr(args, item.name, None) is not None}
    return from_values(model, values)
