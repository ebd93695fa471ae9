"""Specializations served by hand-written loop kernels (``dialect/kernels/``: SDDMM, SpGEMM, the
masked product and sum, SpMM, MTTKRP/TTV, unions, dense x dense contractions), whose sparsifier
kernels run serially.  ``specialize`` asks
:func:`compiled` first; None means the ordinary sparsifier path.  The kernels are emitted
from the compile target's facts (``Target.kernel_facts()``), never from the host's."""

from __future__ import annotations

import dataclasses
from typing import Callable

from ..dialect.kernels import masked_spgemm, sddmm, spgemm, union
from ..dialect.signature import KernelSignature
from ..errors import SparseccError
from ..kernel_abi import TargetFacts
from ..options import Options
from . import targets
from .loader import load_module


#: the hand-written kernels with per-thread workspaces the size of a dimension: a ``huge``
#: call (a dimension much larger than the stored entries) keeps the sparsifier's kernel
SIZED_BY_DIMENSION = ("spgemm", "masked_sum", "masked_spgemm")


@dataclasses.dataclass(frozen=True)
class Route:
    """A hand-written kernel that serves a specialization: its ``kind`` (``plan.kind``), the
    loop indices' order, ``emit(parallel)`` -> its MLIR, whether its result is sparse,
    whether it writes every output entry (``fills_output``: the output need not be zeroed),
    and the operands whose coordinates it range-checks itself (None: what the compile
    reports)."""

    kind: str
    index_order: tuple
    emit: Callable[[bool], str]
    sparse_result: bool
    fills_output: bool = False
    guarded: tuple | None = None
    out_rank: int = 2
    out_dtype: str | None = None       # None: the first operand's


def route(stmt, formats, dtypes, out_format, device: str = "cpu", *, facts: TargetFacts) -> Route | None:
    """The hand-written kernel for this specialization, or None (the sparsifier's), tried in
    this order: MTTKRP/TTV over a 3-D COO operand, the transposed SpMV, SpMM and dense x dense contractions (dense
    results, CPU only: a cuda kernel keeps its GPU loop), then SpGEMM/the masked product/SDDMM with CSR results, then the
    union, then any other element-wise body over CSR/CSC operands (``ewise``).  One order for the JIT route (:func:`compiled`) and ahead-of-time libraries
    (:func:`serial_kernel`).  ``facts``: the compile target's (``Target.kernel_facts()``)."""
    from ..dialect.kernels import gemm, masked_sum, mttkrp, spmm
    fmts, dtype = dict(zip(stmt.operands, formats)), dtypes[0]
    if device == "cpu":
        plan = mttkrp.match(stmt, formats, dtypes, out_format) if len(formats) in (2, 3) else None
        if plan is not None:
            return Route(plan.kind, tuple(plan.index_order),
                         lambda parallel: mttkrp.emit(plan, fmts, None, dtype, parallel, facts), False,
                         fills_output=plan.kind == "ttm")     # TTM zeroes its empty rows itself
        from ..dialect.kernels import scatter       # y = A.T @ x of a CSR A (PageRank's step)
        plan = scatter.match(stmt, formats, dtypes, out_format)
        if plan is not None:
            return Route(plan.kind, tuple(plan.index_order),
                         lambda parallel: scatter.emit(plan, fmts, None, dtype, parallel, facts), False,
                         fills_output=True, out_rank=1, guarded=scatter.guarded(plan, stmt, formats))
        plan = masked_sum.match(stmt, formats, dtypes, out_format)
        if plan is not None:    # ij,jk,ik-> (triangles): rows in parallel, the row sums added in order
            return Route(plan.kind, tuple(plan.index_order),
                         lambda parallel: masked_sum.emit(plan, fmts, None, dtype, parallel, facts), False,
                         fills_output=True, out_rank=0)
        plan = spmm.match(stmt, formats, dtypes, out_format)
        if plan is not None:
            return Route("spmm", tuple(plan.index_order),
                         lambda parallel: spmm.emit(plan, fmts, None, dtype, parallel, facts), False,
                         fills_output=True, guarded=spmm.guarded(plan, stmt, formats))
        plan = gemm.match(stmt, formats, dtypes, out_format)
        if plan is not None:
            return Route("gemm", tuple(plan.index_order),
                         lambda parallel: gemm.emit(plan, fmts, None, dtype, parallel, facts), False,
                         fills_output=True)
    # (masked_spgemm: M * (A @ B) with all three CSR; union: A + B, a*A - b*B with a CSR/CSC result)
    for module in (spgemm, masked_spgemm, sddmm, union):
        plan = module.match(stmt, formats, dtypes, out_format)
        if plan is not None:
            return Route(plan.kind, tuple(plan.index_order),
                         lambda parallel, module=module, plan=plan:
                         module.emit(plan, fmts, out_format, dtype, parallel, facts), True)
    from ..dialect.kernels import ewise      # any element-wise body over one or two CSR/CSC operands
    plan = ewise.match(stmt, formats, dtypes, out_format) if device == "cpu" else None   # (CPU code)
    if plan is not None:
        return Route(plan.kind, tuple(plan.index_order),
                     lambda parallel: ewise.emit(plan, fmts, out_format, dtype, parallel, facts, stmt, dtypes),
                     not plan.reduce, fills_output=plan.reduce, out_rank=len(stmt.indices), out_dtype=plan.out_dtype)
    return None


def serves(stmt, formats, dtypes, out_format, device: str = "cpu") -> bool:
    """Whether a hand-written kernel serves this specialization (:func:`route` finds one),
    for a planner that only rates the one nest (``PlannedKernel._handwritten``): the matchers
    read no target facts - those shape the code a route emits, and nothing is emitted here -
    so no compile target is resolved (nor llvmlite loaded) for it."""
    return route(stmt, formats, dtypes, out_format, device, facts=None) is not None


def compiled(stmt, formats, dtypes, options: Options, out_format, make, huge: bool = False):
    """The loaded hand-written kernel for this specialization, or None.  ``make(key, sig,
    mlir, mod)`` builds the ``Compiled`` (specialization.py's).  ``huge`` (a dimension much
    larger than the stored entries): SpGEMM's per-thread workspaces are the size of the
    result's columns, so such a call keeps the sparsifier's plans (docs/sparse-results.md)."""
    target = targets.resolve(options)
    r = route(stmt, formats, dtypes, out_format, options.device, facts=target.kernel_facts())
    if r is None or (huge and r.kind in SIZED_BY_DIMENSION):
        return None
    parallel = options.parallel != "none" and bool(target.param("openmp"))
    mlir = r.emit(parallel)
    mod = load_module(mlir, what=f"'{stmt}' ({r.kind}, hand-written loops)", options=options, memo=False)
    sig = KernelSignature(r.index_order, stmt.operands, r.out_rank, r.out_dtype or dtypes[0],
                          out_format if r.sparse_result else None)
    n = len(r.index_order) + 1 + sum(1 if f.is_dense else len(f.fields()) + 1 for f in formats)
    if len(mod.info["arg_types"]) != n:
        raise SparseccError(f"internal error: hand-written kernel for '{stmt}' takes "
                            f"{len(mod.info['arg_types'])} arguments, the runtime expected {n}")
    got = make(mod.key, sig, mlir, mod)
    if r.fills_output or r.guarded is not None:
        got = dataclasses.replace(got, fills_output=r.fills_output,
                                  guarded=got.guarded if r.guarded is None else r.guarded)
    return got


def reads_transposed(stmt, formats, dtypes, out_format) -> bool:
    """Whether the hand-written SpGEMM takes these CSR operands as they are, one of them read
    transposed (``sum[i](A[i,k] * B[i,j])``, the Hessian's AᵀB): it transposes that one in
    O(entries) itself, so the format planning keeps it CSR (else it would be converted to
    CSC on the host, ``runtime/plans.py``).  ``formats`` may have unresolved widths."""
    def w(f):
        return f if f is None or f.is_dense else f.with_widths(f.pos_width or 32, f.crd_width or 32)
    plan = spgemm.match(stmt, tuple(w(f) for f in formats), dtypes, w(out_format))
    return plan is not None and plan.a_transposed


def sized_by_dimension(stmt, formats, dtypes, out_format) -> bool:
    """Whether the hand-written kernel for this specialization has workspaces the size of a
    dimension (SpGEMM, the masked sum and product): a ``huge`` call of it is then a specialization of its own."""
    from ..dialect.kernels import masked_sum
    return any(k.match(stmt, formats, dtypes, out_format) is not None for k in (spgemm, masked_sum, masked_spgemm))


def serial_kernel(stmt, formats, dtypes, out_format, facts: TargetFacts):
    """The hand-written kernel for an ahead-of-time library (``specialization.compile_specialization``):
    ``(kind, index_order, mlir, fills_output, guarded)`` with serial loops (``parallel=False``: no OpenMP
    calls, so the library needs only libc and libm), or None (the sparsifier's kernel): :func:`route`,
    as on the CPU; no ``huge`` rule here: serially, SpGEMM's one workspace (about 16 bytes per result
    column, per call) is the size of the sparsifier's own row expansion.  ``guarded``: the operands
    whose coordinates the kernel range-checks itself (SpMM; None: what the compile reports, as for
    SDDMM).  ``facts``: the compile target's (``Target.kernel_facts()``)."""
    r = route(stmt, formats, dtypes, out_format, facts=facts)
    if r is None:
        return None
    return r.kind, r.index_order, r.emit(False), r.fills_output, r.guarded
