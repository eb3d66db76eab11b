"""Imports point one way: what is shipped or benchmarked never reaches into the test tree;
every module sits in the folder of its layer, a layer imports only the layers below it, and
nothing imports in a circle.

The layers, bottom up, each one a folder: schemas < the base of pipeline/ (errors, options,
durable, workdir) < pipeline/formats < pipeline/envs < pipeline/teacher < pipeline/stages <
tasks < skillsft (the command line). A module at pipeline/'s root beyond the base belongs to
no layer and fails here, as does any import from a lower layer to a higher one.

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


def test_a_cycle_through_a_package_init_is_a_cycle(tmp_path: Path) -> None:
    """`from skillsft.pipeline.a.x import f` runs a/__init__.py first: if that imports the
    importer back, importing either fails (a partially initialised module)."""
    for name, text in {
        "pipeline/a/__init__.py": "from skillsft.pipeline.b.m import g\n",
        "pipeline/a/x.py": "def f(): ...\n",
        "pipeline/b/__init__.py": "",
        "pipeline/b/m.py": "from skillsft.pipeline.a.x import f\ndef g(): ...\n",
        "pipeline/c/__init__.py": "from skillsft.pipeline.c import y\n",
        "pipeline/c/y.py": "from skillsft.pipeline.c.z import h\n",
        "pipeline/c/z.py": "def h(): ...\n",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    report = load_layout_report()
    # a package importing its own submodules, and they their siblings, is no cycle
    assert report.cycles(report.import_graph(tmp_path)) == [
        ["skillsft.pipeline.a", "skillsft.pipeline.b.m"]]


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
# Bottom up. A module's layer is the first entry whose prefix names it (its folder).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("schemas", ("skillsft.schemas",)),
    ("pipeline base", tuple(f"skillsft.pipeline.{name}" for name in
                            ("errors", "options", "durable", "workdir"))),
    ("formats", ("skillsft.pipeline.formats",)),
    ("envs", ("skillsft.pipeline.envs",)),
    ("teacher", ("skillsft.pipeline.teacher",)),
    ("stages", ("skillsft.pipeline.stages",)),
    ("tasks", ("skillsft.tasks",)),
    ("skillsft", ("skillsft",)),
)
PIPELINE_PACKAGE = "skillsft.pipeline"  # its __init__ is part of the base

def import_graph() -> dict[str, set[str]]:
    """Our modules and what each imports, as scripts/layout_report.py builds it (one graph
    builder and one cycle finder for the test and the report)."""
    graph = load_layout_report().import_graph(REPO_ROOT)
    return {name: set(targets) - {name} for name, targets in graph.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    return load_layout_report().cycles(graph)  # type: ignore[no-any-return]


def rank(module: str) -> int | None:
    """The module's layer (its index in LAYERS), None for a module in no layer's folder."""
    if module == PIPELINE_PACKAGE:
        return 1
    for index, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            if index == len(LAYERS) - 1 and module.startswith(PIPELINE_PACKAGE + "."):
                return None  # under pipeline/ but in none of its folders
            return index
    return None


def loose_modules(graph: dict[str, set[str]]) -> list[str]:
    return sorted(module for module in graph if rank(module) is None)


def up_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) where the imported module's layer is above the importer's. The
    edge to a package that only stands for one of its submodules (see layout_report) is left
    out: the submodule's edge names the import."""
    return sorted((module, target) for module, targets in graph.items()
                  for target in targets
                  if (rank(module) or 0) < (rank(target) or 0)
                  and not any(other.startswith(target + ".") for other in targets))


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


def test_every_module_ranks_by_its_folder() -> None:
    names = [name for name, _ in LAYERS]
    expected = {
        "skillsft.schemas.report": "schemas",
        "skillsft.pipeline": "pipeline base",
        "skillsft.pipeline.workdir": "pipeline base",
        "skillsft.pipeline.formats.rollouts.kinds": "formats",
        "skillsft.pipeline.envs.alfworld": "envs",
        "skillsft.pipeline.teacher.offline.causal": "teacher",
        "skillsft.pipeline.stages.parse": "stages",
        "skillsft.tasks.base": "tasks",
        "skillsft.cli": "skillsft",
        "skillsft.testing.openai_server": "skillsft",
    }
    assert {module: names[rank(module)] for module in expected} == expected  # type: ignore[index]
    assert rank("skillsft.pipeline.helpers") is None


def test_no_module_sits_loose_at_the_root_of_pipeline() -> None:
    assert loose_modules(import_graph()) == []


def test_imports_point_down_the_layers() -> None:
    wrong = [f"{module} imports {target}" for module, target in up_imports(import_graph())]
    assert wrong == []


def test_the_layer_check_would_fail_on_a_loose_module_and_an_upward_import() -> None:
    graph = import_graph()
    graph["skillsft.pipeline.loose"] = {"skillsft.pipeline.errors"}
    graph["skillsft.pipeline.formats.jsonio"] = {"skillsft.pipeline.envs"}
    assert loose_modules(graph) == ["skillsft.pipeline.loose"]
    assert ("skillsft.pipeline.formats.jsonio", "skillsft.pipeline.envs") in up_imports(graph)
