"""The teacher layer sits below the stages: it owns the request kinds, the offline teacher
imports no stage, and the offline context is built only when the offline teacher answers."""

import ast
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from skillsft.pipeline.envs import get_env
from skillsft.pipeline.stages import distill as distill_stage
from skillsft.pipeline.teacher.kinds import KINDS
from skillsft.pipeline.teacher.offline import SOLVERS, OfflineTeacher
from skillsft.testing.stage_responder import stage_responder
from tests.pipeline.test_distill import BANK, episode, records
from tests.teacher.test_openai_teacher import make_teacher

REPO_ROOT = Path(__file__).resolve().parents[2]
TEACHER = REPO_ROOT / "pipeline" / "teacher"


def imports_of(path: Path) -> set[str]:
    """Every module an import statement of the file names, nested (lazy) imports included."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module if node.level == 0 else "." * node.level + node.module)
    return names


def test_no_teacher_module_imports_a_stage() -> None:
    offenders = [f"{path.relative_to(REPO_ROOT)}: {name}"
                 for path in sorted(TEACHER.rglob("*.py"))
                 for name in sorted(imports_of(path))
                 if name.startswith("skillsft.pipeline.stages")
                 or (name.startswith(".") and ".stages" in name)]
    assert not offenders, "\n".join(offenders)


def test_loading_the_offline_teacher_loads_no_stage() -> None:
    code = ("import sys, skillsft.pipeline.teacher.offline, skillsft.pipeline.teacher.factory; "
            "print(sorted(m for m in sys.modules if m.startswith('skillsft.pipeline.stages')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout.strip()
    assert loaded == "[]"


@pytest.mark.parametrize("name", sorted(KINDS))
def test_every_kind_has_an_offline_solver_reading_its_context_type(name: str) -> None:
    kind = KINDS[name]
    solver = SOLVERS[name]
    hints = typing.get_type_hints(solver)
    first = next(iter(solver.__code__.co_varnames[: solver.__code__.co_argcount]))
    assert hints[first] is kind.context_type
    assert issubclass(hints["return"], kind.answer_model)


def test_the_offline_context_is_built_only_for_the_offline_teacher(
        server_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = server_factory(responder=stage_responder)
    built: list[int] = []
    original = distill_stage.offline_context

    def counting(*args, **kwargs):
        built.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(distill_stage, "offline_context", counting)
    spec = get_env("alfworld")
    options = distill_stage.DistillOptions(context_budget_tokens=400, window_overlap=1)
    live = make_teacher(server, tmp_path, response_format="json_object_schema")

    distill_stage.distill(records(episode(12)), spec, options, live, BANK)
    asked = server.stats.stage_requests
    assert asked > 2 and built == []  # answered live: never built

    offline = OfflineTeacher(show_progress=False)
    result = distill_stage.distill(records(episode(12)), spec, options, offline, BANK)
    assert result.rejected == 0 and len(built) == asked  # once per request
