"""A randomized differential test against NumPy: random index-notation statements and
einsums over every storage format (CSR, CSC, COO, DCSR, DCSC, BSR, dense), float64 / int64 /
bool operands with an empty row and stored zeros, compared with NumPy on dense copies.

The references share no code with sparsecc: NumPy's own functions on dense copies for value
semantics (``//``, ``pow``, comparisons, ``min``/``max``, ``where``, ``sum``, einsum), and for
monoid reductions and semirings the stored-entry rule written out here (an absent entry does
not take part; an empty reduction gives the identity in a dense result).

Cases run in batches in a child process (``python tests/test_differential.py <seed> <first>
<count>``), so a kernel that dies of a signal (integer ``//`` by zero: SIGFPE) fails that one
case instead of killing pytest; the batch goes on after it.

Cases are seeded (``SPARSECC_DIFF_SEED``, default 0).  CI runs ``CI_CASES`` of them, one test
per case (known bugs are strict xfails, so each flags once fixed).  The long run::

    SPARSECC_DIFF_CASES=2000 python -m pytest -m slow tests/test_differential.py

draws that many cases and fails listing every case that disagrees with NumPy and is not a
known bug (see ``known_bug``).  ``//`` and ``%`` (NumPy's floor_divide and remainder) include zero divisors.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass

import numpy as np
import pytest
import scipy.sparse as sp

SEED = int(os.environ.get("SPARSECC_DIFF_SEED", "0"))
CI_CASES = 48
LONG_CASES = int(os.environ.get("SPARSECC_DIFF_CASES", "2000"))
FORMATS = ["csr", "csc", "coo", "dcsr", "dcsc", "bsr2x2", "dense"]
M, N = 6, 4                 # BSR 2x2 tiles it; row EMPTY of every sparse operand stores nothing
EMPTY = 1


# ------------------------------------------------------------------------------- cases
@dataclass(frozen=True)
class Case:
    k: int
    template: str
    fmt_a: str
    fmt_b: str
    dtype: str
    const: str              # a constant or semiring name the template uses
    seed: int

    @property
    def id(self) -> str:
        return f"{self.k:04d}-{self.template}-{self.fmt_a}-{self.fmt_b}-{self.dtype}-{self.const}"


#: template -> (dtypes, constants); each is written out in _statement and _reference
TEMPLATES = {
    "floordiv_scalar": (["int64", "float64"], ["2", "-3", "0", "s", "inf"]),  # A // c (A holds +-inf)
    "floordiv_stored": (["int64", "float64"], [""]),                       # stored(A // B)
    "pow": (["float64", "int64"], ["2", "3"]),
    "compare": (["float64", "int64", "bool"], ["<", "<=", ">", ">=", "==", "!="]),
    "minmax": (["float64", "int64"], ["min", "max"]),                      # min(A, B)
    "minmax_row": (["float64", "int64"], ["min", "max"]),                  # max(A[i,j], x[j])
    "where": (["float64", "int64"], [""]),
    "sum_spmv": (["float64", "int64", "bool"], [""]),
    "monoid_rows": (["float64", "int64", "bool"], ["plus", "times", "min", "max", "lor", "land"]),
    "monoid_cols": (["float64", "int64", "bool"], ["plus", "times", "min", "max", "lor", "land"]),
    "einsum": (["float64", "int64", "bool"], ["ij,ij->ij", "ij,ij->", "ij->j", "ij,kj->ik", "ji->ij"]),
    "semiring_spmv": (["float64", "int64"], ["plus_times", "min_plus", "max_plus", "min_times", "max_min",
                                             "min_max"]),
    "semiring_spmv_bool": (["bool"], ["lor_land", "land_lor"]),
    "semiring_ewise": (["float64"], ["min_plus", "max_times", "plus_times"]),   # ij,ij->ij
    "semiring_spgemm": (["float64"], ["min_plus", "max_plus", "plus_pair"]),      # ik,jk->ij
    "mod_scalar": (["int64", "float64"], ["2", "-3", "0", "s", "inf"]),       # A % c
    "mod_stored": (["int64", "float64"], [""]),                            # stored(A % B)
}
#: the division templates' operator and NumPy's function
_DIVISIONS = {"floordiv": ("//", np.floor_divide), "mod": ("%", np.remainder)}
BOOL_MONOIDS = ("lor", "land")


def cases(n: int, seed: int = SEED) -> list[Case]:
    """``n`` cases drawn by ``seed``: templates in turn, formats and dtypes at random."""
    rng = np.random.default_rng(seed)
    names = list(TEMPLATES)
    out = []
    for k in range(n):
        t = names[k % len(names)]
        dtypes, consts = TEMPLATES[t]
        dtype = str(rng.choice(dtypes))
        const = str(rng.choice(consts))
        if t in ("floordiv_scalar", "mod_scalar") and dtype == "int64" and const == "inf":
            const = "-3"
        if t in ("monoid_rows", "monoid_cols") and dtype == "bool" and const not in BOOL_MONOIDS:
            const = str(rng.choice(BOOL_MONOIDS))
        out.append(Case(k, t, str(rng.choice(FORMATS)), str(rng.choice(FORMATS)), dtype, const,
                        int(rng.integers(2**31))))
    return out


# ---------------------------------------------------------------------------- operands
def _values(size, dtype, rng):
    if dtype == "bool":
        return rng.random(size) < 0.6
    v = rng.integers(-3, 4, size=size)                  # zeros included: stored zeros
    if dtype == "float64":
        v = v + rng.choice([0.0, 0.5, 0.25], size=size)
    return v.astype(dtype)


def _operand(fmt, dtype, shape, rng, empty=True, special=False):
    """(object to pass, dense copy, stored mask); ``special``: +-inf among float values."""
    mask = rng.random(shape) < 0.45
    vals = _values(shape, dtype, rng)
    if special and dtype == "float64":
        vals[0, :2] = [np.inf, -7.0]
        vals[2, :2] = [-np.inf, 7.5]
        mask[0, :2] = mask[2, :2] = True
    if fmt == "dense":
        return vals, vals, np.ones(shape, bool)
    if empty:
        mask[EMPTY] = False
    r, c = np.nonzero(mask)
    coo = sp.coo_array((vals[r, c], (r, c)), shape=shape)
    if fmt in ("csr", "dcsr"):
        x = sp.csr_array(coo)
    elif fmt in ("csc", "dcsc"):
        x = sp.csc_array(coo)
    elif fmt.startswith("bsr"):
        x = sp.bsr_array(sp.csr_array(coo), blocksize=(2, 2))
    else:
        x = coo
    stored = sp.coo_array(x)                           # BSR: whole blocks, zeros included
    have = np.zeros(shape, bool)
    have[tuple(stored.coords)] = True
    return x, stored.toarray(), have


IDENT = {"plus": lambda t: 0, "times": lambda t: 1, "lor": lambda t: False, "land": lambda t: True,
         "min": lambda t: np.inf if t.kind == "f" else True if t.kind == "b" else np.iinfo(t).max,
         "max": lambda t: -np.inf if t.kind == "f" else False if t.kind == "b" else np.iinfo(t).min}
ADD = {"plus": lambda a, b: a + b if not isinstance(a, (bool, np.bool_)) else a or b,
       "times": lambda a, b: a * b if not isinstance(a, (bool, np.bool_)) else a and b,
       "min": min, "max": max, "lor": lambda a, b: bool(a or b), "land": lambda a, b: bool(a and b)}
MUL = {"times": lambda a, b: a * b, "plus": lambda a, b: a + b, "min": min, "max": max, "pair": lambda a, b: 1,
       "land": lambda a, b: bool(a and b), "lor": lambda a, b: bool(a or b)}


def _reduce(op, vals, dtype):
    """``op`` over the listed stored values, the identity when there are none (written out)."""
    dtype = np.dtype(bool) if op in BOOL_MONOIDS else np.dtype(dtype)
    acc = None
    for v in vals:
        v = bool(v) if dtype.kind == "b" else v.item() if hasattr(v, "item") else v
        acc = v if acc is None else ADD[op](acc, v)
    return IDENT[op](dtype) if acc is None else acc


# ------------------------------------------------------------------ statement and reference
def data(case: Case):
    """The operands of ``case``: (A, Ad, Am), (B, Bd, Bm), x."""
    rng = np.random.default_rng(case.seed)
    special = case.template.startswith("floordiv")
    a = _operand(case.fmt_a, case.dtype, (M, N), rng, special=special)
    b = _operand(case.fmt_b, case.dtype, (M, N), rng, special=special)
    return a, b, _values(N, case.dtype, rng)


def build(case: Case):
    """(callable running sparsecc, callable giving the NumPy reference)."""
    import sparsecc as sc
    dt = case.dtype
    (A, Ad, Am), (B, Bd, Bm), x = data(case)
    t, c = case.template, case.const
    fa, fb = case.fmt_a, case.fmt_b

    def ev(stmt, **ops):
        fmts = {"A": fa, "B": fb}
        return lambda: sc.evaluate(stmt, formats={k: v for k, v in fmts.items() if k in ops}, **ops)

    if t in ("floordiv_scalar", "mod_scalar"):
        op, fn = _DIVISIONS[t.split("_")[0]]
        if c in ("s", "inf"):               # a zero 0-d operand; inf (the DSL has no inf literal)
            s = np.asarray(0 if c == "s" else np.inf, dt)
            return ev(f"C[i,j] = A[i,j] {op} s", A=A, s=s), lambda: fn(Ad, s)
        return ev(f"C[i,j] = A[i,j] {op} {c}", A=A), lambda: fn(Ad, np.asarray(float(c), dt))
    if t in ("floordiv_stored", "mod_stored"):
        op, fn = _DIVISIONS[t.split("_")[0]]

        def ref():
            out = np.zeros((M, N), np.result_type(Ad, Bd))
            both = Am & Bm
            out[both] = fn(Ad[both], Bd[both])
            return out
        return ev(f"C[i,j] = stored(A[i,j] {op} B[i,j])", A=A, B=B), ref
    if t == "pow":
        return ev(f"C[i,j] = pow(A[i,j], {c})", A=A), lambda: np.power(Ad, np.asarray(int(c), dt))
    if t == "compare":
        fn = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
              "==": np.equal, "!=": np.not_equal}[c]
        return ev(f"C[i,j] = A[i,j] {c} B[i,j]", A=A, B=B), lambda: fn(Ad, Bd)
    if t == "minmax":
        fn = np.minimum if c == "min" else np.maximum
        return ev(f"C[i,j] = {c}(A[i,j], B[i,j])", A=A, B=B), lambda: fn(Ad, Bd)
    if t == "minmax_row":
        fn = np.minimum if c == "min" else np.maximum
        return ev(f"C[i,j] = {c}(A[i,j], x[j])", A=A, x=x), lambda: fn(Ad, x[None, :])
    if t == "where":
        return ev("C[i,j] = where(A[i,j] > 0, A[i,j], B[i,j])", A=A, B=B), lambda: np.where(Ad > 0, Ad, Bd)
    if t == "sum_spmv":
        return ev("y[i] = sum[j](A[i,j] * x[j])", A=A, x=x), lambda: np.einsum("ij,j->i", Ad, x)
    if t in ("monoid_rows", "monoid_cols"):
        rows = t == "monoid_rows"
        stmt = f"y[i] = {c}[j](A[i,j])" if rows else f"y[j] = {c}[i](A[i,j])"

        def ref():
            dtype = bool if c in BOOL_MONOIDS else dt
            if rows:
                return np.array([_reduce(c, Ad[i][Am[i]], dt) for i in range(M)], dtype)
            return np.array([_reduce(c, Ad[:, j][Am[:, j]], dt) for j in range(N)], dtype)
        return ev(stmt, A=A), ref
    if t == "einsum":
        ops = {"ij,ij->ij": (A, B), "ij,ij->": (A, B), "ij->j": (A,), "ij,kj->ik": (A, B), "ji->ij": (A,)}[c]
        dense = {"ij,ij->ij": (Ad, Bd), "ij,ij->": (Ad, Bd), "ij->j": (Ad,), "ij,kj->ik": (Ad, Bd),
                 "ji->ij": (Ad,)}[c]
        fmts = [fa, fb][:len(ops)]
        return (lambda: sc.einsum(c, *ops, formats=fmts)), lambda: np.einsum(c, *dense)
    if t.startswith("semiring"):
        add, mul = c.split("_")

        def loops(pairs, shape, dtype):
            """out[p] = add over the (a, b) pairs both stored at p; identity where none."""
            out = np.empty(shape, dtype)
            for p in np.ndindex(*shape):
                out[p] = _reduce(add, [MUL[mul](a.item(), b.item()) for a, b in pairs(p)], dtype)
            return out
        rdt = np.dtype(np.int64) if mul == "pair" else np.dtype(bool) if add in BOOL_MONOIDS else np.dtype(dt)
        if t in ("semiring_spmv", "semiring_spmv_bool"):
            run = lambda: sc.einsum("ij,j->i", A, x, formats=[fa, "dense"], semiring=c)  # noqa: E731
            return run, lambda: loops(lambda p: [(Ad[p[0], j], x[j]) for j in range(N) if Am[p[0], j]], (M,), rdt)
        if t == "semiring_ewise" and not c.startswith("plus"):
            run = lambda: sc.einsum("ij,ij->ij", A, B, formats=[fa, fb], semiring=c, out_format="dense")  # noqa: E731
            return run, lambda: loops(lambda p: [(Ad[p], Bd[p])] if Am[p] and Bm[p] else [], (M, N), rdt)
        run = lambda: sc.einsum("ik,jk->ij", A, B, formats=[fa, fb], semiring=c, out_format="dense")  # noqa: E731
        return run, lambda: loops(lambda p: [(Ad[p[0], k], Bd[p[1], k]) for k in range(N)
                                             if Am[p[0], k] and Bm[p[1], k]], (M, M), rdt)
    raise AssertionError(t)


def compare(got, want) -> str | None:
    """None when ``got`` (sparse or dense) equals ``want`` (values and dtype), else why not."""
    got = got.toarray() if sp.issparse(got) else np.asarray(got)
    want = np.asarray(want)
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} != {want.dtype}"
    if want.dtype.kind == "f":
        ok = np.isclose(got, want, rtol=1e-12, atol=0, equal_nan=True) | (got == want)
    else:
        ok = got == want
    if ok.all():
        return None
    bad = np.argwhere(~ok)[:4].tolist()
    return f"at {bad}: got {[got[tuple(b)].item() for b in bad]}, want {[want[tuple(b)].item() for b in bad]}"


# ------------------------------------------------------------------------- known bugs
#: ``(predicate on a Case, reason)`` for each bug known and not fixed yet: exactly its cases
#: become strict xfails, so the fix flags them.  Empty: every bug the first runs found (integer
#: // by zero, float // at inf, integer pow, sparse + broadcast dense vector, BSR next to dense,
#: BSR monoids, land over non-bool operands, semiring identity without contraction) is fixed.
KNOWN_BUGS: list[tuple] = []


def known_bug(case: Case) -> str | None:
    """The known, unfixed bug that ``case`` hits, or None."""
    for hits, why in KNOWN_BUGS:
        if hits(case):
            return why
    return None


# ------------------------------------------------------------------------- the child
def run_one(case: Case) -> dict:
    import sparsecc as sc
    try:
        run, ref = build(case)
        with np.errstate(all="ignore"):
            want = ref()
        got = run()
    except sc.SparseccError as err:
        return {"status": "error", "why": f"{type(err).__name__}: {str(err)[:300]}"}
    why = compare(got, want)
    return {"status": "ok"} if why is None else {"status": "mismatch", "why": why}


def _child(seed: int, first: int, count: int, n: int) -> None:
    for case in cases(n, seed)[first:first + count]:
        print(json.dumps({"start": case.k}), flush=True)
        print(json.dumps({"k": case.k, **run_one(case)}), flush=True)


def run_batch(n: int, seed: int = SEED, timeout: float = 600) -> dict[int, dict]:
    """Results of cases 0..n-1 by case number, run in child processes; a child killed by a
    signal marks the case it was running and a new child goes on from the next one."""
    results: dict[int, dict] = {}
    first = 0
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    while first < n:
        p = subprocess.run([sys.executable, os.path.abspath(__file__), str(seed), str(first), str(n - first), str(n)],
                           capture_output=True, text=True, timeout=timeout, env=env, cwd=root)
        started = None
        for line in p.stdout.splitlines():
            msg = json.loads(line)
            if "start" in msg:
                started = msg["start"]
            else:
                results[msg["k"]] = msg
                started = None
        if p.returncode == 0 and started is None:
            break
        if started is None:                 # died between cases or before the first one
            raise AssertionError(f"child failed (status {p.returncode}):\n{p.stderr[-2000:]}")
        results[started] = {"k": started, "status": "signal" if p.returncode < 0 else "died",
                            "why": f"child exit status {p.returncode}: {p.stderr.strip()[-300:]}"}
        first = started + 1
    return results


# ------------------------------------------------------------------------- the tests
_CI = cases(CI_CASES)


@pytest.fixture(scope="module")
def ci_results():
    return run_batch(CI_CASES)


def _param(case: Case):
    why = known_bug(case)
    return pytest.param(case, id=case.id, marks=pytest.mark.xfail(strict=True, reason=why) if why else ())


@pytest.mark.parametrize("case", [_param(c) for c in _CI])
def test_matches_numpy(case, ci_results):
    r = ci_results[case.k]
    assert r["status"] == "ok", f"{case}: {r['status']}: {r.get('why')}"


def test_cases_cover_every_format_template_and_dtype():
    assert {c.fmt_a for c in _CI} == set(FORMATS) and {c.fmt_b for c in _CI} == set(FORMATS)
    assert {c.template for c in _CI} == set(TEMPLATES)
    assert {c.dtype for c in _CI} == {"float64", "int64", "bool"}


@pytest.mark.slow
def test_long_run_matches_numpy():
    """SPARSECC_DIFF_CASES cases (2000 by default): every case that is not a known bug."""
    results = run_batch(LONG_CASES, timeout=6 * 3600)
    bad = [f"{c.id}: {results[c.k]['status']}: {results[c.k].get('why')}" for c in cases(LONG_CASES)
           if results[c.k]["status"] != "ok" and not known_bug(c)]
    fixed = [c.id for c in cases(LONG_CASES) if known_bug(c) and results[c.k]["status"] == "ok"]
    if fixed:
        print(f"{len(fixed)} cases of known bugs now pass (update known_bug): {fixed[:20]}")
    assert not bad, f"{len(bad)} cases disagree with NumPy:\n" + "\n".join(bad[:50])


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    _child(*(int(a) for a in sys.argv[1:5]))
