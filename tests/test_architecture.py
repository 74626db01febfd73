"""The layout is the architecture: layers import downward only, no import cycles.

Counted from the source (an AST walk of every module, deferred imports inside functions
included), so a cycle hidden in a function-level import is still a cycle. `from pkg import sub`
counts as an edge to the submodule `pkg.sub`, not to the package's __init__. Layers
(docs/architecture.md):

    backend -> contracts -> agents, registry, reports -> harness

A package may import the layers below it; agents, registry and reports share a layer and import
each other only along ALLOWED_SIBLING_EDGES. Inside `harness`, each subpackage is a step of the
pipeline and imports only the steps it builds on (HARNESS_ALLOWED). Module size is a signal, not
a rule: modules over SIZE_SIGNAL lines are named in a warning of the test report.
"""

from __future__ import annotations

import ast
import re
import warnings
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
#: harness subpackage -> the harness subpackages it may import (the pipeline, docs/architecture.md)
HARNESS_ALLOWED: dict[str, set[str]] = {
    "build": set(),  # spec -> tiny model and its inputs
    "stages": {"build"},  # the stages of one model check
    "blame": {"build", "stages"},  # whose failure: rules and the probes that re-run stages
    "rootcause": {"build", "stages", "blame"},  # which call broke a backend-blamed row, and its repro
    "tiers": {
        "build",
        "stages",
        "blame",
        "rootcause",
    },  # the built-in tiers (found by entry point, never imported by the engine)
    "engine": {"blame"},  # runner, workers, executors, journal, nightly: tiers only through contracts.tiers
    "recording": {"build", "engine"},  # the record tier that regenerates the registry
    "cli": {"build", "stages", "blame", "rootcause", "tiers", "engine", "recording"},
}
#: the only blame module the engine may use: the rules that blame a dead case by its reference re-run
ENGINE_BLAME_MODULES = {"harness.blame.rules"}
SIZE_SIGNAL = 500


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
    # harness.engine.runner imports the executors inside run_tier; registry.unit_tier imports contracts
    # at the top
    assert "harness.engine.executors" in graph["harness.engine.runner"]
    assert "contracts.backends" in graph["registry.unit_tier"]
    assert (
        "harness.engine.executors.local" in graph["harness.engine.executors"]
    )  # `from harness.engine.executors.local import ...`


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
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not any(n == "torch" or n.startswith("torch.") for n in names), f"{path.name}: {names}"


def _subpackage(module: str) -> str | None:
    """`harness.engine.runner` -> "engine"; None outside harness' subpackages (`harness.__main__`)."""
    parts = module.split(".")
    return parts[1] if parts[0] == "harness" and len(parts) > 1 and parts[1] in HARNESS_ALLOWED else None


def test_every_harness_subpackage_has_a_rule():
    found = {p.name for p in (ROOT / "harness").iterdir() if (p / "__init__.py").exists()}
    assert found == set(HARNESS_ALLOWED)


def test_harness_subpackages_import_only_the_steps_they_build_on(graph):
    bad = []
    for a, targets in sorted(graph.items()):
        sa = _subpackage(a)
        if sa is None:
            continue
        for b in sorted(targets):
            sb = _subpackage(b)
            if sb is None or sb == sa:
                continue
            if sb not in HARNESS_ALLOWED[sa] or (
                sa == "engine" and sb == "blame" and b not in ENGINE_BLAME_MODULES
            ):
                bad.append(f"{a} -> {b}")
    assert bad == [], "harness imports against the pipeline (docs/architecture.md):\n" + "\n".join(bad)


def test_the_engine_never_imports_a_tier(graph):
    """The engine finds tiers through contracts.tiers (entry points), so a tier can be replaced."""
    engine = [a for a in graph if a.startswith("harness.engine")]
    assert engine and all(not b.startswith("harness.tiers") for a in engine for b in graph[a])


def test_module_sizes_are_reported():
    """A size signal, not a split-by-count rule: the test report names modules over SIZE_SIGNAL lines."""
    files = [f for d in (*PACKAGES, "tests", "benchmarks") for f in (ROOT / d).rglob("*.py")]
    sizes = {str(f.relative_to(ROOT)): len(f.read_text().splitlines()) for f in files}
    assert sizes
    long = sorted(((n, f) for f, n in sizes.items() if n > SIZE_SIGNAL), reverse=True)
    if long:
        warnings.warn(
            f"modules over {SIZE_SIGNAL} lines: " + ", ".join(f"{f} ({n})" for n, f in long),
            stacklevel=1,
        )


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
    assert [set(r) for r in rows] == [
        {p for p in PACKAGES if layers[p] == n} for n in sorted(set(layers.values()))
    ]
