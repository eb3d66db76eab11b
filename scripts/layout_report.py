"""Layout figures for a review: import cycles among skillsft modules, and how far a flag travels.

    python scripts/layout_report.py [--root DIR] [--flag history --flag concurrency ...]
        [--typing] [--verbose]

Cycles: an import graph is built with `ast` (no module is imported) over pipeline/, tasks/,
schemas/ and skillsft/, with every `import`/`from ... import` of a `skillsft.*` module as an
edge to the module it names (`from pkg import name` points at `pkg.name` when that is a module,
else at `pkg`), and to the packages above it that the importer is outside of (their
`__init__.py` runs first); imports inside functions count, imports under `if TYPE_CHECKING:`
count only with `--typing`. A cycle is a strongly connected component of more than one module.

Flags: for each name (`history`, `rollout_dir`), the files under those folders that mention it
in one of these representations, and which ones they are:
a command-line flag (`--history`), an environment variable (`SKILLSFT_HISTORY`), a Luigi
parameter (`history = luigi...Parameter`), a dataclass/pydantic field (`history: int`), a dict
key (`"history"`), a keyword argument (`history=`), an attribute (`.history`). It is a text
heuristic: a field or variable of the same name with another meaning (a conversation's
rendered `history`) counts too, so compare runs of this script, not its figures with a hand
count.
"""

import argparse
import ast
import re
from pathlib import Path

FOLDERS = {"pipeline": "skillsft.pipeline", "tasks": "skillsft.tasks",
           "schemas": "skillsft.schemas", "skillsft": "skillsft"}
DEFAULT_FLAGS = ("history", "concurrency", "rollout_dir")


def module_files(root: Path) -> dict[str, Path]:
    """Installed module name -> source file, for every .py under the four folders."""
    found: dict[str, Path] = {}
    for folder, package in FOLDERS.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = path.relative_to(root / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def _typing_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(path: Path, name: str, is_package: bool, modules: set[str],
               typing: bool) -> set[str]:
    """The skillsft modules this file imports (see the module docstring for the rules)."""
    targets: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _typing_only(node) and not typing:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name if is_package else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.add(full if full in modules else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), filename=str(path)))
    found = {target for target in targets if target in modules and target != name}
    # Importing `a.b.c` runs `a/b/__init__.py` first: from outside package `a.b`, that is an
    # edge to it too (a submodule importing a sibling is not: its package is already loading).
    return found | {package for target in found for package in _packages_of(target)
                    if package in modules and not (name + ".").startswith(package + ".")}


def _packages_of(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:end]) for end in range(2, len(parts))]


def import_graph(root: Path, typing: bool = False) -> dict[str, set[str]]:
    files = module_files(root)
    names = set(files)
    return {name: imports_of(path, name, path.name == "__init__.py", names, typing)
            for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


REPRESENTATIONS = {
    "flag": r"--{dash}\b",
    "environment variable": r"\b[A-Z_]*{upper}\b",
    "luigi parameter": r"\b{name}\s*=\s*(?:luigi\.|\w*Parameter\b)",
    "field": r"^\s+{name}\s*:\s*[\w\[\]|. ]+(?:=.*)?$",
    "dict key": r"""["']{name}["']""",
    "keyword argument": r"\b{name}=(?!=)",
    "attribute": r"\.{name}\b",
}


def flag_walk(root: Path, name: str) -> dict[str, set[str]]:
    """File (relative to root) -> the representations of this option found in it."""
    words = {"name": re.escape(name), "dash": re.escape(name.replace("_", "-")),
             "upper": re.escape(name.upper())}
    patterns = {kind: re.compile(rx.format(**words), re.MULTILINE)
                for kind, rx in REPRESENTATIONS.items()}
    found: dict[str, set[str]] = {}
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            text = path.read_text()
            kinds = {kind for kind, pattern in patterns.items() if pattern.search(text)}
            if kinds:
                found[path.relative_to(root).as_posix()] = kinds
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--flag", action="append", dest="flags",
                        help=f"an option name (repeatable; default {' '.join(DEFAULT_FLAGS)})")
    parser.add_argument("--typing", action="store_true",
                        help="count imports under `if TYPE_CHECKING:` too")
    parser.add_argument("--verbose", action="store_true", help="list files and cycles")
    args = parser.parse_args()
    graph = import_graph(args.root, typing=args.typing)
    found = cycles(graph)
    edges = sum(len(targets) for targets in graph.values())
    print(f"modules {len(graph)}, import edges {edges}, import cycles {len(found)}"
          f"{' (TYPE_CHECKING imports included)' if args.typing else ''}")
    for component in found:
        print("  cycle: " + " <-> ".join(component))
    for flag in args.flags or DEFAULT_FLAGS:
        walk = flag_walk(args.root, flag)
        kinds = set().union(*walk.values()) if walk else set()
        print(f"{flag}: {len(walk)} files, {len(kinds)} representations "
              f"({', '.join(sorted(kinds))})")
        if args.verbose:
            for file, file_kinds in walk.items():
                print(f"  {file}: {', '.join(sorted(file_kinds))}")


if __name__ == "__main__":
    main()
