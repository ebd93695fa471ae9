"""Seeded random differential driver (a hostile user's calls) over the call path's
repeated-call and general paths, and over the hand-written kernels (element-wise unions,
SpGEMM, SDDMM, MTTKRP/TTV).  Oracles share no code with sparsecc: numpy.einsum on dense
copies, and written-out loops over stored entries where sparse semantics differ from a dense
product (an unstored entry is never multiplied by a NaN: docs/sparse-results.md).

Each run is a subprocess (a signal fails the test); it prints one line per disagreement and
``DONE <count>``.  Default runs use a few cases; ``-m slow`` runs more seeds and cases.

Run by hand: ``python tests/test_adversarial_driver.py calls|kernels SEED CASES``."""

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

HERE = os.path.abspath(__file__)
ROOT = os.path.dirname(os.path.dirname(HERE))


# ------------------------------------------------------------------ the repeated-call path
def _variant(x, which, rng):
    """Operand ``x`` changed in exactly one property (its values, as a dense copy, unchanged)."""
    if np.ndim(x) == 0:
        return x
    if sp.issparse(x):
        f = x.format
        if which == "matrix":
            return {"csr": sp.csr_matrix, "csc": sp.csc_matrix}[f](x)
        if which == "layout":
            return x.asformat(["csr", "csc", "coo", "bsr"][rng.integers(4)]).copy()
        if which in ("idx64", "mixed_idx"):
            y = x.copy()
            y.indptr = y.indptr.astype(np.int64)
            if which == "idx64":
                y.indices = y.indices.astype(np.int64)
            return y
        if which == "unsorted" and x.nnz > 1:
            y = x.copy()
            for r in range(len(y.indptr) - 1):
                s = slice(y.indptr[r], y.indptr[r + 1])
                y.indices[s] = y.indices[s][::-1]
                y.data[s] = y.data[s][::-1]
            y.has_sorted_indices = False
            return y
        if which == "duplicate" and x.nnz > 0:
            r = int(np.argmax(np.diff(x.indptr) > 0))
            p = int(x.indptr[r])
            ind = np.insert(x.indices, p, x.indices[p])
            dat = np.insert(x.data, p, x.data[p] / 2)
            dat[p + 1] = x.data[p] - x.data[p] / 2
            ptr = x.indptr.copy()
            ptr[r + 1:] += 1
            return type(x)((dat, ind, ptr), shape=x.shape)
        if which == "strided":
            y = x.copy()
            y.data = np.repeat(y.data, 2)[::2]
            return y
        if which == "readonly":
            y = x.copy()
            y.data.flags.writeable = False
            y.indices.flags.writeable = False
            return y
        if which == "dtype":
            return x.astype([np.float32, np.int64, np.complex128][rng.integers(3)])
        if which == "stored_zero" and x.nnz:
            y = x.copy()
            y.data[0] = 0
            return y
        if which == "flag_false":
            y = x.copy()
            y.has_canonical_format = False
            return y
        return x
    if which == "fortran" and x.ndim == 2:
        return np.asfortranarray(x)
    if which == "negative_strides":
        return x[(slice(None, None, -1),) * x.ndim][(slice(None, None, -1),) * x.ndim]
    if which == "strided":
        return np.repeat(x, 2, axis=-1)[..., ::2]
    if which == "readonly":
        y = x.copy()
        y.flags.writeable = False
        return y
    if which == "matrix" and x.ndim == 2:
        return np.matrix(x)
    if which == "subclass":
        return x.view(_Sub)
    if which == "dtype":
        return x.astype([np.float32, np.int32, np.complex64, np.bool_][rng.integers(4)])
    if which == "list":
        return x.tolist()
    if which == "as_sparse" and x.ndim == 2:
        return sp.csr_array(x)
    return x


class _Sub(np.ndarray):
    pass


_VARIANTS = ["copy", "matrix", "layout", "idx64", "mixed_idx", "unsorted", "duplicate", "strided", "readonly",
             "dtype", "stored_zero", "flag_false", "fortran", "negative_strides", "subclass", "list", "as_sparse",
             "same", "same", "same", "same"]
_EXPRS = ["ij,j->i", "ij,jk->ik", "ij,ij->ij", "ij,ik,kj->ij", "ji,j->i", "ij,i->j", "ij,->ij", "ij,j->"]


def _dense(x):
    return x.toarray() if sp.issparse(x) else np.asarray(x)


def run_calls(seed: int, cases: int) -> int:
    """Kernels called again and again with operands that differ from the last call in one
    property each; results against numpy.einsum; inputs never modified."""
    import sparsecc as sc
    rng = np.random.default_rng(seed)
    bad = 0
    for expr in _EXPRS:
        kernel = sc.compile(expr) if rng.random() < 0.5 else None
        subs = expr.split("->")[0].split(",")

        def base():
            sizes = {c: int(rng.choice([1, 3, 5, 70])) for c in "ijk"}
            ops = []
            for t, s in enumerate(subs):
                shape = tuple(sizes[c] for c in s)
                if t == 0:
                    ops.append(sp.random_array(shape, density=float(rng.choice([0.0, 0.2, 0.6])),
                                               format=str(rng.choice(["csr", "csc"])), rng=rng))
                else:
                    ops.append(rng.random(shape) if shape else np.float64(2.5))
            return ops

        ops0 = base()
        for _ in range(cases):
            if rng.random() < 0.15:
                ops0 = base()
            ops = [_variant(o, _VARIANTS[rng.integers(len(_VARIANTS))], rng) for o in ops0]
            snap = [_dense(o).copy() for o in ops]
            with np.errstate(all="ignore"):
                want = np.einsum(expr, *[_dense(o) for o in ops])
            try:
                got = kernel(*ops) if kernel is not None else sc.einsum(expr, *ops)
            except Exception as err:    # noqa: BLE001 - every exception is a finding here
                print("RAISED", expr, type(err).__name__, err, [type(o).__name__ for o in ops])
                bad += 1
                continue
            g = _dense(got)
            if g.shape != want.shape or g.dtype != want.dtype or not np.allclose(g, want, rtol=1e-4, atol=1e-4):
                print("WRONG", expr, g.dtype, want.dtype, [(type(o).__name__, getattr(o, "dtype", None)) for o in ops])
                bad += 1
            if any(not np.array_equal(s, _dense(o)) for s, o in zip(snap, ops)):
                print("MODIFIED", expr)
                bad += 1
    return bad


# ------------------------------------------------------------------ hand-written kernels
def _values(n, dt, special, rng):
    dt = np.dtype(dt)
    if dt == np.bool_:
        return rng.random(n) < 0.7
    if dt.kind == "i":
        v = rng.integers(-5, 6, n)
        if special:                 # overflow wraps, as in NumPy
            v[: n // 3] = np.iinfo(dt).max - rng.integers(0, 3, n // 3)
        return v.astype(dt)
    v = rng.uniform(-2, 2, n)
    if dt.kind == "c":
        v = v + 1j * rng.uniform(-2, 2, n)
    v = v.astype(dt)
    if special and n:
        sel = rng.integers(0, n, max(1, n // 4))
        v[sel] = rng.choice([np.nan, np.inf, -np.inf, 0.0], sel.size)
    return v


def _matrix(m, n, density, dt, fmt, idx, special, rng):
    nnz = int(density * m * n)
    r = rng.integers(0, max(m, 1), nnz) if m and n else np.zeros(0, int)
    c = rng.integers(0, max(n, 1), nnz) if m and n else np.zeros(0, int)
    A = sp.coo_array((_values(r.size, dt, special, rng), (r, c)), shape=(m, n)).asformat(fmt)
    A.sum_duplicates()
    A.indices = A.indices.astype(idx)
    A.indptr = A.indptr.astype(idx)
    return A


def _spgemm_loops(A, B):
    """C = A @ B summed over stored pairs only (written-out loops)."""
    A, B = A.tocoo(), B.tocoo()
    out = np.zeros((A.shape[0], B.shape[1]), np.result_type(A.dtype, B.dtype))
    for i, j, a in zip(A.coords[0], A.coords[1], A.data):
        for jj, k, b in zip(B.coords[0], B.coords[1], B.data):
            if jj == j:
                out[i, k] += a * b
    return out


def run_kernels(seed: int, cases: int) -> int:
    import sparsecc as sc
    rng = np.random.default_rng(seed)
    bad = 0

    def check(label, fn, want):
        nonlocal bad
        try:
            got = fn()
        except Exception as err:    # noqa: BLE001
            print("RAISED", label, type(err).__name__, err)
            bad += 1
            return
        g, w = _dense(got), np.asarray(want)
        if g.shape != w.shape or g.dtype != w.dtype:
            print("META", label, g.shape, w.shape, g.dtype, w.dtype)
            bad += 1
            return
        ok = (np.array_equal(g, w) if w.dtype.kind in "biu" else
              np.allclose(g, w, rtol=1e-3 if w.dtype in (np.float32, np.complex64) else 1e-9,
                          atol=1e-3 if w.dtype in (np.float32, np.complex64) else 1e-9, equal_nan=True))
        if not ok:
            print("WRONG", label)
            bad += 1

    for trial in range(cases):
        dt = str(rng.choice(["bool", "int32", "int64", "float32", "float64", "complex64", "complex128"]))
        m, n, k = (int(x) for x in rng.choice([0, 1, 3, 7, 40], 3))
        fmt = str(rng.choice(["csr", "csc"]))
        ia, ib = (np.int32, np.int64)[rng.integers(2)], (np.int32, np.int64)[rng.integers(2)]
        special = bool(rng.random() < 0.5)
        dens = float(rng.choice([0.0, 0.1, 0.5]))
        A = _matrix(m, n, dens, dt, fmt, ia, special, rng)
        B = _matrix(m, n, float(rng.choice([0.0, 0.3])), dt, fmt, ib, special, rng)
        Ad, Bd = A.toarray(), B.toarray()
        lab = f"seed {seed} case {trial}: {dt} {m}x{n}x{k} {fmt} {ia.__name__}/{ib.__name__} special={special}"
        with np.errstate(all="ignore"):
            check("add " + lab, lambda: sc.ops.add(A, B), Ad + Bd)
            if dt != "bool":
                check("sub " + lab, lambda: sc.ops.sub(A, B), Ad - Bd)
                alpha = ([0, -2, 3] if np.dtype(dt).kind != "c" else [0, -2, 1j])[rng.integers(3)]
                check(f"add alpha={alpha} " + lab, lambda: sc.ops.add(A, B, alpha=alpha),
                      Ad + np.asarray(alpha).astype(dt) * Bd)
            C = _matrix(n, k, dens, dt, fmt, ib, special, rng)
            check("spgemm " + lab, lambda: sc.einsum("ij,jk->ik", A, C, out_format="csr"), _spgemm_loops(A, C))
            X, Y = _values(m * k, dt, False, rng).reshape(m, k), _values(k * n, dt, False, rng).reshape(k, n)
            check("sddmm " + lab, lambda: sc.einsum("ij,ik,kj->ij", A, X, Y, out_format="csr"),
                  Ad * np.einsum("ik,kj->ij", X, Y))
            shape = (m, n, k)
            nn = int(dens * m * n * k)
            cs = [rng.integers(0, max(s, 1), nn) for s in shape] if m and n and k else [np.zeros(0, int)] * 3
            T = sp.coo_array((_values(nn, dt, special, rng), tuple(c.astype(ia) for c in cs)), shape=shape)
            Td = T.toarray()
            F, G = _values(n * 4, dt, False, rng).reshape(n, 4), _values(k * 4, dt, False, rng).reshape(k, 4)
            check("mttkrp " + lab, lambda: sc.einsum("ijk,jr,kr->ir", T, F, G), np.einsum("ijk,jr,kr->ir", Td, F, G))
            v = _values(k, dt, False, rng)
            check("ttv " + lab, lambda: sc.einsum("ijk,k->ij", T, v), np.einsum("ijk,k->ij", Td, v))
    return bad


# ------------------------------------------------------------------ the tests
def _run(which: str, seed: int, cases: int, threads: int = 1):
    env = dict(os.environ, SPARSECC_NUM_THREADS=str(threads))
    r = subprocess.run([sys.executable, HERE, which, str(seed), str(cases)], capture_output=True, text=True,
                       cwd=ROOT, timeout=900, env=env)
    assert r.returncode == 0, f"exit status {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    assert r.stdout.strip().endswith("DONE 0"), r.stdout[-4000:]


@pytest.mark.parametrize("which,cases", [("calls", 3), ("kernels", 2)])
def test_driver_default(which, cases):
    _run(which, 0, cases)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("which,cases,threads", [("calls", 40, 1), ("kernels", 25, 1), ("kernels", 25, 2)])
def test_driver_slow(which, cases, threads, seed):
    _run(which, seed, cases, threads)


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    sys.path.insert(0, ROOT)
    which, seed, cases = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    bad = (run_calls if which == "calls" else run_kernels)(seed, cases)
    print("DONE", bad, flush=True)
