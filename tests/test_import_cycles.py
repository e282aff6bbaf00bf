"""No import circle between modules of the library, type-only and function-local imports included.

import-linter skips imports under ``if TYPE_CHECKING:`` here (``exclude_type_checking_imports``, so a lower
layer may name a higher one's types), and its ``acyclic_siblings`` contract compares siblings only, so it sees
neither a circle with one type-only step nor a submodule taking a name from its own package's ``__init__``.
Such a circle still ties the modules into one concern: none can be read, tested or moved without the others.
This walk reads the source with :mod:`ast` (nothing is imported) and counts every import between modules of the
package:

* at the top of a module, under ``if TYPE_CHECKING:``, inside a function (lazy), in a ``try``;
* ``from . import name`` and ``from pkg import name`` resolved to the submodule ``pkg.name`` when that file
  exists, else to ``pkg`` itself (the name is one its ``__init__`` defines or re-exports);
* a package's ``__init__`` is a module of its own, named as the package.

What is not an edge: the parent packages Python runs on the way to a submodule (``import a.b.c`` runs
``a/__init__`` and ``a/b/__init__``, but a module that names ``a.b.c`` depends on ``c``). So ``pkg/__init__``
re-exporting ``pkg/sub`` while ``sub`` imports ``pkg/other`` is no circle, but ``sub`` importing a name from
``pkg`` (its own package's ``__init__``) while ``__init__`` imports ``sub`` is one: import it from the module
that defines it. ``importlib.import_module`` with a computed name is not read: a registry loading its entries
by name is data, and an entry may read the registry that lists it.

The circles are the strongly connected components of that graph (Tarjan); each is reported as one cycle
through it, with how each import is made.
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "mathcircuits"

#: how an import is made; a circle's report names it for every step.
TOP, TYPE_ONLY, LAZY = "top", "type-only", "lazy"


def module_names(root: Path, package: str = PACKAGE) -> dict[str, Path]:
    """Dotted name → file for every module under ``root/package`` (``a/__init__.py`` is ``a``)."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _is_import_module(node: ast.AST) -> bool:
    """``importlib.import_module("a.literal.name")``: a lazy import a registry may make with a fixed name."""
    if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name == "import_module" and isinstance(node.args[0].value, str)


def _imports(tree: ast.Module) -> list[tuple[ast.Import | ast.ImportFrom | ast.Call, str]]:
    """Every import statement of a module (and ``importlib.import_module("literal")``), with how it is made."""
    found: list[tuple[ast.Import | ast.ImportFrom | ast.Call, str]] = []

    def visit(node: ast.AST, kind: str) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)) or _is_import_module(node):
            found.append((node, kind))
            return
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for stmt in node.body:
                visit(stmt, TYPE_ONLY if kind == TOP else kind)
            for stmt in node.orelse:
                visit(stmt, kind)
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and kind == TOP:
            kind = LAZY
        for child in ast.iter_child_nodes(node):
            visit(child, kind)

    visit(tree, TOP)
    return found


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of a dotted name that is a module of ours (``a.b.func`` → ``a.b``)."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        candidate = ".".join(parts[:n])
        if candidate in modules:
            return candidate
    return None


def import_edges(root: Path, package: str = PACKAGE) -> dict[str, dict[str, str]]:
    """Importer → {imported module → how (top / type-only / lazy)}, between modules of ``package`` only.

    Where one module imports another in several ways, the edge keeps the plainest (top over type-only over
    lazy): the report then says what would have to change for the circle to open.
    """
    modules = module_names(root, package)
    rank = {TOP: 0, TYPE_ONLY: 1, LAZY: 2}
    edges: dict[str, dict[str, str]] = {name: {} for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node, kind in _imports(tree):
            targets: list[str | None] = []
            if isinstance(node, ast.Import):
                targets = [_known(alias.name, modules) for alias in node.names]
            elif isinstance(node, ast.Call):
                targets = [_known(node.args[0].value, modules)]
            else:
                if node.level:
                    base_parts = name.split(".") if is_package else name.split(".")[:-1]
                    if node.level > 1:
                        base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                    base = ".".join(base_parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if alias.name != "*" and sub in modules else _known(base, modules))
            for target in targets:
                if target is None or target == name:
                    continue
                if target not in edges[name] or rank[kind] < rank[edges[name][target]]:
                    edges[name][target] = kind
    return edges


def strongly_connected(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one node, each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, {})):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return sorted(out)


def one_cycle(graph: dict[str, dict[str, str]], component: list[str]) -> str:
    """The shortest cycle through the component's first module, as ``a -[how]-> b -[how]-> a``."""
    members, start = set(component), component[0]
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(graph[v]):
            if w not in members:
                continue
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                path.reverse()
                path.append(start)
                return "".join(f"{a} -[{graph[a][b]}]-> " for a, b in zip(path, path[1:])) + start
            if w not in parent:
                parent[w] = v
                queue.append(w)
    raise AssertionError(f"no cycle through {start} in {component}")  # a component of >1 node always has one


def import_cycles(root: Path, package: str = PACKAGE) -> list[str]:
    """One line per circle: its modules and one cycle through them."""
    graph = import_edges(root, package)
    return [f"{{{', '.join(c)}}}: {one_cycle(graph, c)}" for c in strongly_connected(graph)]


def test_no_import_cycle_in_the_library():
    cycles = import_cycles(ROOT)
    assert not cycles, (
        "import circles (type-only and function-local imports count):\n  "
        + "\n  ".join(cycles)
        + "\nFix: put the moved method back in its class, move the shared type to the lower module, merge modules"
        " that are one concern, or import a name from the module that defines it rather than its package."
    )


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_walk_finds_type_only_and_lazy_circles_and_passes_a_re_export(tmp_path):
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.data import Row\n",
            # data re-exports its submodules and rows imports a sibling: the normal shape, no circle
            "pkg/data/__init__.py": "from .rows import Row\nfrom .cells import Cell\n",
            "pkg/data/cells.py": "class Cell: ...\n",
            "pkg/data/rows.py": "from pkg.data.cells import Cell\n\nclass Row: ...\n",
            "pkg/free.py": "import pkg.data.rows\n",
            # a circle made of type-only imports (both spellings of the guard)
            "pkg/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n",
            "pkg/b.py": "import typing\nif typing.TYPE_CHECKING:\n    from .a import A\n",
            # a circle through a function-local relative import of a sibling
            "pkg/c.py": "from pkg.d import D\n",
            "pkg/d.py": "def g():\n    from . import c\n    return c\n",
        },
    )
    assert import_cycles(tmp_path, "pkg") == [
        "{pkg.a, pkg.b}: pkg.a -[type-only]-> pkg.b -[type-only]-> pkg.a",
        "{pkg.c, pkg.d}: pkg.c -[top]-> pkg.d -[lazy]-> pkg.c",
    ]


def test_a_submodule_taking_a_name_from_its_own_package_is_a_circle(tmp_path):
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/data/__init__.py": "from .rows import Row\nfrom .cells import Cell\n",
            "pkg/data/rows.py": "class Row: ...\n",
            "pkg/data/cells.py": "def f():\n    from pkg.data import Row\n    return Row\n",
        },
    )
    assert import_cycles(tmp_path, "pkg") == [
        "{pkg.data, pkg.data.cells}: pkg.data -[top]-> pkg.data.cells -[lazy]-> pkg.data"
    ]
    # importing it from the module that defines it opens the circle
    _write(tmp_path, {"pkg/data/cells.py": "def f():\n    from pkg.data.rows import Row\n    return Row\n"})
    assert import_cycles(tmp_path, "pkg") == []
