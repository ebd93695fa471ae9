"""The case table: every kernel on every input, with its baselines, FLOP and byte counts
and targets; ``select`` picks rows by kernel name or id."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .baselines import (_minplus_baselines, _mttkrp_scipy, _sddmm_baselines, _spgemm_baselines, _spmm_baselines,
                        _spmv_baselines, _ttv_scipy)
from .generators import coo3, poisson2d, poisson3d, rmat, uniform_rows, user_built

VB, IB = 8, 4          # bytes per f64 value, per 32-bit index (the generated inputs' width)


@dataclass
class Case:
    """One row of the suite: a kernel on one input.

    ``build(rng, small)`` returns the operands (a tuple; index-notation kernels get them by
    name, in the order of ``names``).  ``baselines`` maps a name to a factory that takes the
    operands and returns a zero-argument callable computing the same result (preparation
    such as a format conversion happens in the factory, outside the timing).  The first
    baseline is the reference for the correctness check and the target.  ``flops`` and
    ``bytes`` take the operands and the reference result; ``bytes`` is the least traffic
    the kernel must move (docs/performance.md, the bandwidth model)."""

    kernel: str
    input: str
    expr: str
    build: Callable
    baselines: dict
    flops: Callable
    bytes: Callable
    formats: tuple = ()
    names: tuple = ()
    out_format: str | None = None
    target: float | None = None          # sparsecc time / first baseline's time must be <= this
    target_threads: str = "all"          # "1": the target compares sparsecc on one thread
    thread_target: float | None = None   # speedup 1 thread -> all cores must be >= this
    note: str = ""
    semiring: str | None = None          # sc.compile's semiring= (GraphBLAS's name)

    @property
    def id(self) -> str:
        return f"{self.kernel}:{self.input}"


def _nnz(A) -> int:
    return int(A.nnz)


def _csr_bytes(A) -> int:
    """Values, column indices and row pointers of a CSR matrix (indices at their own width:
    a kernel reads int64 indices as they are)."""
    return _nnz(A) * (VB + A.indices.itemsize) + (A.shape[0] + 1) * A.indptr.itemsize


def _products(A, B) -> int:
    """Multiplications in Gustavson's A @ B: sum over k of |A[:, k]| * |B[k, :]|."""
    col_counts = np.bincount(A.indices, minlength=A.shape[1])
    return int(col_counts @ np.diff(B.indptr).astype(np.int64))


def _spmv_case(input_name, build, *, target=None, target_threads="all", thread_target=None, note="",
               kernel="spmv", baselines=None, semiring=None):
    return Case(kernel, input_name, "ij,j->i", build, baselines or _spmv_baselines(),
                flops=lambda ops, ref: 2 * _nnz(ops[0]),
                bytes=lambda ops, ref: (_csr_bytes(ops[0]) + ops[0].shape[1] * ops[1].itemsize
                                        + ops[0].shape[0] * ops[1].itemsize),
                formats=("csr", "dense"), target=target, target_threads=target_threads,
                thread_target=thread_target, note=note, semiring=semiring)


def _spmm_case(k, input_name, build, *, target=None, thread_target=None):
    return Case(f"spmm{k}", input_name, "ik,kj->ij", build, _spmm_baselines(),
                flops=lambda ops, ref: 2 * _nnz(ops[0]) * ops[1].shape[1],
                bytes=lambda ops, ref: (_csr_bytes(ops[0]) + ops[1].size * VB
                                        + ops[0].shape[0] * ops[1].shape[1] * VB),
                formats=("csr", "dense"), target=target, thread_target=thread_target)


def _given(A):
    """An input builder returning a fixed (real) matrix."""
    return lambda rng: A


def _sized(small: bool, full, little):
    return little if small else full


def cases(small: bool = False, real: dict | None = None) -> list[Case]:
    """The suite: the issue's target table first, then the other kernels and inputs."""
    s = lambda full, little: _sized(small, full, little)
    n_mv, n_mm, n_gemm = s(200_000, 20_000), s(50_000, 5_000), s(20_000, 2_000)
    d3, nnz3 = s(150, 40), s(500_000, 8_000)

    def uni(n, k=10):
        return lambda rng: uniform_rows(n, n, k, rng)

    def with_vec(make):
        def build(rng):
            A = make(rng)
            return A, rng.random(A.shape[1]).astype(A.dtype)
        return build

    def with_dense(make, k):
        def build(rng):
            A = make(rng)
            return A, rng.random((A.shape[1], k))
        return build

    def sddmm_build(n, k):
        def build(rng):
            S = uniform_rows(n, n, 10, rng)
            return S, rng.random((n, k)), rng.random((n, k))
        return build

    def mttkrp_build(rng):
        return coo3(d3, nnz3, rng), rng.random((d3, 16)), rng.random((d3, 16))

    def users(build):
        """The same operands, the sparse one as users build it (int64 indices)."""
        def built(rng):
            ops = build(rng)
            return (user_built(ops[0]),) + tuple(ops[1:])
        return built

    def ttv_build(rng):
        return coo3(d3, nnz3, rng), rng.random(d3)

    def pair(n):
        return lambda rng: (uniform_rows(n, n, 10, rng), uniform_rows(n, n, 10, rng))

    sddmm_flops = lambda ops, ref: (2 * ops[1].shape[1] + 1) * _nnz(ops[0])
    sddmm_bytes = lambda ops, ref: (_csr_bytes(ops[0]) + _nnz(ops[0]) * VB
                                    + (ops[1].size + ops[2].size) * VB)
    spgemm_bytes = lambda ops, ref: _csr_bytes(ops[0]) + _csr_bytes(ops[1]) + _csr_bytes(sp.csr_array(ref))
    coo3_bytes = lambda T: _nnz(T) * (VB + sum(c.itemsize for c in T.coords))
    mttkrp_bytes = lambda ops, ref: (coo3_bytes(ops[0]) + (ops[1].size + ops[2].size) * VB
                                     + ops[0].shape[0] * ops[1].shape[1] * VB)

    out = [
        # --- the targets table (issue 5)
        _spmv_case("uniform", with_vec(uni(n_mv)), target=1.0, target_threads="1", thread_target=1.6),
        _spmm_case(32, "uniform", with_dense(uni(n_mm), 32), target=0.5, thread_target=1.6),
        Case("sddmm32", "uniform", "ij,ik,jk->ij", sddmm_build(n_mm, 32), _sddmm_baselines(),
             flops=sddmm_flops, bytes=sddmm_bytes, formats=("csr", "dense", "dense"), out_format="csr",
             target=0.5),
        Case("spgemm", "uniform", "ik,kj->ij", lambda rng: (uni(n_gemm)(rng),) * 2, _spgemm_baselines(),
             flops=lambda ops, ref: 2 * _products(ops[0], ops[1]), bytes=spgemm_bytes,
             formats=("csr", "csr"), out_format="csr", target=1.2),
        Case("mttkrp", "uniform", "ijk,jr,kr->ir", mttkrp_build, {"scipy": _mttkrp_scipy},
             flops=lambda ops, ref: 3 * _nnz(ops[0]) * ops[1].shape[1], bytes=mttkrp_bytes,
             formats=("coo", "dense", "dense"), target=0.5),
        _spmv_case("tiny", lambda rng: (uniform_rows(10, 10, 3, rng), rng.random(10)), target=5.0,
                   note="per-call overhead"),
        # --- the same inputs as users build them: int64 indices (sp.csr_array((data, (rows, cols))))
        _spmv_case("uniform64", users(with_vec(uni(n_mv))), note="int64 indices, as users build them"),
        _spmm_case(32, "uniform64", users(with_dense(uni(n_mm), 32))),
        Case("mttkrp", "uniform64", "ijk,jr,kr->ir", users(mttkrp_build), {"scipy": _mttkrp_scipy},
             flops=lambda ops, ref: 3 * _nnz(ops[0]) * ops[1].shape[1], bytes=mttkrp_bytes,
             formats=("coo", "dense", "dense"), note="int64 coordinates, flagged non-canonical"),
        # --- a semiring: SpMV over (min, +) (GraphBLAS's min_plus; every row has an entry).  Mid-size:
        # sparsecc's semiring kernel reads x through an n x n dense temporary (n^2 memory and time)
        _spmv_case("midsize", with_vec(uni(s(4_000, 1_000))), kernel="minplusmv", baselines=_minplus_baselines(),
                   semiring="min_plus", note="semiring min_plus; n x n temporary inside sparsecc's kernel"),
        # --- more kernels
        _spmm_case(8, "uniform", with_dense(uni(n_mm), 8)),
        _spmm_case(128, "uniform", with_dense(uni(n_mm), 128)),
        Case("sddmm128", "uniform", "ij,ik,jk->ij", sddmm_build(n_mm, 128), _sddmm_baselines(),
             flops=sddmm_flops, bytes=sddmm_bytes, formats=("csr", "dense", "dense"), out_format="csr"),
        Case("add", "uniform", "C[i,j] = A[i,j] + B[i,j]", pair(n_mv), {"scipy": lambda A, B: (lambda: A + B)},
             flops=lambda ops, ref: _nnz(ops[0]) + _nnz(ops[1]) - _nnz(ref),
             bytes=lambda ops, ref: _csr_bytes(ops[0]) + _csr_bytes(ops[1]) + _csr_bytes(ref),
             formats=("csr", "csr"), names=("A", "B"), out_format="csr"),
        Case("mul", "uniform", "C[i,j] = A[i,j] * B[i,j]", pair(n_mv),
             {"scipy": lambda A, B: (lambda: A.multiply(B))},
             flops=lambda ops, ref: _nnz(ref),
             bytes=lambda ops, ref: _csr_bytes(ops[0]) + _csr_bytes(ops[1]) + _csr_bytes(ref),
             formats=("csr", "csr"), names=("A", "B"), out_format="csr"),
        Case("ttv", "uniform", "ijk,k->ij", ttv_build, {"scipy": _ttv_scipy},
             flops=lambda ops, ref: 2 * _nnz(ops[0]),
             bytes=lambda ops, ref: coo3_bytes(ops[0]) + ops[1].size * VB + ref.size * VB,
             formats=("coo", "dense"), out_format="dense"),
        # --- the same kernels on other input families
        _spmv_case("poisson2d", with_vec(lambda rng: poisson2d(s(450, 140)))),
        _spmv_case("poisson3d", with_vec(lambda rng: poisson3d(s(60, 27)))),
        _spmv_case("rmat", with_vec(lambda rng: rmat(s(18, 14), 8, rng))),
        _spmm_case(32, "poisson2d", with_dense(lambda rng: poisson2d(s(220, 70)), 32)),
        _spmm_case(32, "rmat", with_dense(lambda rng: rmat(s(16, 12), 8, rng), 32)),
        Case("spgemm", "poisson2d", "ik,kj->ij", lambda rng: (poisson2d(s(300, 100)),) * 2, _spgemm_baselines(),
             flops=lambda ops, ref: 2 * _products(ops[0], ops[1]), bytes=spgemm_bytes,
             formats=("csr", "csr"), out_format="csr"),
        Case("spgemm", "rmat", "ik,kj->ij", lambda rng: (rmat(s(14, 10), 8, rng),) * 2, _spgemm_baselines(),
             flops=lambda ops, ref: 2 * _products(ops[0], ops[1]), bytes=spgemm_bytes,
             formats=("csr", "csr"), out_format="csr"),
    ]
    for name, (src, A) in (real or {}).items():
        out.append(_spmv_case(name, with_vec(_given(A)), note=src))
        if A.shape[0] == A.shape[1] and name in ("mhd1280b", "lesmis"):
            square = _given(A)
            out.append(Case("spgemm", name, "ik,kj->ij", lambda rng, sq=square: (sq(rng),) * 2, _spgemm_baselines(),
                            flops=lambda ops, ref: 2 * _products(ops[0], ops[1]), bytes=spgemm_bytes,
                            formats=("csr", "csr"), out_format="csr", note=src))
    return out


def select(all_cases: list[Case], kernels: str | None) -> list[Case]:
    if not kernels:
        return all_cases
    want = {w.strip() for w in kernels.split(",") if w.strip()}
    chosen = [c for c in all_cases if c.kernel in want or c.id in want]
    unknown = want - {c.kernel for c in all_cases} - {c.id for c in all_cases}
    if unknown:
        raise SystemExit(f"unknown kernel(s): {', '.join(sorted(unknown))}; "
                         f"known: {', '.join(sorted({c.kernel for c in all_cases}))}")
    return chosen
