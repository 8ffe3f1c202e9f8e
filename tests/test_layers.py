"""The package's imports form layers (docs/architecture.md, DESIGN.md): inside each
package no import circle, and across packages imports point only down the layers.
Every import counts: module level and inside functions (the AST is walked, nothing
is imported)."""
from __future__ import annotations

import ast
import functools
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "dmath"

# Rank of each top-level package of dmath: a module may import from packages of a lower
# rank, and from its own package (no circle inside it). Packages of the same rank must not
# import each other. A new package (io, fft, array_api...) gets a line here; the test fails,
# naming it, until then. Ranks may be floats ("io": 1.5 sits between array and ops).
LAYERS: dict[str, float] = {
    "runtime": 0,
    "native": 0.5,    # compiled CPU kernels: imports nothing of dmath
    "array": 1,
    "io": 1.5,        # persistence: arrays and runtime only
    "ops": 2,
    "linalg": 3,
    "nn": 4,
    "train": 5,
    "cli": 6,
    "array_api": 5.5,  # the standard's namespace, over ops and linalg
    "fft": 3.5,        # distributed FFT, over ops (redistribution)
}
# dmath/__init__.py and dmath/__main__.py sit on top of everything: they may import anything.
TOP = 100


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, pathlib.Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _imports(name: str, path: pathlib.Path, known: set[str]) -> set[str]:
    """The dmath modules ``name`` imports (absolute and relative, anywhere in the file);
    ``from pkg import sub`` counts as importing the module ``pkg.sub`` when it is one."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bases = [a.name for a in node.names]
            subs: list[str] = []
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                up = here[:len(here) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            subs = [f"{base}.{a.name}" for a in node.names]
            # ``from pkg import sub`` imports the module pkg.sub; names import pkg itself
            bases = [base] if any(s not in known for s in subs) else []
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                   or (isinstance(node.func, ast.Name)
                       and node.func.id in ("import_module", "__import__")))):
            bases, subs = [node.args[0].value], []          # importlib.import_module("dmath.x")
        else:
            continue
        for b in bases:
            if b == "dmath" or b.startswith("dmath."):
                # the deepest known module that is a prefix of the import
                parts = b.split(".")
                while parts and ".".join(parts) not in known:
                    parts.pop()
                if parts:
                    out.add(".".join(parts))
        for s in subs:
            if s in known:
                out.add(s)
    out.discard(name)
    return out


def _package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _rank(package: str | None) -> float:
    if package in (None, "__main__"):
        return TOP
    if package not in LAYERS:
        raise AssertionError(
            f"dmath.{package} is a package (or top-level module) that tests/test_layers.py "
            f"does not know: add it to LAYERS with its rank (lower = nearer the runtime)")
    return LAYERS[package]


@functools.lru_cache(maxsize=None)
def _graph() -> dict[str, set[str]]:
    """module -> the dmath modules it imports, for every module of the package."""
    mods = _modules()
    known = set(mods)
    return {m: _imports(m, p, known) for m, p in mods.items()}


def test_every_package_has_a_layer():
    for m in _graph():
        _rank(_package(m))


def test_imports_point_down_the_layers():
    bad = []
    # importing ``dmath`` itself is importing every package its __init__ imports
    top_of_init = max(_rank(_package(d)) for d in _graph()["dmath"] if _package(d))
    for m, deps in _graph().items():
        pm = _package(m)
        rm = _rank(pm)
        for d in sorted(deps):
            pd = _package(d)
            if d == "dmath":
                if rm <= top_of_init:
                    bad.append(f"{m} imports the dmath package itself, which imports layers "
                               f"up to rank {top_of_init} (install a hook from dmath/__init__.py "
                               "instead)")
                continue
            if pd == pm:
                continue
            rd = _rank(pd)
            if rd >= rm and rm != TOP:
                bad.append(f"{m} (layer {pm}={rm}) imports {d} (layer {pd}={rd})")
    assert not bad, "imports running up (or across) the layers:\n" + "\n".join(bad)


def _cycle(nodes: set[str], edges: dict[str, set[str]]) -> list[str] | None:
    """One circle among ``nodes`` (a list of modules, first == last), or None."""
    color: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        color[n] = 1
        stack.append(n)
        for d in sorted(edges.get(n, ())):
            if d not in nodes:
                continue
            if color.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in color:
                found = visit(d)
                if found:
                    return found
        stack.pop()
        color[n] = 2
        return None

    for n in sorted(nodes):
        if n not in color:
            found = visit(n)
            if found:
                return found
    return None


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_no_import_circle_inside_package(package):
    g = _graph()
    prefix = f"dmath.{package}"
    # the package's __init__ re-exports its modules: it may import them, none may import it
    nodes = {m for m in g if m.startswith(prefix + ".")}
    edges = {m: {d for d in g[m] if d != prefix} for m in nodes}
    back = sorted(m for m in nodes if prefix in g[m])
    assert not back, f"modules of {prefix} import the package's __init__ (a circle): {back}"
    found = _cycle(nodes, edges)
    assert found is None, "import circle: " + " -> ".join(found)


def test_checker_finds_circles_and_upward_imports():
    """The checker itself: a made-up circle and layer violation are caught."""
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}}
    assert _cycle({"a", "b", "c"}, edges) == ["a", "b", "c", "a"]
    assert _cycle({"a", "b"}, {"a": {"b"}, "b": set()}) is None
    with pytest.raises(AssertionError, match="does not know"):
        _rank("no_such_package")


def test_no_name_hides_a_module():
    """Modules are nouns: no package binds a function (or other name) over one of its
    submodules (``from .sort import sort`` made ``dmath.ops.sort`` the function), and no
    module defines a function of its own name (``tune.tune``)."""
    bad = []
    for init in sorted(ROOT.rglob("__init__.py")):
        subs = {p.stem for p in init.parent.glob("*.py")} | {
            p.name for p in init.parent.iterdir() if (p / "__init__.py").exists()}
        for node in ast.walk(ast.parse(init.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level and node.module:
                names = [a.asname or a.name for a in node.names]
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names = [node.name]
            else:
                continue
            bad += [f"{_module_name(init)}.{n} is bound over the module of that name"
                    for n in names if n in subs and n != "*"]
    for m, path in _modules().items():
        stem = m.rsplit(".", 1)[-1]
        tree = ast.parse(path.read_text())
        bad += [f"{m}.{n.name} has its module's name" for n in tree.body
                if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == stem]
    assert not bad, "\n".join(bad)
