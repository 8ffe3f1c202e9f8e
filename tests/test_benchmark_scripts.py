"""The benchmark scripts stay runnable: each parses as Python, every name it reaches into
dmath by (``from dmath.nn import gradsync`` ... ``gradsync.X.y``) still exists, and the GPU
session script parses as bash; and the docs name only scripts, flags and session modes that
exist. A benchmark runs rarely, often on a lent machine, where a broken one costs a device
call; a refactor that renames what it uses must change it too."""
import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
SCRIPTS = sorted(BENCH.glob("*.py"))


def _dmath_names(tree: ast.AST) -> dict:
    """name bound in the script -> (dmath module, attribute or None) it was imported as."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "dmath":
            for a in node.names:
                names[a.asname or a.name] = (node.module, a.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "dmath":
                    names[a.asname or "dmath"] = (a.name if a.asname else "dmath", None)
    return names


def _resolve(obj, attr: str):
    """``obj.attr``, importing ``attr`` as a submodule of the module ``obj`` if need be."""
    try:
        return getattr(obj, attr)
    except AttributeError:
        return importlib.import_module(f"{obj.__name__}.{attr}")


def _chains(tree: ast.AST, names: dict):
    """(line, bound name, [attr, ...]) of each attribute chain that starts at a dmath name."""
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner:
            chain, n = [], node
            while isinstance(n, ast.Attribute):
                chain.append(n.attr)
                n = n.value
            if isinstance(n, ast.Name) and n.id in names:
                yield node.lineno, n.id, chain[::-1]


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_benchmark_parses_and_its_dmath_names_exist(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    names = _dmath_names(tree)
    sys.path.insert(0, str(ROOT))
    try:
        missing = []
        for line, name, chain in _chains(tree, names):
            module, attr = names[name]
            try:
                obj = importlib.import_module(module)
                for a in ([attr] if attr else []) + chain:
                    obj = _resolve(obj, a)
            except (AttributeError, ImportError) as e:
                missing.append(f"{path.name}:{line}: {name}.{'.'.join(chain)} ({e})")
        assert not missing, "\n".join(missing)
    finally:
        sys.path.remove(str(ROOT))


def test_gpu_session_script_parses():
    r = subprocess.run(["bash", "-n", str(BENCH / "gpu_session.sh")], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr


def test_docs_name_only_existing_benchmarks_flags_and_session_modes():
    """Each ``benchmarks/NAME.py --flag`` in README.md and docs/ names a script that exists
    and a flag it defines; each ``gpu_session.sh MODE`` a mode of that script."""
    flags = {p.name: set(re.findall(r'add_argument\(\s*"(--[a-z0-9-]+)"', p.read_text()))
             for p in SCRIPTS}
    modes = {m for group in re.findall(r"^  ([a-z0-9|]+)\)", (BENCH / "gpu_session.sh").read_text(),
                                       re.M) for m in group.split("|")}
    bad = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for i, line in enumerate(doc.read_text().splitlines(), 1):
            where = f"{doc.relative_to(ROOT)}:{i}"
            for name, args in re.findall(
                    r"benchmarks/([a-z_0-9]+\.py)((?: +--?[a-z0-9-]+(?:[ =][^ `|;)]+)?)*)", line):
                if name not in flags:
                    bad.append(f"{where}: no benchmarks/{name}")
                    continue
                bad += [f"{where}: {name} has no {f}" for f in re.findall(r"(--[a-z0-9-]+)", args)
                        if f not in flags[name] | {"--help"}]
            bad += [f"{where}: gpu_session.sh has no mode {m}"
                    for m in re.findall(r"gpu_session\.sh ([a-z0-9]+)", line) if m not in modes]
    assert not bad, "\n".join(bad)
