"""No kernel allocates in proportion to a dimension when its work is proportional to the
stored entries (docs/sparse-results.md, "Memory").

Each case runs on operands with a dimension of 2**31 - 1 and two stored entries, whose own
storage and whose result's storage are O(stored entries), in a process whose address space
is limited to what it uses before the calls plus 512 MiB: a temporary sized by the huge
dimension (a j-major copy of a CSR operand has 2**31 positions, 8.6 GB) cannot fit.  The
compile worker starts before the limit (it compiles in its own, unlimited process).  The
oracle is the operands' entries, moved and multiplied by hand (no sparsecc code)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(r"""
import json, resource, sys
import numpy as np, scipy.sparse as sp, sparsecc as sc

N = 2**31 - 1
CASES = json.loads(sys.argv[1])

def operand(kind, shape, entries):
    crd = np.array([c for c, _ in entries], dtype=np.int64).T
    vals = np.array([v for _, v in entries])
    coo = sp.coo_array((vals, tuple(crd)), shape=shape)
    if kind == "csr":      # built from buffers: SciPy's tocsr() would be fine too, this is explicit
        order = np.lexsort((crd[1], crd[0]))
        indptr = np.searchsorted(crd[0][order], np.arange(shape[0] + 1)).astype(np.int32)
        return sp.csr_array((vals[order], crd[1][order].astype(np.int32), indptr), shape=shape)
    if kind == "csc":
        order = np.lexsort((crd[0], crd[1]))
        indptr = np.searchsorted(crd[1][order], np.arange(shape[1] + 1)).astype(np.int32)
        return sp.csc_array((vals[order], crd[0][order].astype(np.int32), indptr), shape=shape)
    return coo

def entries_of(R):
    R = R.tocoo() if R.format != "coo" else R
    got = {}
    for k in range(R.nnz):
        c = tuple(int(x[k]) for x in R.coords)
        got[str(list(c))] = got.get(str(list(c)), 0.0) + float(R.data[k])
    return got

# start the compile worker (an unlimited process) and load NumPy/SciPy's code first
small = sp.csr_array(np.ones((2, 3)))
assert np.allclose(sc.einsum("ij->ji", small, out_format="coo").toarray(), np.ones((3, 2)))
with open("/proc/self/status") as f:
    vm = [int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize")][0]
resource.setrlimit(resource.RLIMIT_AS, (vm + (512 << 20), resource.RLIM_INFINITY))

out = {}
for case in CASES:
    name = case["name"]
    try:
        ops = []
        fmts = [o[3] if len(o) > 3 else None for o in case["operands"]]
        for kind, shape, ents, *_ in case["operands"]:
            shape = tuple({"N": N, "W": 2**31}.get(s, s) for s in shape)   # W: 64-bit indices
            ents = [([N - 1 if c == "N-1" else c for c in crd], v) for crd, v in ents]
            ops.append(operand(kind, shape, ents))
        before = [(x.data.copy(), x.shape) for x in ops]
        R = sc.einsum(case["expr"], *ops, formats=fmts, out_format=case["out"])
        for x, (d, s) in zip(ops, before):
            assert x.shape == s and np.array_equal(x.data, d), "an operand was modified"
        out[name] = {"shape": [int(s) for s in R.shape], "format": R.format, "entries": entries_of(R)}
    except MemoryError as err:
        out[name] = {"error": f"MemoryError: {err}"}
    except Exception as err:
        out[name] = {"error": f"{type(err).__name__}: {err}"}
print("RESULT " + json.dumps(out))
""")

N = 2**31 - 1
E2 = [([0, 5], 1.5), ([1, "N-1"], -2.0)]                 # entries of a (2, N) operand
E2T = [([5, 0], 1.5), (["N-1", 1], -2.0)]                # of a (N, 2) operand
E3 = [([0, 2, 7], 3.0), ([1, 0, "N-1"], 4.0)]            # of a (2, 3, N) operand
DCC = "(d0, d1, d2) -> (d0 : dense, d1 : compressed, d2 : compressed)"


def _permute(entries, perm):
    return {tuple(crd[p] for p in perm): v for crd, v in entries}


def _num(c):
    return N - 1 if c == "N-1" else c


def _plain(entries):
    return [(tuple(_num(c) for c in crd), v) for crd, v in entries]


# name: expression, operands (kind, shape, entries), out_format, expected shape, expected entries
CASES = {
    "csr-T-coo": ("ij->ji", [("csr", [2, "N"], E2)], "coo", (N, 2), _permute(_plain(E2), (1, 0))),
    "csr-T-csc": ("ij->ji", [("csr", [2, "N"], E2)], "csc", (N, 2), _permute(_plain(E2), (1, 0))),
    "csr-T-dcsc": ("ij->ji", [("csr", [2, "N"], E2)], "dcsc", (N, 2), _permute(_plain(E2), (1, 0))),
    "csc-T-coo": ("ij->ji", [("csc", ["N", 2], E2T)], "coo", (2, N), _permute(_plain(E2T), (1, 0))),
    "csc-T-csr": ("ij->ji", [("csc", ["N", 2], E2T)], "csr", (2, N), _permute(_plain(E2T), (1, 0))),
    "coo-T-coo": ("ij->ji", [("coo", [2, "N"], E2)], "coo", (N, 2), _permute(_plain(E2), (1, 0))),
    "coo-T-csc": ("ij->ji", [("coo", [2, "N"], E2)], "csc", (N, 2), _permute(_plain(E2), (1, 0))),
    "cooT-T-csr": ("ij->ji", [("coo", ["N", 2], E2T)], "csr", (2, N), _permute(_plain(E2T), (1, 0))),
    "csr-as-dcsr-T-coo": ("ij->ji", [("csr", [2, "N"], E2, "dcsr")], "coo", (N, 2), _permute(_plain(E2), (1, 0))),
    "cooT-id-csc": ("ij->ij", [("coo", ["N", 2], E2T)], "csc", (N, 2), _permute(_plain(E2T), (0, 1))),
    "csc-id-coo": ("ij->ij", [("csc", ["N", 2], E2T)], "coo", (N, 2), _permute(_plain(E2T), (0, 1))),
    "csr*cooT": ("ij,ji->ij", [("csr", [2, "N"], E2), ("coo", ["N", 2], E2T)], "coo", (2, N),
                 {(0, 5): 1.5 * 1.5, (1, N - 1): 4.0}),
    "cooT*csr->ji": ("ji,ij->ij", [("coo", ["N", 2], E2T), ("csr", [2, "N"], E2)], "coo", (2, N),
                     {(0, 5): 1.5 * 1.5, (1, N - 1): 4.0}),
    "coo3-kji": ("ijk->kji", [("coo", [2, 3, "N"], E3)], "coo", (N, 3, 2), _permute(_plain(E3), (2, 1, 0))),
    "dcc3-kji-csf": ("ijk->kji", [("coo", [2, 3, "N"], E3, DCC)], "csf", (N, 3, 2),
                     _permute(_plain(E3), (2, 1, 0))),
    "coo3-kij": ("ijk->kij", [("coo", [2, 3, "N"], E3)], "coo", (N, 2, 3), _permute(_plain(E3), (2, 0, 1))),
    # a dimension of 2**31: 64-bit indices (this wrote to address 0 once)
    "wide-csr-T-coo": ("ij->ji", [("csr", [2, "W"], E2)], "coo", (2**31, 2), _permute(_plain(E2), (1, 0))),
    "wide-cooT-T-csr": ("ij->ji", [("coo", ["W", 2], E2T)], "csr", (2, 2**31), _permute(_plain(E2T), (1, 0))),
    "wide-coo3-kji": ("ijk->kji", [("coo", [2, 3, "W"], E3)], "coo", (2**31, 3, 2), _permute(_plain(E3), (2, 1, 0))),
    # SpGEMM (2, N) x (N, 2): the expansion workspace is a row of the result (2 entries)
    "spgemm": ("ik,kj->ij", [("csr", [2, "N"], E2), ("coo", ["N", 2], E2T)], "csr", (2, 2),
               {(0, 0): 1.5 * 1.5, (1, 1): 4.0}),
    "spgemm-csc": ("ik,kj->ij", [("csr", [2, "N"], E2), ("csc", ["N", 2], E2T)], "csc", (2, 2),
                   {(0, 0): 1.5 * 1.5, (1, 1): 4.0}),
    # a tall product into CSC: built row-wise first (positions per row would be O(N))
    "spgemm-tall-csc": ("ik,kj->ij", [("coo", ["N", 2], E2T), ("csr", [2, 2], [([0, 1], 2.0), ([1, 0], 3.0)])],
                        "csc", (N, 2), {(5, 1): 3.0, (N - 1, 0): -6.0}),
    "sum-rows-coo": ("ij->j", [("csr", [2, "N"], E2)], "coo", (N,), {(5,): 1.5, (N - 1,): -2.0}),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    cases = [{"name": k, "expr": e, "operands": ops, "out": out} for k, (e, ops, out, _, _) in CASES.items()]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))     # this checkout's sparsecc
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([root] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
               SPARSECC_CACHE_DIR=os.environ.get("SPARSECC_CACHE_DIR")
               or str(tmp_path_factory.mktemp("cache")))
    r = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(cases)], capture_output=True, text=True,
                       env=env, timeout=900)
    assert r.returncode == 0, (r.returncode, r.stdout[-3000:], r.stderr[-3000:])   # a signal fails
    line = [l for l in r.stdout.splitlines() if l.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


@pytest.mark.parametrize("name", list(CASES))
def test_work_in_stored_entries_needs_no_dimension_sized_memory(results, name):
    expr, _, out, shape, expected = CASES[name]
    got = results[name]
    assert "error" not in got, got["error"]
    assert tuple(got["shape"]) == shape
    assert got["format"] == {"dcsr": "csr", "dcsc": "csc", "csf": "coo"}.get(out, out)
    assert got["entries"] == {str(list(c)): v for c, v in expected.items()}


def test_ordinary_shapes_keep_the_direct_plan():
    """The sort-inside-the-kernel form is only for calls with a huge dimension: for ordinary
    shapes the direct form measured faster and stays (the same kernel as before)."""
    import numpy as np
    import scipy.sparse as sp
    import sparsecc as sc
    from sparsecc.formats import Format
    from sparsecc.runtime import specialization

    A = sp.random_array((30, 40), density=0.1, format="csr", random_state=3)
    k = sc.compile("ij->ji", "csr", out_format="coo")
    R = k(A)
    assert np.array_equal(R.toarray(), A.toarray().T)
    assert "#encvia" not in k.ir("mlir")
    assert not specialization.huge_dimension([30, 40], [A.nnz])
    assert specialization.huge_dimension([2, N], [2])
    # an ordinary call reads the operand in the result's order (SciPy's O(nnz) transpose,
    # operand_orders._result_order_reads); a huge call of the same kernel reads it as it is
    # and is planned in the operand's order, sorted in the kernel
    stmt, (f,), out = k.stmt, k.last_specialization().formats, k.last_specialization().out_format
    assert f.order == (1, 0)
    f = Format.csr().with_widths(f.pos_width, f.crd_width)
    (split, via), *_ = specialization._attempts(stmt, (f,), out, True)
    assert via is not None and via.order == (1, 0) and not split
    assert specialization._attempts(stmt, (f,), out)[0] == (False, None)


EDGE = [  # input format, expression, out_format, stored entries, dtype
    ("csr", "ij->ji", "coo", 0, "float64"), ("csr", "ij->ji", "coo", 1, "float32"),
    ("csr", "ij->ji", "coo", 20, "complex128"), ("csr", "ij->ji", "csr", 20, "int64"),
    ("csr", "ij->ij", "csc", 1, "float64"), ("csr", "ij->j", "coo", 20, "float32"),
    ("csr", "ij->j", "coo", 0, "float64"),
    ("csc", "ij->ij", "coo", 20, "float64"), ("csc", "ij->ij", "csr", 0, "complex128"),
    ("csc", "ij->ji", "csc", 1, "int64"), ("csc", "ij->i", "coo", 20, "float64"),
    ("coo", "ij->ji", "csr", 20, "float64"), ("coo", "ij->ji", "coo", 0, "int64"),
    ("coo", "ij->ij", "csc", 1, "complex128"),
]


@pytest.mark.parametrize("fmt,expr,out,nnz,dtype", EDGE)
def test_huge_dimension_plans_match_scipy(fmt, expr, out, nnz, dtype):
    """The plans of the huge-dimension class (a dimension more than 4x the stored entries +
    65536, here 300000 with up to 20 entries: small enough for any plan to fit in memory)
    give SciPy's answer, empty and single-entry operands included."""
    import numpy as np
    import scipy.sparse as sp
    import sparsecc as sc
    from sparsecc.runtime import specialization

    rng = np.random.default_rng(nnz + len(expr))
    shape = (300_000, 3) if fmt == "csc" else (3, 300_000)
    flat = rng.choice(shape[0] * shape[1], nnz, replace=False)
    vals = rng.integers(1, 9, nnz).astype(dtype)
    if np.dtype(dtype).kind == "c":
        vals = vals + 1j * rng.integers(1, 9, nnz)
    A = sp.coo_array((vals, np.unravel_index(flat, shape)), shape=shape).asformat(fmt)
    assert specialization.huge_dimension(list(shape), [nnz])
    keep = A.copy()
    k = sc.compile(expr, fmt, out_format=out)
    R = k(A)
    if (fmt, expr, out) == ("csr", "ij->ji", "coo"):
        assert "#encvia" in k.ir("mlir")          # built in A's order, sorted in the kernel
    D = A.toarray()
    ref = {"ij->ji": D.T, "ij->ij": D, "ij->j": D.sum(axis=0), "ij->i": D.sum(axis=1)}[expr]
    assert R.format == out and R.shape == ref.shape and R.dtype == ref.dtype
    assert np.array_equal(R.toarray(), ref)
    # the stored pattern: the entries (sums: the lines that store something; no value cancels)
    assert R.nnz == np.count_nonzero(ref)
    assert (A != keep).nnz == 0 and A.format == keep.format
