"""A randomized check of named semirings x formats x dtypes against loops written out in
NumPy over the stored entries (shared by tests/test_structure_fixes.py; run as a script for
a larger sweep: python tests/_semiring_sweep.py N SEED)."""

import itertools
import sys

import numpy as np
import scipy.sparse as sp

import sparsecc as sc

MUL = {"times": lambda a, b: a * b, "plus": lambda a, b: a + b, "minus": lambda a, b: a - b,
       "min": min, "max": max, "land": lambda a, b: bool(a) and bool(b), "lor": lambda a, b: bool(a) or bool(b),
       "pair": lambda a, b: 1, "first": lambda a, b: a, "second": lambda a, b: b}
ADD = {"plus": lambda a, b: a + b, "times": lambda a, b: a * b, "min": min, "max": max,
       "lor": lambda a, b: bool(a) or bool(b), "land": lambda a, b: bool(a) and bool(b),
       "lxor": lambda a, b: bool(a) != bool(b)}
SUBS = ["ij,j->i", "ji,j->i", "ij,jk->ik", "ij,ij->ij"]
FORMATS = ["csr", "csc", "coo", "dcsr", "bsr", "dense"]
DTYPES = [np.float64, np.int64, np.bool_]


def identity(add, dtype):
    if add in ("lor", "lxor"):
        return False
    if add == "land":
        return True
    if add == "plus":
        return 0
    if add == "times":
        return 1
    if dtype == np.bool_:
        return add == "min"
    if dtype == np.int64:
        return np.iinfo(np.int64).max if add == "min" else np.iinfo(np.int64).min
    return np.inf if add == "min" else -np.inf


def operand(D, fmt):
    if fmt == "dense":
        return D, None
    if fmt == "bsr":
        return sp.bsr_array(D, blocksize=(2, 2)), None
    if fmt == "dcsr":
        return sp.csr_array(D), "dcsr"
    return {"csr": sp.csr_array, "csc": sp.csc_array, "coo": sp.coo_array}[fmt](D), None


def stored(x):
    if isinstance(x, np.ndarray):
        return x, np.ones(x.shape, bool)
    c = sp.coo_array(x)
    m = np.zeros(c.shape, bool)
    m[c.coords] = True
    return c.toarray(), m


def oracle(sub, add, mul, ops, dtype):
    ins, out = sub.split("->")
    ins = ins.split(",")
    sizes = {}
    for s, o in zip(ins, ops):
        sizes.update(zip(s, o.shape))
    summed = [c for c in dict.fromkeys("".join(ins)) if c not in out]
    dm = [stored(o) for o in ops]
    shape = tuple(sizes[c] for c in out)
    vals = np.empty(shape, dtype=object)
    has = np.zeros(shape, bool)
    for pos in np.ndindex(*shape):
        env = dict(zip(out, pos))
        acc, any_term = identity(add, dtype), False
        for red in itertools.product(*(range(sizes[c]) for c in summed)):
            env.update(zip(summed, red))
            keys = [tuple(env[c] for c in s) for s in ins]
            if all(m[k] for (_, m), k in zip(dm, keys)):
                a, b = (d[k].item() for (d, _), k in zip(dm, keys))
                acc = ADD[add](acc, MUL[mul](a, b))
                any_term = True
        vals[pos], has[pos] = acc, any_term
    return vals, has


def check(semiring, fmt, dtype, sub, seed):
    rng = np.random.default_rng(seed)
    add, mul = semiring.split("_")
    n, m = 4, 6
    A = np.where(rng.random((n, m)) < 0.35, rng.integers(-3, 4, (n, m)), 0).astype(dtype)
    A[1] = 0                                       # a row that stores nothing
    if sub == "ji,j->i":
        A = A.T.copy()
    if sub in ("ij,jk->ik",):
        B = np.where(rng.random((m, 2)) < 0.5, rng.integers(-3, 4, (m, 2)), 0).astype(dtype)
    elif sub == "ij,ij->ij":
        B = np.where(rng.random((n, m)) < 0.5, rng.integers(-3, 4, (n, m)), 0).astype(dtype)
    else:
        B = rng.integers(-3, 4, A.shape[1] if sub == "ij,j->i" else A.shape[0]).astype(dtype)
    a, fa = operand(A, fmt)
    b, fb = operand(B, fmt) if B.ndim == 2 else (B, None)
    want, has = oracle(sub, add, mul, [a, b], dtype)
    got = sc.einsum(sub, a, b, semiring=semiring, formats=(fa, fb))
    if got.dtype == np.bool_:
        want = np.vectorize(bool, otypes=[object])(want)      # bool + bool is or
    if hasattr(got, "toarray"):                    # a sparse result: entries with no term unstored
        gd, gm = stored(got)
        assert not (gm & ~has).any(), f"stored where no term: {np.argwhere(gm & ~has)}"
        got = np.where(has, gd, 0)
        want = np.where(has, want, 0)
    want = np.asarray(want.tolist(), dtype=np.asarray(got).dtype) if np.asarray(got).dtype != object else want
    np.testing.assert_allclose(np.asarray(got, dtype=float), np.asarray(want, dtype=float),
                               err_msg=f"{semiring} {fmt} {np.dtype(dtype).name} {sub}")


def cases(n, seed):
    from sparsecc.semiring import NAMED
    allc = list(itertools.product(sorted(NAMED), FORMATS, DTYPES, SUBS))
    rng = np.random.default_rng(seed)
    return [allc[k] for k in rng.choice(len(allc), size=min(n, len(allc)), replace=False)]


if __name__ == "__main__":
    n, seed = int(sys.argv[1]), int(sys.argv[2])
    for c in cases(n, seed):
        try:
            check(*c, seed=seed)
            print("OK", *c, flush=True)
        except sc.SparseccError as e:
            print("ERR", *c, type(e).__name__, str(e).splitlines()[0][:160], flush=True)
        except AssertionError as e:
            print("WRONG", *c, str(e).replace("\n", " ")[:300], flush=True)
