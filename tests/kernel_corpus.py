"""The hand-written kernels' golden corpus: specializations routed to ``sparsecc/dialect/kernels/``
and the SHA-256 of the MLIR text each emits (parallel and serial), for given target facts.

``tests/data/kernel_corpus.json`` maps each case (its text: the statement, the operands' formats and
dtypes, the result format) to ``{"kind": ..., "parallel": sha, "serial": sha}``, emitted with the
facts of an x86-64 Linux machine (:data:`FACTS`).  ``tests/test_kernel_corpus.py`` compares, so a
change to any hand-written kernel's MLIR (and with it its disk-cache key) shows up.

Regenerate, from the repository root, after an intended change: ``python tests/kernel_corpus.py``
(review the diff: only the kernels you meant to change should move).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if __name__ == "__main__":     # this checkout's sparsecc, not an installed one
    sys.path.insert(0, str(HERE.parent))
CORPUS = HERE / "data" / "kernel_corpus.json"
#: the target facts the corpus is emitted with (an x86-64 Linux machine: non-temporal stores, huge pages)
FACTS = {"arch": "x86_64", "system": "linux"}

_CSR = [("csr", 32, 32), ("csr", 64, 64), ("csr", 32, 64), ("csr", 64, 32)]


def _cases() -> list[tuple]:
    """``(source, text, formats, dtypes, out)``: ``source`` "einsum" or "notation"; each format
    ``(preset, pos_width, crd_width)`` (``("dense", rank)`` for a dense operand); ``out`` likewise
    or None (a dense result)."""
    cases = []
    d2 = ("dense", 2)
    # SpGEMM: both operand orders, renamed indices, index widths, dtypes
    for expr in ("ik,kj->ij", "kj,ik->ij", "ij,jk->ik"):
        for dtype in ("float64", "float32", "int64", "int32", "complex128", "complex64"):
            cases.append(("einsum", expr, (_CSR[0], _CSR[0]), (dtype,) * 2, _CSR[0]))
    for fa, fb, fo in itertools.product(_CSR, _CSR[:2], _CSR[1:3]):
        cases.append(("einsum", "ik,kj->ij", (fa, fb), ("float64",) * 2, fo))
    # SpGEMM with A read transposed (A^T B: transposed in the kernel) and constant factors (the Hessian's)
    for expr in ("ik,ij->kj", "ij,ik->kj"):
        for dtype in ("float64", "int32", "complex128"):
            cases.append(("einsum", expr, (_CSR[0], _CSR[0]), (dtype,) * 2, _CSR[0]))
    for text in ("C[k,j] = sum[i](A[i,k] * (2 * B[i,j]))", "C[i,j] = sum[k](2.5 * A[i,k] * B[k,j])"):
        for dtype in ("float64", "int64", "complex128"):
            if dtype == "int64" and "2.5" in text:
                continue
            cases.append(("notation", text, (_CSR[0], _CSR[1]), (dtype,) * 2, _CSR[0]))
    # the masked sum ij,jk,ik-> (triangle counting): operand orders, widths, dtypes
    for expr in ("ij,jk,ik->", "ik,ij,jk->"):
        for dtype in ("float64", "int64", "int32", "complex128"):
            cases.append(("einsum", expr, (_CSR[0],) * 3, (dtype,) * 3, None))
    cases.append(("einsum", "ij,jk,ik->", (_CSR[1], _CSR[2], _CSR[3]), ("float64",) * 3, None))
    # the masked product M[i,j] * sum[k](A[i,k] * B[k,j]): einsum (the flat form) and notation (M outside
    # the sum), operand orders, widths, dtypes, a constant factor, A stored CSC and read transposed
    for expr in ("ij,ik,kj->ij", "kj,ij,ik->ij"):
        for dtype in ("float64", "float32", "int64", "int32", "complex128"):
            cases.append(("einsum", expr, (_CSR[0],) * 3, (dtype,) * 3, _CSR[0]))
    for fm, fa, fb, fo in ((_CSR[1], _CSR[2], _CSR[3], _CSR[1]), (_CSR[3], _CSR[1], _CSR[0], _CSR[2])):
        cases.append(("einsum", "ij,ik,kj->ij", (fm, fa, fb), ("float64",) * 3, fo))
    cases.append(("einsum", "ij,ki,kj->ij", (_CSR[0], ("csc", 32, 32), _CSR[0]), ("float64",) * 3, _CSR[0]))
    for text in ("C[i,j] = M[i,j] * sum[k](A[i,k] * B[k,j])", "C[i,j] = sum[k](2 * B[k,j] * A[i,k]) * M[i,j]"):
        for dtype in ("float64", "int64", "complex128"):
            cases.append(("notation", text, (_CSR[0],) * 3, (dtype,) * 3, _CSR[0]))
    # SDDMM: einsum (three factors) and notation (A outside the sum), transposed X / Y, operand orders
    sddmm = ["ij,ik,jk->ij", "ij,ki,jk->ij", "ij,ik,kj->ij", "ij,ki,kj->ij", "ik,ij,jk->ij", "jk,ik,ij->ij"]
    for expr in sddmm:
        dense_at = [n for n, s in enumerate(expr.split("->")[0].split(",")) if s != "ij"]
        fmts = tuple(d2 if n in dense_at else _CSR[0] for n in range(3))
        for dtype in ("float64", "float32", "int64", "int32", "complex128"):
            cases.append(("einsum", expr, fmts, (dtype,) * 3, _CSR[0]))
    for f, o in ((_CSR[1], _CSR[1]), (_CSR[2], _CSR[3]), (_CSR[3], _CSR[2])):
        cases.append(("einsum", "ij,ik,jk->ij", (f, d2, d2), ("float64",) * 3, o))
    for text, fmts in (("C[i,j] = A[i,j] * sum[k](X[i,k] * Y[j,k])", (_CSR[0], d2, d2)),
                       ("C[i,j] = sum[k](X[k,i] * Y[j,k]) * A[i,j]", (d2, d2, _CSR[0]))):
        for dtype in ("float64", "int64"):
            cases.append(("notation", text, fmts, (dtype,) * 3, _CSR[0]))
    # SpMM: either operand order, renamed indices, widths, float32/float64
    for expr, fmts in (("ik,kj->ij", (None, d2)), ("kj,ik->ij", (d2, None)), ("ij,jk->ik", (None, d2))):
        for f in _CSR:
            for dtype in ("float64", "float32"):
                cases.append(("einsum", expr, tuple(f if x is None else x for x in fmts), (dtype,) * 2, None))
    # MTTKRP / TTV over a 3-D COO (SoA and AoS), transposed factors and results, dtypes
    for layout in ("coo", "aos"):
        for w in (32, 64):
            a = (layout, w, w)
            for expr in ("ijk,jr,kr->ir", "ijk,rj,kr->ir", "ijk,jr,rk->ir", "ijk,jr,kr->ri", "jr,ijk,kr->ir"):
                for dtype in ("float64", "float32", "int64", "int32"):
                    fmts = tuple(a if len(s) == 3 else d2 for s in expr.split("->")[0].split(","))
                    cases.append(("einsum", expr, fmts, (dtype,) * 3, None))
            for expr in ("ijk,k->ij", "ijk,k->ji", "k,ijk->ij"):
                for dtype in ("float64", "int32"):
                    fmts = tuple(a if len(s) == 3 else ("dense", 1) for s in expr.split("->")[0].split(","))
                    cases.append(("einsum", expr, fmts, (dtype,) * 2, None))
    # TTM over a 3-D COO (SoA and AoS, widths): the Tucker chain's sparse step
    for layout, w in (("coo", 32), ("coo", 64), ("aos", 32)):
        for dtype in ("float64", "float32", "int64"):
            cases.append(("einsum", "ijk,kr->ijr", ((layout, w, w), d2), (dtype,) * 2, None))
    # dense gemm: packed (Y row-major or transposed, a transposed result, X transposed, a batch
    # index of X) and unpacked (a batch index of Y, complex values); dtypes
    for expr in ("ik,kj->ij", "ik,jk->ij", "ik,kj->ji", "ki,kj->ij", "ijk,jl->ikl", "bik,bkj->bij"):
        ranks = [len(s) for s in expr.split("->")[0].split(",")]
        for dtype in ("float64", "float32", "int64", "int32"):
            cases.append(("einsum", expr, tuple(("dense", r) for r in ranks), (dtype,) * 2, None))
    for expr in ("ik,kj->ij", "bik,bkj->bij"):
        ranks = [len(s) for s in expr.split("->")[0].split(",")]
        cases.append(("einsum", expr, tuple(("dense", r) for r in ranks), ("complex128",) * 2, None))
    # unions: A + B, A - B, scaled terms; CSR and CSC; widths; dtypes
    for text, scal in (("C[i,j] = A[i,j] + B[i,j]", 0), ("C[i,j] = A[i,j] - B[i,j]", 0),
                       ("C[i,j] = a*A[i,j] - B[i,j]*b", 2), ("C[i,j] = A[i,j]*a + b*B[i,j]", 2)):
        for preset in ("csr", "csc"):
            for dtype in ("float64", "float32", "int64", "complex128"):
                f = (preset, 32, 32)
                order = {"C[i,j] = a*A[i,j] - B[i,j]*b": "aABb", "C[i,j] = A[i,j]*a + b*B[i,j]": "AabB"}
                names = order.get(text, "AB")
                fmts = tuple(("dense", 0) if c in "ab" else f for c in names)
                cases.append(("notation", text, fmts, (dtype,) * len(names), f))
        cases.append(("notation", text.replace("a*", "").replace("*b", "").replace("*a", "").replace("b*", ""),
                      (("csr", 64, 32), ("csr", 32, 64)), ("float64",) * 2, ("csr", 64, 64)))
    # element-wise maps, merges and row sums of CSR/CSC operands (ewise); transposed SpMV (scatter)
    for text, names, out in (("C[i,j] = 2 * B[i,j]", "B", True), ("C[i,j] = exp(2 * A[i,j] + 1) * B[i,j]", "AB", True),
                             ("C[i,j] = max(A[i,j], B[i,j])", "AB", True), ("C[i,j] = A[i,j] * B[i,j]", "AB", True),
                             ("y[i] = sum[j](A[i,j] - B[i,j])", "AB", False),
                             ("y[i] = sum[j](pow(A[i,j] - B[i,j], 2))", "AB", False),
                             ("C[i,j] = s * abs(A[i,j])", "sA", True)):
        for dtype in ("float64", "float32", "int64", "complex128"):
            if dtype == "complex128" and "max" in text:
                continue
            f = ("csr", 32, 32)
            cases.append(("notation", text, tuple(("dense", 0) if c == "s" else f for c in names),
                          (dtype,) * len(names), f if out else None))
    cases.append(("notation", "C[i,j] = A[i,j] * B[i,j]", (("csc", 32, 32),) * 2, ("float64",) * 2, ("csc", 32, 32)))
    for text, fmts in (("ji,j->i", (("csr", 32, 32), ("dense", 1))), ("ij,i->j", (("csr", 64, 64), ("dense", 1))),
                       ("ij,j->i", (("csc", 32, 32), ("dense", 1)))):
        for dtype in ("float64", "float32", "int64", "complex128"):
            cases.append(("einsum", text, fmts, (dtype,) * 2, None))
    cases.append(("notation", "y[i] = sum[j](A[j,i] * (x[j] * w[j]))", (("csr", 32, 32), ("dense", 1), ("dense", 1)),
                  ("float64",) * 3, None))
    # the scatter with a row factor and an expression of the sum (PageRank's step, a bias)
    for dtype in ("float64", "int64"):
        cases.append(("notation", "y[i] = 3 + 2 * sum[j](A[j,i] * (x[j] * w[j]))",
                      (("csr", 32, 32), ("dense", 1), ("dense", 1)), (dtype,) * 3, None))
    cases.append(("notation", "y[i] = max(b[i] - sum[j](A[i,j] * (x[j] - w[j]) * s), 0.0)",
                  (("dense", 1), ("csc", 64, 64), ("dense", 1), ("dense", 1), ("dense", 0)), ("float64",) * 5, None))
    return cases


def _format(spec):
    from sparsecc.formats import Format
    if spec is None:
        return None
    if spec[0] == "dense":
        return Format.dense(spec[1])
    base = {"csr": Format.csr(), "csc": Format.csc(), "coo": Format.coo(3),
            "aos": Format(("compressed(nonunique)", "singleton(nonunique)", "singleton"))}[spec[0]]
    return base.with_widths(spec[1], spec[2])


def emit(case: tuple, facts: dict, parallel: bool) -> tuple[str, str] | None:
    """``(kind, MLIR text)`` of the hand-written kernel for ``case``, or None (the sparsifier's)."""
    from sparsecc.parse import parse_einsum, parse_notation
    from sparsecc.runtime import fast_paths
    source, text, fmts, dtypes, out = case
    stmt = parse_einsum(text, len(fmts)) if source == "einsum" else parse_notation(text)
    formats = tuple(_format(f) for f in fmts)
    from sparsecc.kernel_abi import TargetFacts
    r = fast_paths.route(stmt, formats, tuple(dtypes), _format(out), facts=TargetFacts(**facts))
    if r is None:
        return None
    return r.kind, r.emit(parallel)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def compute(facts: dict | None = None) -> dict:
    rows = {}
    for case in _cases():
        got = {}
        for parallel in (True, False):
            e = emit(case, facts or FACTS, parallel)
            if e is None:
                raise AssertionError(f"no hand-written kernel for the corpus case {case!r}")
            got["kind"], got["parallel" if parallel else "serial"] = e[0], sha(e[1])
        rows[repr(case)] = got
    return rows


def load() -> dict:
    return json.loads(CORPUS.read_text())


if __name__ == "__main__":
    rows = compute()
    old = load() if CORPUS.exists() else {}
    moved = [c for c in rows if c in old and old[c] != rows[c]]
    CORPUS.parent.mkdir(exist_ok=True)
    CORPUS.write_text(json.dumps(rows, indent=0, sort_keys=True) + "\n")
    kinds = {}
    for r in rows.values():
        kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
    print(f"{len(rows)} cases {kinds} -> {CORPUS} ({len(moved)} changed)", *moved[:20], sep="\n", file=sys.stderr)
