"""Programs (``sc.compile`` of several statements) and ``sc.lazy`` as a hostile user: random
chains of contractions and element-wise steps over formats x dtypes, size-1 and empty
operands, shared and repeated sub-expressions, against NumPy on dense copies.  Seeded; a
cheap sweep by default, the big one under ``@pytest.mark.slow``."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc

DTYPES = ["int32", "int64", "float32", "float64", "complex128"]


def _mat(rng, shape, dtype, fmt):
    d = rng.integers(-3, 4, size=shape) * (rng.random(shape) < float(rng.choice([0.0, 0.3, 0.7])))
    d = d.astype(dtype)
    if fmt == "dense":
        return d, d
    return d, {"csr": sp.csr_array, "csc": sp.csc_array, "coo": sp.coo_array}[fmt](d)


def _dense(r):
    return r.toarray() if sp.issparse(r) else np.asarray(r)


def _close(got, want, dtype, what):
    tol = 1e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-9
    np.testing.assert_allclose(_dense(got), want, rtol=tol, atol=tol, err_msg=what)


def program_case(seed):
    rng = np.random.default_rng(seed)
    n = {c: int(rng.choice([1, 2, 3, 5])) for c in "ijkl"}
    dtype = DTYPES[int(rng.integers(len(DTYPES)))]
    fmts = ["dense", "csr", "csc", "coo"]
    shapes = {"A": "ij", "B": "jk", "C": "kl", "M": "ik", "x": "l", "y": "j"}
    dense, ops = {}, {}
    for name, idx in shapes.items():
        f = fmts[int(rng.integers(4))] if len(idx) == 2 else "dense"
        dense[name], ops[name] = _mat(rng, tuple(n[c] for c in idx), dtype, f)
    lines = [
        ("U[i,k] = sum[j](A[i,j] * B[j,k])", lambda e: np.einsum("ij,jk->ik", e["A"], e["B"])),
        ("V[i,l] = sum[k](U[i,k] * C[k,l])", lambda e: np.einsum("ik,kl->il", e["U"], e["C"])),
        ("w[i] = sum[l](V[i,l] * x[l])", lambda e: np.einsum("il,l->i", e["V"], e["x"])),
        ("s[i] = sum[j,k,l](A[i,j] * B[j,k] * C[k,l] * x[l])",
         lambda e: np.einsum("ij,jk,kl,l->i", e["A"], e["B"], e["C"], e["x"])),
        ("t[i] = w[i] - s[i]", lambda e: e["w"] - e["s"]),
        ("m[i,k] = M[i,k] * sum[j](A[i,j] * B[j,k])", lambda e: e["M"] * np.einsum("ij,jk->ik", e["A"], e["B"])),
        ("z[k] = sum[i,j](y[j] * A[i,j] * M[i,k])", lambda e: np.einsum("j,ij,ik->k", e["y"], e["A"], e["M"])),
        ("q[] = sum[i](t[i] * t[i])", lambda e: np.sum(e["t"] * e["t"])),
    ]
    keep = sorted(int(k) for k in rng.choice(len(lines), size=int(rng.integers(2, len(lines) + 1)), replace=False))
    # a statement reading an earlier output needs that statement
    need = {1: [0], 2: [1], 4: [2, 3], 7: [4]}
    chosen = set(keep)
    for k in sorted(chosen, reverse=True):
        stack = [k]
        while stack:
            for d in need.get(stack.pop(), []):
                if d not in chosen:
                    chosen.add(d)
                    stack.append(d)
    chosen = sorted(chosen)
    return [lines[k] for k in chosen], dense, ops, dtype, bool(rng.random() < 0.5)


def check_program(seed):
    lines, dense, ops, dtype, named = program_case(seed)
    text = "\n".join(t for t, _ in lines)
    prog = sc.compile(text)
    got = prog(**{k: v for k, v in ops.items() if k in prog.operands})
    env = dict(dense)
    for t, f in lines:
        out = t.split("[")[0]
        env[out] = f(env)
        _close(got[out], env[out], dtype, f"seed {seed}: {t!r} in\n{text}")


def lazy_case(seed):
    rng = np.random.default_rng(seed + 50_000)
    n = int(rng.choice([1, 2, 4])), int(rng.choice([1, 3, 5]))
    dtype = DTYPES[int(rng.integers(len(DTYPES)))]
    fmts = ["dense", "csr", "csc", "coo"]
    A = _mat(rng, n, dtype, fmts[int(rng.integers(4))])
    B = _mat(rng, n, dtype, fmts[int(rng.integers(4))])
    C = _mat(rng, (n[1], n[1]), dtype, fmts[int(rng.integers(4))])
    x = _mat(rng, (n[1],), dtype, "dense")
    return dtype, A, B, C, x, int(rng.integers(6))


def check_lazy(seed):
    dtype, (Ad, A), (Bd, B), (Cd, C), (xd, x), which = lazy_case(seed)
    LA, LB, LC, Lx = (sc.lazy(v) for v in (A, B, C, x))
    exprs = [
        (lambda a, b, c, v: a @ (c @ (c @ v)), None),
        (lambda a, b, c, v: (a + b) @ v - 2 * (a @ v), None),
        (lambda a, b, c, v: ((a - b) ** 2).sum(axis=1), None),
        (lambda a, b, c, v: (a * b) @ c @ v, None),
        (lambda a, b, c, v: a.T @ (b @ v), None),
        (lambda a, b, c, v: (a @ c) * b, None),
    ]
    f, _ = exprs[which]
    want = f(Ad, Bd, Cd, xd)
    got = sc.compute(f(LA, LB, LC, Lx))
    _close(got, want, dtype, f"seed {seed}: expression {which}")


@pytest.mark.parametrize("seed", range(3))
def test_program_cheap(seed):
    check_program(seed)


@pytest.mark.parametrize("seed", range(3))
def test_lazy_cheap(seed):
    check_lazy(seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3, 150))
def test_program_sweep(seed):
    check_program(seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3, 150))
def test_lazy_sweep(seed):
    check_lazy(seed)
