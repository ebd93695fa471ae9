"""One compile path: every kernel (einsum specializations and the op library's structural
kernels) is compiled, cached, loaded and counted by ``sparsecc/runtime``; nothing outside
it imports the runtime's private names, the compile worker, or bumps the counters."""

import ast
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "sparsecc"


def _outside_runtime():
    for p in sorted(ROOT.rglob("*.py")):
        if "runtime" not in p.relative_to(ROOT).parts:
            yield p


def _runtime_imports(path: pathlib.Path):
    """(module, name) of every import from sparsecc.runtime in ``path``."""
    tree = ast.parse(path.read_text())
    pkg = path.relative_to(ROOT.parent).with_suffix("").parts[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(pkg[:len(pkg) - node.level + 1])
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod == "sparsecc.runtime" or mod.startswith("sparsecc.runtime."):
                for a in node.names:
                    yield mod, a.name
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("sparsecc.runtime"):
                    yield a.name, ""


@pytest.mark.parametrize("path", list(_outside_runtime()), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_runtime_state_outside_runtime(path):
    bad = []
    for mod, name in _runtime_imports(path):
        last = mod.rsplit(".", 1)[-1]
        if name.startswith("_") or last.startswith("_") or name in ("compiler", "_worker") \
                or last == "compiler":
            bad.append(f"{mod}.{name}")
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AugAssign) else []
        for t in targets:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "STATS":
                bad.append(f"STATS.{t.attr} assigned (line {node.lineno})")
    assert not bad, bad


def test_structural_kernels_take_the_one_compile_path(tmp_path):
    """A structural kernel is compiled, dumped (SPARSECC_DUMP_IR: every compiled kernel),
    found on disk by a new process and counted like any einsum kernel."""
    dump = tmp_path / "ir"
    script = textwrap.dedent("""
        import sys
        import numpy as np, scipy.sparse as sp, sparsecc as sc
        A = sp.csr_array(np.array([[1.0, 0, 2], [0, 3, 0]]))
        before = sc.cache_info()
        y = sc.ops.getitem(A, np.s_[:, 1:])
        assert np.array_equal(y.toarray(), A.toarray()[:, 1:]), y.toarray()
        mid = sc.cache_info()
        y = sc.ops.getitem(A, np.s_[:, 1:])
        after = sc.cache_info()
        print(mid.misses - before.misses, mid.disk_hits - before.disk_hits, after.hits - mid.hits,
              after.misses - mid.misses)
    """)
    env = dict(os.environ, SPARSECC_CACHE_DIR=str(tmp_path / "cache"), SPARSECC_DUMP_IR=str(dump))
    first = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["1", "0", "1", "0"], first.stdout     # compiled once, then a hit
    assert any(n.endswith("-mlir.mlir") for n in os.listdir(dump)), os.listdir(dump)
    again = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert again.stdout.split() == ["0", "1", "1", "0"], again.stdout     # a new process: from disk


def _kernel_private_names() -> set:
    """The private attributes and methods of ``Kernel`` (runtime/kernel.py)."""
    tree = ast.parse((ROOT / "runtime" / "kernel.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Kernel")
    names = set()
    for node in ast.walk(cls):
        if isinstance(node, (ast.FunctionDef, ast.AnnAssign, ast.Assign, ast.Attribute)):
            if isinstance(node, ast.FunctionDef):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
            elif isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


@pytest.mark.parametrize("path", list(_outside_runtime()), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_kernel_state_outside_runtime(path):
    """explore, the op library, bench and the API read a kernel through its public methods
    (``last_formats``, ``last_specialization``, ``bind``, ``ir``)."""
    private = _kernel_private_names()
    assert {"_last", "_library", "_ranks"} <= private
    bad = [f"line {node.lineno}: .{node.attr}" for node in ast.walk(ast.parse(path.read_text()))
           if isinstance(node, ast.Attribute) and node.attr in private
           and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))]
    assert not bad, bad


def test_kernel_inspection_api():
    import numpy as np
    import scipy.sparse as sp
    import sparsecc as sc
    A = sp.csr_array(np.array([[1.0, 0.0], [0.0, 2.0]]))
    k = sc.compile("y[i] = A[i,j] * x[j]", A="csr")
    assert k.bind(A, x=np.ones(2))[0] is A
    with pytest.raises(sc.OperandError, match="given twice"):
        k.bind(A, A=A)
    k2 = sc.compile("ij,jk->ik", "csr", "csr")
    fresh = sc.runtime.kernel.Kernel(k2.stmt, k2.formats, k2.options, k2.source)
    assert fresh.last_specialization() is None and fresh.last_formats() is None
    C = fresh(A, A)
    np.testing.assert_array_equal(C.toarray(), A.toarray() @ A.toarray())
    spec = fresh.last_specialization()
    assert spec.formats == fresh.last_formats() and spec.out_format.order == (0, 1)
    assert isinstance(spec.key, str) and len(spec.key) == 40
    y = fresh.bind(A, A)
    assert len(y) == 2
