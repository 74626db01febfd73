"""The layout is the architecture: layers import downward only, no import cycles, small modules.

Counted from the source (an AST walk of every module, deferred imports inside functions
included), so a cycle hidden in a function-level import is still a cycle. `from pkg import sub`
counts as an edge to the submodule `pkg.sub`, not to the package's __init__. Layers
(docs/architecture.md):

    backend -> contracts -> agents, registry, reports -> harness

A package may import the layers below it; agents, registry and reports share a layer and import
each other only along ALLOWED_SIBLING_EDGES.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("backend", "contracts", "agents", "registry", "reports", "harness")
#: package -> the packages it may import
ALLOWED: dict[str, set[str]] = {
    "backend": set(),
    "contracts": set(),
    "agents": {"backend", "contracts"},
    "registry": {"backend", "contracts"},
    "reports": {"backend", "contracts"},
    "harness": {"backend", "contracts", "agents", "registry", "reports"},
}
#: edges within the middle layer, each with the reason it exists
ALLOWED_SIBLING_EDGES = {
    ("reports", "agents"): "the report's failure groups use the LLM layer's grouping (agents.llm_groups)",
}
MAX_LINES = 500


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {_module_name(f): f for pkg in PACKAGES for f in (ROOT / pkg).rglob("*.py")}


def import_edges(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the project modules it imports anywhere in its source."""
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules else mod for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:  # `import a.b.c` of an attribute: its module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges[name].add(target)
    return edges


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    nodes = set(graph) | {t for ts in graph.values() for t in ts}
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
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
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_edges(project_modules())


def _package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    top: dict[str, set[str]] = defaultdict(set)
    for a, targets in graph.items():
        for b in targets:
            if a.split(".")[0] != b.split(".")[0]:
                top[a.split(".")[0]].add(b.split(".")[0])
    return top


def test_the_walk_sees_deferred_imports_and_submodules(graph):
    # harness.runner imports the executors inside run_tier; registry.unit_tier imports contracts at the top
    assert "harness.executors" in graph["harness.runner"]
    assert "contracts.backends" in graph["registry.unit_tier"]
    assert "harness.executors.local" in graph["harness.executors"]  # `from harness.executors.local import ...`


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_cycles_between_modules(graph):
    assert cycles(graph) == []


def test_no_cycles_between_packages(graph):
    assert cycles(_package_graph(graph)) == []


def test_packages_import_only_the_layers_below(graph):
    bad = []
    for a, targets in sorted(graph.items()):
        for b in sorted(targets):
            pa, pb = a.split(".")[0], b.split(".")[0]
            if pa != pb and pb not in ALLOWED[pa] and (pa, pb) not in ALLOWED_SIBLING_EDGES:
                bad.append(f"{a} -> {b}")
    assert bad == [], "imports against the layer order (docs/architecture.md):\n" + "\n".join(bad)


def test_contracts_import_no_torch_at_module_level():
    """`reports` and CI scripts import contracts cheaply: torch only inside functions."""
    for path in (ROOT / "contracts").rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n == "torch" or n.startswith("torch.") for n in names), f"{path.name}: {names}"


def test_no_module_over_500_lines():
    files = [f for d in (*PACKAGES, "tests", "benchmarks") for f in (ROOT / d).rglob("*.py")]
    long = {str(f.relative_to(ROOT)): n for f in files if (n := len(f.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def _readme_layers() -> dict[str, int]:
    """package -> layer number, from the README's layout table (`| 2 | `contracts/` | ...`)."""
    text = (ROOT / "README.md").read_text()
    table = text.split("## Layout", 1)[1].split("\n\n", 2)[1]
    layers = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) >= 2 and cells[0].isdigit():
            layers[cells[1].strip("`/")] = int(cells[0])
    return layers


def test_the_readme_layout_table_and_docs_architecture_state_the_enforced_layers():
    layers = _readme_layers()
    assert set(layers) == set(PACKAGES)
    for pkg in PACKAGES:  # what the test allows a package to import lies in the layers below it
        assert ALLOWED[pkg] <= {p for p in PACKAGES if layers[p] < layers[pkg]}, pkg
    assert ALLOWED["harness"] == set(PACKAGES) - {"harness"}  # the top orchestrates all of them
    diagram = (ROOT / "docs" / "architecture.md").read_text().split("```text", 1)[1].split("```", 1)[0]
    rows = [re.split(r" {4,}", line)[0].split() for line in diagram.splitlines() if line[:1].isalpha()]
    assert [set(r) for r in rows] == [{p for p in PACKAGES if layers[p] == n} for n in sorted(set(layers.values()))]
