"""Compile targets as data, pure pipelines, IR rewrites through the MLIR bindings (issue 13)."""

import ast
import dataclasses
import pathlib

import pytest

import sparsecc as sc

ROOT = pathlib.Path(__file__).resolve().parent.parent / "sparsecc"

SIMPLE_MLIR = """
#CSR = #sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compressed), posWidth = 32, crdWidth = 32 }>
#map_a = affine_map<(i, j) -> (i, j)>
#map_x = affine_map<(i, j) -> (j)>
#map_y = affine_map<(i, j) -> (i)>
func.func @kernel(%ni: index, %nj: index, %A: tensor<?x?xf64, #CSR>, %x: tensor<?xf64>, %y: memref<?xf64>)
    attributes { llvm.emit_c_interface } {
  %init = bufferization.to_tensor %y restrict writable : memref<?xf64> to tensor<?xf64>
  %r = linalg.generic { indexing_maps = [#map_a, #map_x, #map_y], iterator_types = ["parallel", "reduction"] }
      ins(%A, %x : tensor<?x?xf64, #CSR>, tensor<?xf64>) outs(%init : tensor<?xf64>) {
    ^bb0(%a: f64, %b: f64, %acc: f64):
      %m = arith.mulf %a, %b : f64
      %s = arith.addf %acc, %m : f64
      linalg.yield %s : f64
  } -> tensor<?xf64>
  bufferization.materialize_in_destination %r in restrict writable %y : (tensor<?xf64>, memref<?xf64>) -> ()
  return
}
"""


def _imports(path: pathlib.Path) -> list[str]:
    """Every module ``path`` imports, absolute (relative imports resolved against its package)."""
    pkg = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = pkg.split(".")
            if node.level:
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found.append(mod)
            found += [f"{mod}.{a.name}" for a in node.names]
    return found


@pytest.mark.parametrize("layer", ["passes", "dialect"])
def test_passes_and_dialect_import_nothing_from_the_runtime(layer):
    bad = [(p.name, m) for p in sorted((ROOT / layer).rglob("*.py")) for m in _imports(p)
           if m == "sparsecc.runtime" or m.startswith("sparsecc.runtime.")]
    assert not bad, f"{layer}/ imports the runtime: {bad}"


@pytest.mark.parametrize("layer, other", [("passes", "dialect"), ("dialect", "passes")])
def test_passes_and_dialect_import_nothing_from_each_other(layer, other):
    """The names both need (the flag function, ``SELF_CHECKED``, ``ROW_WORK`` ...) are in the
    ground module ``sparsecc/kernel_abi.py`` (imports inside functions count too)."""
    bad = [(str(p.relative_to(ROOT)), m) for p in sorted((ROOT / layer).rglob("*.py")) for m in _imports(p)
           if m == f"sparsecc.{other}" or m.startswith(f"sparsecc.{other}.")]
    assert not bad, f"{layer}/ imports {other}/: {bad}"


def test_kernel_abi_is_ground():
    got = [m for m in _imports(ROOT / "kernel_abi.py") if m.startswith("sparsecc")]
    assert not got, got


def test_no_assert_guards_program_logic():
    """``assert`` vanishes under ``python -O``: sparsecc raises explicitly instead."""
    found = [f"{p.relative_to(ROOT)}:{n.lineno}" for p in sorted(ROOT.rglob("*.py"))
             for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.Assert)]
    assert not found, found


# ----------------------------------------------------------------------------- targets
def test_target_is_resolved_once_and_keyed_by_cpu_and_features():
    from sparsecc.runtime import cache, targets
    host = targets.resolve(sc.Options())
    assert host is targets.resolve(sc.Options(opt_level=1))          # cached per process
    assert host.name == "cpu" and host.param("cpu") and host.param("features")
    named = targets.resolve(sc.Options(cpu="x86-64"))
    assert named.param("cpu") == "x86-64" and named.param("features") == ""
    with pytest.raises(dataclasses.FrozenInstanceError):
        host.params = ()                                             # frozen data
    mlir, opts = "module {}", sc.Options().key()
    here = cache.key_of(mlir, opts, host)
    assert cache.key_of(mlir, opts, host) == here                     # stable
    assert cache.key_of(mlir, opts, named) != here
    assert cache.key_of(mlir, opts, named) != cache.key_of(mlir, opts, targets.resolve(sc.Options(cpu="skylake")))
    feats = host.param("features").replace("+avx2", "-avx2") + ",+avx512f"
    assert cache.key_of(mlir, opts, host.replace(features=feats)) != here      # other features
    assert cache.key_of(mlir, opts, host.replace(cpu="some-other-cpu")) != here
    assert cache.key_of(mlir, opts, host.replace(cpu=host.param("cpu"))) == here
    assert cache.key_of(mlir, sc.Options(opt_level=1).key(), host) != here
    # what the worker receives: name and parameters, rebuilt through the registry
    assert targets.from_request(host.request()) == host


def test_unknown_target_is_an_internal_error():
    from sparsecc.runtime import targets
    with pytest.raises(sc.InternalError, match="no compile target named 'tpu'"):
        targets.from_request({"name": "tpu", "params": {}})


def test_pipelines_take_the_openmp_fact_as_an_argument(tmp_path, monkeypatch):
    """parallel='auto' compiles serial code when the runtime says libomp is missing; the
    pipelines learn that from the target's facts, not by importing the runtime."""
    monkeypatch.setenv("SPARSECC_CACHE_DIR", str(tmp_path / "cache"))
    from sparsecc.runtime import compiler, targets
    host = targets.resolve(sc.Options())
    with_omp = host.replace(openmp="cmeel-libomp=test") if not host.param("openmp") else host
    without = host.replace(openmp="")
    got = compiler.compile_library(SIMPLE_MLIR, str(tmp_path / "a.so"), target=with_omp)
    assert got["parallel"] == "any-storage-outer-loop" and got["openmp"]
    got = compiler.compile_library(SIMPLE_MLIR, str(tmp_path / "b.so"), target=without)
    assert got["parallel"] == "none" and not got["openmp"]
    assert "sparsecc_entry" in got["stages"]["llvm-dialect"]


def test_index32_reads_the_encodings_through_the_bindings():
    from mlir import ir

    from sparsecc.passes.pipeline import _index32
    with ir.Context():
        assert _index32(ir.Module.parse(SIMPLE_MLIR))
        assert not _index32(ir.Module.parse(SIMPLE_MLIR.replace("crdWidth = 32", "crdWidth = 64")))
        assert not _index32(ir.Module.parse(SIMPLE_MLIR.replace(", posWidth = 32, crdWidth = 32", "")))


def test_thread_count_and_wrapper_are_built_through_the_bindings(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSECC_CACHE_DIR", str(tmp_path / "cache"))
    from sparsecc.runtime import compiler, targets
    host = targets.resolve(sc.Options())
    got = compiler.compile_library(SIMPLE_MLIR, str(tmp_path / "a.so"), target=host.replace(openmp="x"),
                                   options=sc.Options(parallel="dense-outer-loop"))
    text = got["stages"]["llvm-dialect"]
    assert "@sparsecc_num_threads" in text and "llvm.func @sparsecc_entry__body" in text


def test_worker_dispatches_through_the_registry(tmp_path, monkeypatch):
    """The worker rebuilds the target from its name: a name it does not know is a bug."""
    monkeypatch.setenv("SPARSECC_CACHE_DIR", str(tmp_path / "cache"))
    from sparsecc.runtime import compiler, targets
    host = targets.resolve(sc.Options())
    alien = targets.Target(dataclasses.replace(host.kind, name="tpu"), host.params)
    with pytest.raises(sc.InternalError, match="no compile target named 'tpu'"):
        compiler.compile_library(SIMPLE_MLIR, str(tmp_path / "a.so"), target=alien)


def test_thread_count_refuses_an_unexpected_parallel_region():
    from mlir import ir

    from sparsecc.passes.rewrites import thread_count
    src = """
func.func @f() {
  omp.parallel {
    omp.barrier
    omp.terminator
  }
  return
}
"""
    with ir.Context():
        m = ir.Module.parse(src)
        with pytest.raises(sc.InternalError, match="not one omp.wsloop"):
            thread_count(m)
        assert thread_count(ir.Module.parse("func.func @g() {\n  return\n}")) == 0


def test_iterator_types_are_compared_as_attributes():
    from mlir import ir

    from sparsecc.passes.rewrites import _generics
    swapped = SIMPLE_MLIR.replace('["parallel", "reduction"]', '["reduction", "parallel"]')
    with ir.Context():
        assert _generics(ir.Module.parse(SIMPLE_MLIR)) == [(["parallel", "reduction"], True)]
        assert _generics(ir.Module.parse(swapped)) == [(["reduction", "parallel"], True)]


def test_autotune_key_includes_the_target(monkeypatch):
    import numpy as np

    from sparsecc.explore import storage
    from sparsecc.runtime import targets
    x = np.ones(3)
    here = storage.tuning_key("i->i", [x], {}, sc.Options(), None)
    assert storage.tuning_key("i->i", [x], {}, sc.Options(), None) == here
    host = targets.resolve(sc.Options())
    monkeypatch.setattr(targets, "resolve", lambda options, name="cpu": host.replace(features="+sse2"))
    assert storage.tuning_key("i->i", [x], {}, sc.Options(), None) != here
