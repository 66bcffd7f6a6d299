"""The import graph flows one way: every module of perfmodel/ and executor/ is parsed with `ast`, each import
(lazy and type-only ones too) is checked against the layer order written once in docs/architecture.md, and the
graph has no cycle. A new arrow that runs back up fails here with the two module names."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import REPO

ARCHITECTURE = REPO / "docs" / "architecture.md"
PACKAGES = ("perfmodel", "executor")
MAX_BACK_ARROWS = 2


def _section(title: str) -> list[str]:
    """The lines of the fenced block under `title` in docs/architecture.md."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    m = re.search(rf"{re.escape(title)}.*?```text\n(.*?)```", text, re.S)
    assert m, f"{ARCHITECTURE}: no ```text block after {title!r}"
    return [ln.split("#")[0].strip() for ln in m.group(1).splitlines() if ln.split("#")[0].strip()]


def layers() -> list[list[str]]:
    """Module prefixes per layer, bottom first."""
    return [ln.split() for ln in _section("### Layers")]


def allowed_back_arrows() -> set[tuple[str, str]]:
    out = set()
    for ln in _section("### Arrows that run back up"):
        a, _, b = ln.partition("->")
        out.add((a.strip(), b.strip()))
    return out


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in sorted((REPO / pkg).rglob("*.py")):
            name = ".".join(p.relative_to(REPO).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = p
    return out


def _target(mod: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports (a name imported from a package that is itself a module counts as
    that module)."""
    mods = modules()

    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for mod, path in mods.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _target(mod, path, node)
                targets = [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            deps |= {t for t in map(known, targets) if t and t != mod}
        graph[mod] = deps
    return graph


def layer_of(mod: str, order: list[list[str]]) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for i, prefixes in enumerate(order):
        for p in prefixes:
            # a top-level package's own name covers only its __init__, so a new module must be given a layer
            below = "." in p and mod.startswith(p + ".")
            if (mod == p or below) and (best is None or len(p) > best[0]):
                best = (len(p), i)
    return best[1] if best else None


def back_arrows(graph: dict[str, set[str]], order: list[list[str]]) -> list[tuple[str, str]]:
    return sorted((a, b) for a, deps in graph.items() for b in deps if layer_of(b, order) > layer_of(a, order))


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_layer() -> None:
    order = layers()
    missing = [m for m in modules() if layer_of(m, order) is None]
    assert not missing, f"modules in no layer of {ARCHITECTURE.name}'s '### Layers': {missing}"


def test_imports_run_down_the_layers() -> None:
    arrows = back_arrows(import_graph(), layers())
    allowed = allowed_back_arrows()
    assert len(allowed) <= MAX_BACK_ARROWS
    unexpected = [f"{a} -> {b}" for a, b in arrows if (a, b) not in allowed]
    assert not unexpected, f"imports that run back up the layers of {ARCHITECTURE.name}: {unexpected}"
    stale = [f"{a} -> {b}" for a, b in allowed if (a, b) not in arrows]
    assert not stale, f"{ARCHITECTURE.name} justifies back-arrows that no longer exist: {stale}"


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_the_checker_sees_a_back_arrow_and_a_cycle() -> None:
    order = [["low"], ["high"]]
    assert back_arrows({"low": {"high"}, "high": set()}, order) == [("low", "high")]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
