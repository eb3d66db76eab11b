"""Imports point one way: what is shipped or benchmarked never reaches into the test tree."""

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
