"""Imports point one way: what is shipped or benchmarked never reaches into the test tree;
schemas <- pipeline <- tasks <- the command line, and never in a circle.

The layer graph below is read from the source with `ast` (every import, those inside functions
included: a lazy import is still a dependency; those under `if TYPE_CHECKING:` are left out,
they never run). A new cycle or an import against the layers fails here, naming the modules.
"""

import ast
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHIPPED_OR_BENCH = ("bench", "pipeline", "tasks", "schemas", "skillsft", "examples", "scripts")


def imported_modules(path: Path) -> set[str]:
    """Every module name an import statement of this file names (top level or nested)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("folder", SHIPPED_OR_BENCH)
def test_nothing_outside_tests_imports_tests(folder: str) -> None:
    offenders = [
        f"{path.relative_to(REPO_ROOT)}: {name}"
        for path in sorted((REPO_ROOT / folder).rglob("*.py"))
        for name in sorted(imported_modules(path))
        if name == "tests" or name.startswith("tests.")
    ]
    assert not offenders, "\n".join(offenders)


def test_bench_scripts_do_not_patch_sys_path() -> None:
    """bench/ imports the installed package; a sys.path insert is how `tests` crept in before."""
    scripts = sorted((REPO_ROOT / "bench").glob("*.py"))
    offenders = [p.name for p in scripts if "sys.path.insert" in p.read_text()]
    assert not offenders, offenders


def load_layout_report():
    """scripts/layout_report.py, which builds the import graph with `ast` (nothing imported)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("layout_report",
                                                  REPO_ROOT / "scripts" / "layout_report.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Cycles that existed when this test was written and are being taken apart elsewhere (issue 12,
# command handlers out of tasks/). The list may only shrink: delete an entry once it is gone.
KNOWN_CYCLES: list[list[str]] = []


def test_no_new_import_cycles_among_skillsft_modules() -> None:
    report = load_layout_report()
    found = report.cycles(report.import_graph(REPO_ROOT))
    assert [c for c in found if c not in KNOWN_CYCLES] == [], "new import cycle"
    assert [c for c in KNOWN_CYCLES if c not in found] == [], "fixed: remove it from KNOWN_CYCLES"


def test_the_cycle_finder_sees_cycles_and_ignores_chains() -> None:
    report = load_layout_report()
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}, "f": set()}
    assert report.cycles(graph) == [["a", "b", "c"]]
    assert report.cycles({"a": {"b"}, "b": set()}) == []


def test_the_environment_registry_does_not_import_stages_or_tasks() -> None:
    """Environments are data for the stages; the stages import them, never the reverse."""
    report = load_layout_report()
    graph = report.import_graph(REPO_ROOT)
    envs = [name for name in graph if name.startswith("skillsft.pipeline.envs")]
    offenders = [f"{name} -> {target}" for name in envs for target in sorted(graph[name])
                 if target.startswith(("skillsft.pipeline.stages", "skillsft.tasks",
                                       "skillsft.cli", "skillsft.settings"))]
    assert envs and not offenders, offenders


# -- layers -----------------------------------------------------------------------------------
PACKAGES = ("pipeline", "tasks", "schemas", "skillsft")


def import_graph() -> dict[str, set[str]]:
    """Our modules and what each imports, as scripts/layout_report.py builds it (one graph
    builder and one cycle finder for the test and the report)."""
    graph = load_layout_report().import_graph(REPO_ROOT)
    return {name: set(targets) - {name} for name, targets in graph.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    return load_layout_report().cycles(graph)  # type: ignore[no-any-return]


def layer(module: str) -> str:
    part = module.split(".")[1] if "." in module else ""
    return part if part in ("pipeline", "tasks", "schemas") else "cli"


def test_the_graph_sees_our_modules_and_their_imports() -> None:
    graph = import_graph()
    assert "skillsft.tasks.stages" in graph and "skillsft.cli" in graph
    assert "skillsft.tasks.base" in graph["skillsft.tasks.stages"]
    assert "skillsft.graph" in graph["skillsft.cli"]


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_a_cycle_would_be_found() -> None:
    graph = import_graph()
    graph["skillsft.tasks.base"] = {*graph["skillsft.tasks.base"], "skillsft.tasks.stages"}
    assert any("skillsft.tasks.base" in c and "skillsft.tasks.stages" in c
               for c in cycles(graph))


# Which layers a layer may import (itself included).
ALLOWED = {
    "schemas": {"schemas"},
    "pipeline": {"schemas", "pipeline"},
    "tasks": {"schemas", "pipeline", "tasks"},
    "cli": {"schemas", "pipeline", "tasks", "cli"},
}


@pytest.mark.parametrize("source_layer", sorted(ALLOWED))
def test_imports_point_one_way(source_layer: str) -> None:
    graph = import_graph()
    wrong = sorted(f"{module} imports {target}"
                   for module, targets in graph.items() if layer(module) == source_layer
                   for target in targets if layer(target) not in ALLOWED[source_layer])
    assert wrong == []
