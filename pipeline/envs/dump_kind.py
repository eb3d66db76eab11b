"""Which environment a rollout folder was written by, from a few of its files.

Each `EnvSpec` lists `dump_signs`, patterns only its own rollout files contain. Stage 1 reads a
handful of files before parsing: when none looks like the requested environment and some look
like another, the user pointed the wrong command at the folder, and the run stops there, before
any teacher call, saying which command fits. When no file matches any environment, nothing is
decided here: parsing then rejects the files one by one with their reasons.
"""

import math
import os
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from skillsft.pipeline.errors import MalformedRollout, RolloutDirError
from skillsft.pipeline.formats.rollouts.text import check_regular_file

if TYPE_CHECKING:
    from skillsft.pipeline.envs import EnvSpec

SAMPLE_FILES = 8
SAMPLE_BYTES = 64 * 1024  # signs sit in the first steps; big files need not be read whole


class WrongEnvironment(RolloutDirError):
    """ROLLOUT_DIR holds rollouts of another environment than the one asked for."""


def _regular(path: Path) -> bool:
    """Only regular files are sampled: a named pipe would block the read (parsing rejects it)."""
    try:
        check_regular_file(path, max_mb=math.inf)
    except MalformedRollout:
        return False
    return True


def sample_files(rollout_dir: Path, limit: int = SAMPLE_FILES) -> list[Path]:
    """The first regular `.txt` files under ROLLOUT_DIR, walking folders in sorted order."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(rollout_dir):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(".txt") and _regular(Path(dirpath, name)):
                found.append(Path(dirpath, name))
                if len(found) >= limit:
                    return found
    return found


def looks_like(text: str, specs: Sequence["EnvSpec"]) -> list[str]:
    """Names of the environments whose signs appear in this file's text."""
    return [spec.name for spec in specs
            if any(re.search(sign, text) for sign in spec.dump_signs)]


def check_environment(rollout_dir: Path, spec: "EnvSpec", specs: Sequence["EnvSpec"]) -> None:
    """Raise `WrongEnvironment` when the sampled files look like another environment only."""
    votes: Counter[str] = Counter()
    example: dict[str, Path] = {}
    files = sample_files(rollout_dir)
    for path in files:
        # Without blocking: a file swapped for a pipe since its stat is never waited on.
        with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as handle:
            text = handle.read(SAMPLE_BYTES).decode("utf-8", errors="replace")
        for name in looks_like(text, specs):
            votes[name] += 1
            example.setdefault(name, path)
    if votes[spec.name] or not votes:
        return
    other_name, n = votes.most_common(1)[0]
    other = next(s for s in specs if s.name == other_name)
    shown = example[other_name].relative_to(rollout_dir).as_posix()
    article = "an" if other.title[:1] in "AEIOU" else "a"
    raise WrongEnvironment(
        f"{rollout_dir} looks like {article} {other.title} dump, not {spec.title} ({n} of "
        f"{len(files)} files read, e.g. {shown}): run run_{other.name}.sh (or skillsft run "
        f"{other.name})"
    )
