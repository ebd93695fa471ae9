"""Specializations served by hand-written loop kernels (``dialect/handwritten.py``): SDDMM
and SpGEMM with CSR results, whose sparsifier kernels run serially.  ``specialize`` asks
:func:`compiled` first; None means the ordinary sparsifier path."""

from __future__ import annotations

import dataclasses

from ..dialect import handwritten, handwritten_union
from ..dialect.signature import KernelSignature
from ..errors import SparseccError
from ..options import Options
from . import targets
from .loader import load_module


def compiled(stmt, formats, dtypes, options: Options, out_format, make, huge: bool = False):
    """The loaded hand-written kernel for this specialization, or None.  ``make(key, sig,
    mlir, mod)`` builds the ``Compiled`` (specialization.py's).  ``huge`` (a dimension much
    larger than the stored entries): SpGEMM's per-thread workspaces are the size of the
    result's columns, so such a call keeps the sparsifier's plans (docs/sparse-results.md)."""
    got = _mttkrp(stmt, formats, dtypes, options, out_format, make)
    if got is not None:
        return got
    got = _spmm(stmt, formats, dtypes, options, out_format, make)
    if got is not None:
        return got
    plan = handwritten.match(stmt, formats, dtypes, out_format)
    module = handwritten
    if plan is None:    # element-wise union (A + B, a*A - b*B) with a CSR/CSC result
        plan, module = handwritten_union.match(stmt, formats, dtypes, out_format), handwritten_union
    if plan is None or (huge and plan.kind == "spgemm"):
        return None
    parallel = options.parallel != "none" and bool(targets.resolve(options).param("openmp"))
    fmts = dict(zip(stmt.operands, formats))
    mlir = module.emit(plan, fmts, out_format, dtypes[0], parallel)
    mod = load_module(mlir, what=f"'{stmt}' ({plan.kind}, hand-written loops)", options=options, memo=False)
    sig = KernelSignature(plan.index_order, stmt.operands, 2, dtypes[0], out_format)
    n = len(plan.index_order) + 1 + sum(1 if f.is_dense else len(f.fields()) + 1 for f in formats)
    if len(mod.info["arg_types"]) != n:
        raise SparseccError(f"internal error: hand-written kernel for '{stmt}' takes "
                            f"{len(mod.info['arg_types'])} arguments, the runtime expected {n}")
    return make(mod.key, sig, mlir, mod)


def _mttkrp(stmt, formats, dtypes, options: Options, out_format, make):
    """MTTKRP (or TTV) over a 3-D COO operand with a dense result (dialect/handwritten_mttkrp.py), or None."""
    if options.device != "cpu" or len(formats) not in (2, 3):     # (a cuda kernel keeps its GPU loop)
        return None
    from ..dialect import handwritten_mttkrp
    plan = handwritten_mttkrp.match(stmt, formats, dtypes, out_format)
    if plan is None:
        return None
    parallel = options.parallel != "none" and bool(targets.resolve(options).param("openmp"))
    mlir = handwritten_mttkrp.emit(plan, dict(zip(stmt.operands, formats)), dtypes[0], parallel)
    mod = load_module(mlir, what=f"'{stmt}' ({plan.kind}, hand-written loops)", options=options, memo=False)
    sig = KernelSignature(plan.index_order, stmt.operands, 2, dtypes[0], None)
    n = len(plan.index_order) + 1 + sum(1 if f.is_dense else len(f.fields()) + 1 for f in formats)
    if len(mod.info["arg_types"]) != n:
        raise SparseccError(f"internal error: hand-written kernel for '{stmt}' takes "
                            f"{len(mod.info['arg_types'])} arguments, the runtime expected {n}")
    return make(mod.key, sig, mlir, mod)


def _spmm(stmt, formats, dtypes, options: Options, out_format, make):
    """SpMM (CSR times dense row-major, dense result; dialect/handwritten_spmm.py), or None.
    The kernel range-checks A's coordinates itself (reported as guarded, as passes/guards.py's
    are) and writes every output entry (its output need not be zeroed)."""
    from ..dialect import handwritten_spmm as hs
    plan = hs.match(stmt, formats, dtypes, out_format) if options.device == "cpu" else None
    if plan is None:
        return None
    parallel = options.parallel != "none" and bool(targets.resolve(options).param("openmp"))
    mlir = hs.emit(plan, dict(zip(stmt.operands, formats)), dtypes[0], parallel)
    mod = load_module(mlir, what=f"'{stmt}' (spmm, hand-written loops)", options=options, memo=False)
    got = make(mod.key, KernelSignature(plan.index_order, stmt.operands, 2, dtypes[0], None), mlir, mod)
    return dataclasses.replace(got, guarded=hs.guarded(plan, stmt, formats), fills_output=True)


def sized_by_dimension(stmt, formats, dtypes, out_format) -> bool:
    """Whether the hand-written kernel for this specialization has workspaces the size of a
    dimension (SpGEMM): a ``huge`` call of it is then a specialization of its own."""
    plan = handwritten.match(stmt, formats, dtypes, out_format)
    return plan is not None and plan.kind == "spgemm"


def serial_kernel(stmt, formats, dtypes, out_format):
    """The hand-written kernel for an ahead-of-time library (``specialization.compile_specialization``):
    ``(kind, index_order, mlir, fills_output, guarded)`` with serial loops (``parallel=False``: no OpenMP
    calls, so the library needs only libc and libm), or None (the sparsifier's kernel).  The same
    matching, in the same order, as :func:`compiled` on the CPU; no ``huge`` rule: serially,
    SpGEMM's one workspace (about 16 bytes per result column, per call) is the size of the
    sparsifier's own row expansion.  ``guarded``: the operands whose coordinates the kernel
    range-checks itself (SpMM; None: what the compile reports, as for SDDMM)."""
    from ..dialect import handwritten_mttkrp, handwritten_spmm
    fmts = dict(zip(stmt.operands, formats))
    if len(formats) in (2, 3):
        plan = handwritten_mttkrp.match(stmt, formats, dtypes, out_format)
        if plan is not None:
            return plan.kind, tuple(plan.index_order), handwritten_mttkrp.emit(plan, fmts, dtypes[0], False), False, None
    plan = handwritten_spmm.match(stmt, formats, dtypes, out_format)
    if plan is not None:
        return ("spmm", tuple(plan.index_order), handwritten_spmm.emit(plan, fmts, dtypes[0], False), True,
                handwritten_spmm.guarded(plan, stmt, formats))
    plan, module = handwritten.match(stmt, formats, dtypes, out_format), handwritten
    if plan is None:
        plan, module = handwritten_union.match(stmt, formats, dtypes, out_format), handwritten_union
    if plan is None:
        return None
    return plan.kind, tuple(plan.index_order), module.emit(plan, fmts, out_format, dtypes[0], False), False, None
