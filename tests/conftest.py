"""Shared fixtures: where the repo and the read-only shared data are, and tiny rollout builders."""

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

# The local OpenAI-compatible server fixtures (openai_server, server_factory), for every test.
pytest_plugins = ["tests.support.fixtures"]

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DIR = REPO_ROOT.parent / "shared"

StepSpec = tuple[str, float, bool, str, Sequence[str]]


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


def _shared(part: str, why: str) -> Path:
    path = SHARED_DIR / part
    if not path.exists():
        pytest.skip(f"needs ../shared/{part}: {why}")
    return SHARED_DIR


@pytest.fixture
def shared_dir() -> Path:
    """../shared (read-only data) for tests of SkillRL's released memories and skill banks;
    they skip, saying so, when it is absent."""
    return _shared("data/skillrl-memory", "SkillRL's released memories and skill banks "
                   "(third-party data the project does not ship)")


@pytest.fixture
def shared_rollouts() -> Path:
    """../shared's upstream rollout samples (larger than the bundled ones)."""
    return _shared("data/rollouts", "the upstream rollout samples (third-party data the "
                   "project does not ship)") / "data" / "rollouts"


@pytest.fixture
def cli_contract() -> Path:
    """The command-line contract docs/cli.md follows."""
    shared = _shared("docs/CLI.md", "the command-line contract docs/cli.md follows")
    return shared / "docs" / "CLI.md"


def render_episode(task: str, steps: Sequence[StepSpec], *, banner: bool = True) -> str:
    """Step-format text: the first spec is `Step -1` (its action is ignored and written None).

    Each spec is (action, reward, done, observation, admissible actions).
    """
    lines = ["=== Trajectory for Test 0, Env 0 ==="] if banner else []
    for index, (action, reward, done, observation, actions) in enumerate(steps):
        step_id = "-1" if index == 0 else f"{index - 1:02d}"
        lines.append(
            f"Step {step_id} | Action: {'None' if index == 0 else action} | "
            f"Reward: {reward:.3f} | Done: {done}"
        )
        task_line = f"\n\nYour task is to: {task}." if index == 0 else ""
        lines.append(
            f"Obs: {observation}{task_line}\n\n"
            f"Your admissible actions of the current situation are: [{', '.join(actions)}].\n\n"
            "Now it's your turn to take an action. Once you've finished your reasoning, you should "
            "choose an admissible action for current step and present it within <action> "
            "</action> tags.\n"
        )
    return "\n".join(lines)


def episode_of(task: str, actions: Sequence[str], *, won: bool) -> str:
    """An episode taking `actions` in order; the last one wins (reward 10) or hits the limit."""
    specs: list[StepSpec] = [("None", 0.0, False, "You are in a room.", ["look"])]
    for i, action in enumerate(actions):
        last = i == len(actions) - 1
        specs.append((action, 10.0 if last and won else 0.0, last, f"after {action}", ["look"]))
    return render_episode(task, specs)


@pytest.fixture
def write_env() -> Callable[..., Path]:
    """Write `ROOT/<env>/<name>.txt` files from {name: text}; returns the env folder."""

    def write(root: Path, env: str, files: dict[str, str | bytes]) -> Path:
        folder = root / env
        folder.mkdir(parents=True, exist_ok=True)
        for name, content in files.items():
            path = folder / name
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content, encoding="utf-8")
        return folder

    return write
