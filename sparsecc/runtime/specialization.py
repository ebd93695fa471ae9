"""Specialization: from a statement, its operands' resolved formats and dtypes, and the
options, to a loaded kernel - and the workarounds that get MLIR 22 to compile it.

- the compile-retry ladder (:func:`_attempts`, :func:`_first_that_compiles`): fused, then
  split into one generic per sparse operation, then a sparse result built in another
  level order and converted inside the kernel;
- format planning: the formats operands run in when MLIR 22 cannot co-iterate or build
  what was asked (block-sparse operands, dense levels below sparse ones; a sparse result's
  operands in its loops' order: ``operand_orders.py``), and the refused block results;
- the table of loaded specializations (memory cache) over ``loader.load_module``, and the
  ahead-of-time hooks (``compile_specialization``, ``result_format_for``,
  ``loaded_specialization``) that ``runtime/aot/`` builds on.
"""

from __future__ import annotations

import ctypes
import dataclasses
import threading
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ..dialect import KernelSignature, emit_kernel
from ..errors import CompileError, FormatError, InexactPatternError, ShapeError, SparseccError
from ..expr import Reduce, Statement, accesses, infer_dtypes
from ..formats import Format, resolve
from ..options import Options
from ..patterns import check_sparse_result, default_result_format
from . import compiler, fast_paths, targets
from .loader import STATS, load_module, read_stages
from .operand_orders import _CSR, _compressed_outer, _dense_prefix, exact_sums_inside, sparse_result_formats

#: loaded specializations by (statement, formats, dtypes, options, result format); the call
#: path (runtime/call.py) checks its plans against this table, so clearing it (as a new
#: process would start) reaches kernels already planned
_loaded: dict[tuple, "Compiled"] = {}
_key_locks: dict[tuple, threading.Lock] = {}
_registry_lock = threading.Lock()


@dataclass
class Compiled:
    """One specialization, loaded: the native entry point and how to call it."""

    key: str
    signature: KernelSignature
    formats: tuple[Format, ...]
    out_format: Format | None
    mlir: str
    lib: ctypes.CDLL
    entry: object
    info_path: str
    _stages: dict | None = field(default=None, repr=False)
    #: where the IR stages come from when there is no cache entry (an AOT kernel: its library's
    #: ``<name>.ir.json``); None: the cache entry's JSON at ``info_path``
    stages_of: object = field(default=None, repr=False)
    #: the kernel's arguments whose coordinates it range-checks itself (passes/guards.py)
    guarded: tuple[int, ...] = ()
    #: its sparse result would store entries without a term (``rewrites.inexact_sparse_outputs``):
    #: the call path refuses to run it (``inexact_pattern``) unless its kernel says that is harmless
    inexact: bool = False
    #: the kernel writes every entry of its dense output: the call allocates it with np.empty
    fills_output: bool = False

    def stages(self) -> dict:
        if self._stages is None:
            self._stages = self.stages_of() if self.stages_of is not None else read_stages(self.info_path)
        return self._stages


def _expected_args(sig: KernelSignature, formats) -> int:
    n = len(sig.index_order) + 1          # sizes, then the dense output or the sparse result's struct
    for f in formats:
        n += 1 if f.is_dense else len(f.fields()) + 1
    return n


def _build(stmt, fmts, dts, out_format, options, split, via=None):
    """Emit and load (from disk, or compiled) one form of a specialization.  Every field of
    ``options`` reaches the compile worker and the cache key (``index_width`` too, which the
    operands' formats already carry in their widths)."""
    # the call path allocates dense results with np.zeros (see runtime/call.py)
    mlir, sig = emit_kernel(stmt, fmts, dts, split=split, out_format=out_format, via=via, zeroed_output=True)
    return mlir, sig, load_module(mlir, what=f"'{stmt}'", options=options, memo=False)


def specialize(stmt: Statement, formats: tuple[Format, ...], dtypes: tuple[str, ...],
               options: Options, out_format: Format | None = None, huge: bool = False) -> Compiled:
    """The loaded kernel for one specialization (``out_format``: a sparse result's format,
    widths resolved; ``None`` for a dense result).  ``huge``: the call has a dimension much
    larger than its stored entries (:func:`huge_dimension`): prefer the forms that make no
    temporary sized by a dimension (:func:`_attempts`)."""
    attempts = _attempts(stmt, formats, out_format, huge)
    mem_key = (stmt, formats, dtypes, options, out_format)
    if huge and (attempts != _attempts(stmt, formats, out_format)
                 or fast_paths.sized_by_dimension(stmt, formats, dtypes, out_format)):
        mem_key += ("huge",)
    got = _loaded.get(mem_key)
    if got is not None:
        STATS.hits += 1
        return got
    with _registry_lock:
        lock = _key_locks.setdefault(mem_key, threading.Lock())
    with lock:                      # two threads asking for one kernel compile it once
        got = _loaded.get(mem_key)
        if got is not None:
            STATS.hits += 1
            return got
        # SDDMM / SpGEMM with CSR results: hand-written parallel loops (runtime/fast_paths.py)
        got = fast_paths.compiled(stmt, formats, dtypes, options, out_format,
                                  lambda key, sig, mlir, mod: Compiled(key, sig, formats, out_format, mlir,
                                                                       mod.lib, mod.entry, mod.info_path,
                                                                       guarded=tuple(mod.info.get("guarded", ()))),
                                  huge)
        if got is not None:
            _loaded[mem_key] = got
            return got
        fmts, dts = dict(zip(stmt.operands, formats)), dict(zip(stmt.operands, dtypes))
        mlir, sig, mod = _first_that_compiles(
            attempts,
            lambda split, via: _build(stmt, fmts, dts, out_format, options, split, via))
        n = _expected_args(sig, formats)
        if len(mod.info["arg_types"]) != n:
            raise SparseccError(f"internal error: kernel for '{stmt}' takes {len(mod.info['arg_types'])} "
                                f"arguments, the runtime expected {n}")
        got = Compiled(mod.key, sig, formats, out_format, mlir, mod.lib, mod.entry, mod.info_path,
                       guarded=tuple(mod.info.get("guarded", ())),
                       inexact=bool(mod.info.get("inexact")) and not exact_sums_inside(stmt, formats))
        _loaded[mem_key] = got
        return got

def inexact_pattern(stmt: Statement) -> InexactPatternError:
    """The error for a one nest whose sparse result MLIR would store inexactly
    (``rewrites.inexact_sparse_outputs``), raised by the call path before it runs (and by an
    ahead-of-time build): a planned call catches it and splits the statement's reductions;
    anything else that calls one nest gets it."""
    return InexactPatternError(
        f"'{stmt}' as one loop nest would store entries without a term in its sparse result (a reduction over "
        f"several loops inside the result's last output loop: MLIR 22 stores the reduction's identity there); "
        f"a planned call (sc.einsum, sc.evaluate, sc.compile) runs its reductions one index a step instead. "
        f"Here nothing plans it: ask for a dense result (out_format='dense'), or run it through sc.compile "
        f"(docs/sparse-results.md)")


@lru_cache(maxsize=1024)
def _attempts(stmt: Statement, formats: tuple[Format, ...], out_format: Format | None,
              huge: bool = False) -> tuple:
    """The (split, via) forms to try, in order.  The sparsifier rejects (or crashes on) some
    fused expressions, and finds no loop order for some sparse results: retry split into one
    generic per sparse operation, then building the result in dimension order (or an
    operand's storage order) and converting it inside the kernel.

    ``huge`` (a call with a dimension much larger than its stored entries): the forms whose
    temporaries are all O(stored entries + the operands' and the result's own storage) come
    first.  Building ``ij->ji`` of a CSR into COO directly makes the sparsifier copy the
    operand j-major (a dense level of j's size, 8.6 GB of positions for 2**31 columns);
    building the COO in the operand's order and sorting it inside the kernel does not.  For
    ordinary shapes the direct form stays first: it measured faster (docs/sparse-results.md)."""
    attempts = _attempts_in_order(stmt, formats, out_format)
    if huge and out_format is not None and not isinstance(stmt.expr, Reduce):
        safe = [a for a in attempts if not _unpaid_temporaries(stmt, formats, out_format, a[1])]
        attempts = safe + [a for a in attempts if a not in safe]
    elif huge and out_format is not None:
        # a contraction's operands are already in its loop order; its result built in
        # dimension order (CSR for a CSC result) has positions the size of a dimension:
        # build it with compressed outer levels (DCSR) instead
        attempts = [(split, _compressed_outer(via)
                     if via is not None and _unpaid_temporaries(stmt, formats, out_format, via, False) else via)
                    for split, via in attempts]
    return tuple(attempts)


def _attempts_in_order(stmt: Statement, formats: tuple[Format, ...], out_format: Format | None) -> list:
    attempts = [(False, None), (True, None)]
    if out_format is None:
        return attempts
    in_order = _in_dimension_order(out_format)
    if isinstance(stmt.expr, Reduce) and stmt.expr.indices:
        # a contraction inserting in an order other than dimension order (CSR x CSR -> CSC)
        # gets the inner-product loop order, which stores every entry: build it in dimension
        # order (Gustavson's row-wise loops) and convert.  Never in an operand's order, for
        # the same reason.
        return [(False, in_order), (True, in_order)] if in_order is not None else attempts
    vias = [v for v in dict.fromkeys([in_order] + _orders_of_operands(stmt, formats, out_format)) if v is not None]
    # every fused form before any split one: a split puts a sub-expression (b*Y in X + b*Y)
    # in a dense temporary, and the sparse result then stores every entry (a union with a
    # dense operand), where the same statement built in another order stores the union
    return [(False, None)] + [(False, v) for v in vias] + [(True, None)] + [(True, v) for v in vias]


#: a call is in the huge-dimension class when an index is larger than HUGE_FACTOR times the
#: elements its operands store, plus HUGE_SLACK: then (only then) its sparse result is
#: planned so that no temporary is sized by a dimension (:func:`_attempts`)
HUGE_FACTOR, HUGE_SLACK = 4, 1 << 16


def huge_dimension(sizes, counts) -> bool:
    """``sizes``: the index sizes of a call; ``counts``: each operand's stored entries (its
    element count when dense)."""
    return max(sizes, default=0) > HUGE_FACTOR * sum(counts) + HUGE_SLACK


def _unpaid_temporaries(stmt: Statement, formats: tuple[Format, ...], out: Format, via: Format | None,
                        converts: bool = True) -> list:
    """The temporaries the sparsifier makes to build ``out`` (through ``via``) whose size
    follows dimensions that neither an operand's nor the result's storage already follows:
    each as the set of indices whose sizes multiply into it.  A sparse result is inserted in
    its levels' order, so every sparse operand that stores those indices in another order is
    converted first into its own level types in the loop's order (a CSR operand of ``ij->ji``
    becomes j-major: a dense level of j's size); ``via`` is itself a temporary.
    ``converts=False``: operands are already in the loop's order (contractions)."""
    build = via or out
    paid = [_dense_prefix(out, stmt.indices)]
    temps = [_dense_prefix(via, stmt.indices)] if via is not None else []
    loop = {stmt.indices[d]: k for k, d in enumerate(build.order)} if build.block is None else None
    seen = set()
    for a in accesses(stmt.expr):
        if a.tensor in seen or len(set(a.indices)) != len(a.indices):
            continue
        seen.add(a.tensor)
        f = formats[stmt.operands.index(a.tensor)]
        paid.append(_dense_prefix(f, a.indices))
        if f.is_dense or f.block is not None or loop is None or not converts:
            continue
        rank = [loop.get(a.indices[d], len(loop)) for d in f.order]
        if rank != sorted(rank):
            order = tuple(sorted(range(f.rank), key=lambda d: loop.get(a.indices[d], len(loop))))
            temps.append(_dense_prefix(Format(f.levels, order, None, f.pos_width, f.crd_width), a.indices))
    return [t for t in temps if t and not any(t <= p for p in paid)]


def _first_that_compiles(attempts, build):
    for k, (split, via) in enumerate(attempts):
        try:
            return build(split, via)
        except CompileError as err:
            # a timeout is not retried in other forms (each could take as long); an
            # InternalError (a bug, not a rejection) is no CompileError and is never retried
            if k == len(attempts) - 1 or getattr(err, "timed_out", False):
                raise


def compile_specialization(stmt: Statement, formats: tuple[Format, ...], dtypes: tuple[str, ...],
                           options: Options, out_format: Format | None, obj_path: str,
                           entry: str, chosen: dict | None = None, handwritten: bool = True) -> KernelSignature:
    """Compile one specialization into the object file ``obj_path`` exporting ``entry``
    (ahead-of-time libraries; no cache).  Returns its signature.  Always serial code
    (``parallel="none"``): an ahead-of-time library needs only libc and libm, no OpenMP
    runtime.  On the CPU the hand-written kernels (SpGEMM, SDDMM, SpMM, A+B, MTTKRP/TTV:
    ``fast_paths.serial_kernel``) come first, emitted serial; ``chosen`` (a dict, when given)
    then gets ``kernel`` (their kind), ``fills_output`` (the kernel writes every entry of
    its dense output; else the output must arrive zeroed) and ``guarded`` (the operands whose
    coordinates it range-checks itself: ``check=True`` skips NumPy's check of them) and
    ``stages`` (the IR of each stage). A sparsifier kernel gets ``stages``, and with fused
    range checks ``guarded``.  ``handwritten=False``:
    the sparsifier's kernel (an AOT SpGEMM's form for huge dimensions)."""
    fmts, dts = dict(zip(stmt.operands, formats)), dict(zip(stmt.operands, dtypes))
    if options.device == "cpu":     # (a cuda kernel keeps its GPU loop: the library needs libmlir_cuda_runtime)
        options = dataclasses.replace(options, parallel="none")
        hand = (fast_paths.serial_kernel(stmt, formats, dtypes, out_format, targets.resolve(options).kernel_facts())
                if handwritten else None)
        index_order = tuple(dict.fromkeys(i for a in accesses(stmt.expr) for i in a.indices))
        out_dtype = _result_dtype(stmt, dtypes).name
        if hand is not None and hand[1] == index_order and out_dtype == dtypes[0]:
            kind, _, mlir, fills, guarded = hand
            sig = KernelSignature(index_order, stmt.operands, len(stmt.indices), out_dtype, out_format)
            reply = compiler.compile_library(mlir, obj_path, target=targets.resolve(options), options=options,
                                             what=f"'{stmt}' ({kind}, hand-written loops)", entry=entry,
                                             object_only=True)
            if len(reply["arg_types"]) != _expected_args(sig, formats):
                raise SparseccError(f"internal error: hand-written kernel for '{stmt}' takes "
                                    f"{len(reply['arg_types'])} arguments, the runtime expected "
                                    f"{_expected_args(sig, formats)}")
            if chosen is not None:
                chosen.update(kernel=kind, fills_output=fills, stages=reply["stages"],
                              guarded=sorted(guarded if guarded is not None else reply.get("guarded", ())))
            return sig

    def build(split, via):
        mlir, sig = emit_kernel(stmt, fmts, dts, split=split, out_format=out_format, via=via)
        reply = compiler.compile_library(mlir, obj_path, target=targets.resolve(options), options=options,
                                         what=f"'{stmt}'", entry=entry, object_only=True)
        if len(reply["arg_types"]) != _expected_args(sig, formats):
            raise SparseccError(f"internal error: unexpected arguments for '{stmt}'")
        if reply.get("inexact") and not exact_sums_inside(stmt, formats):
            raise inexact_pattern(stmt)
        if chosen is not None and reply.get("guarded"):     # fused range checks (passes/guards.py)
            chosen["guarded"] = sorted(reply["guarded"])
        if chosen is not None:
            chosen["stages"] = reply["stages"]
        return sig
    return _first_that_compiles(_attempts(stmt, formats, out_format), build)


def result_format_for(k, formats: list[Format], width: int) -> tuple[Format | None, list[Format]]:
    """The result format of kernel ``k`` with operands in ``formats`` and fixed index widths
    (ahead-of-time builds), and the operand formats it then runs with."""
    stmt = k.stmt
    formats = _without_coiterated_blocks(formats)
    sparse = frozenset(n for n, f in zip(stmt.operands, formats) if not f.is_dense)
    spec = k.out_format if k.out_format is not None else default_result_format(stmt, sparse)
    if _bare_bsr(spec):
        raise FormatError("an ahead-of-time kernel needs the BSR result's block size: out_format='bsr2x2'")
    fmt = resolve(spec, len(stmt.indices), "the result")
    if fmt.is_dense:
        return None, formats
    check_sparse_result(stmt, sparse)
    _check_block_result(fmt, sparse, None)
    formats = [f.with_widths(width, width) for f in sparse_result_formats(stmt, formats, ahead_of_time=True)]
    return fmt.with_widths(width, width), formats


def loaded_specialization(stmt: Statement, formats: tuple[Format, ...], dtypes: tuple[str, ...],
                          out_format: Format | None, lib, fn, path: str, guarded: tuple[int, ...] = (),
                          fills_output: bool = False, stages_of=None) -> dict:
    """A kernel from an ahead-of-time library, keyed as ``Kernel.__call__`` looks it up
    (``guarded``, ``fills_output``: as the manifest records a hand-written kernel's;
    ``stages_of``: a function giving its IR stages, for ``Kernel.ir``)."""
    index_order = tuple(dict.fromkeys(i for a in accesses(stmt.expr) for i in a.indices))
    out = _result_dtype(stmt, dtypes)
    sig = KernelSignature(index_order, stmt.operands, len(stmt.indices), out.name, out_format)
    comp = Compiled(path, sig, formats, out_format, "", lib, fn, "", guarded=guarded, fills_output=fills_output,
                    stages_of=stages_of)
    return {(formats, dtypes, out_format): comp}


def csc_built_as_csr(stmt: Statement, out_format: Format) -> bool:
    """Whether a contraction's CSC result is built as CSR, then transposed by SciPy in
    O(nnz) (``runtime/plans.prepare``): built in dimension order (Gustavson's loops, see
    :func:`_attempts_in_order`), MLIR 22's conversion to CSC inside the kernel grew with the
    square of the entries (``ij,jk->ik``, 5000^2 with 4 entries a row, 79,866 entries, 1
    thread: 26 ms; as CSR 1.6 ms, SciPy's ``tocsc`` 0.7)."""
    return (isinstance(stmt.expr, Reduce) and bool(stmt.expr.indices) and out_format.block is None
            and out_format.rank == 2 and out_format.levels == ("dense", "compressed") and out_format.order == (1, 0))


@lru_cache(maxsize=None)
def _in_dimension_order(fmt: Format | None) -> Format | None:
    """``fmt`` with its levels in dimension order (CSC -> CSR), or None if it already is."""
    if fmt is None or fmt.block is not None or fmt.order == tuple(range(fmt.rank)):
        return None
    return Format(fmt.levels, None, None, fmt.pos_width, fmt.crd_width)


def gpu_formats(stmt: Statement, fmts: list[Format]) -> list[Format]:
    """``device="cuda"``: the formats operands run in so that the kernel has a GPU loop.
    MLIR moves only a dense outer loop over an output index to the GPU (each thread owns
    whole output rows: no atomics); a sparse matrix or tensor stored with a compressed outer
    level (COO, DCSR, CSF) or with a summed index outermost (CSC in ``ij,j->i``) gets none.
    The kernel's only sparse operand of rank >= 2 is then stored with a dense outer level
    over its first output index, its other levels compressed, in their order (CSC and COO
    SpMV run as CSR, column sums ``ij->j`` as CSC); its stored entries are unchanged.
    ``Kernel.last_formats()`` shows what ran.  Several sparse operands, blocks, or no output
    index: unchanged (a clear DeviceError when that has no GPU code)."""
    sparse = [k for k, f in enumerate(fmts) if not f.is_dense]
    if len(sparse) != 1:
        return fmts
    k = sparse[0]
    f = fmts[k]
    rank = len(f.levels)
    if f.block is not None or rank < 2:
        return fmts
    acc = next(a for a in accesses(stmt.expr) if a.tensor == stmt.operands[k])
    outs = [d for d in range(rank) if acc.indices[d] in stmt.indices]
    if not outs:
        return fmts
    lead = min(outs, key=lambda d: stmt.indices.index(acc.indices[d]))
    order = f.order or tuple(range(rank))
    if f.levels[0] == "dense" and order[0] == lead:
        return fmts
    order = (lead,) + tuple(d for d in order if d != lead)
    out = list(fmts)
    out[k] = Format(("dense",) + ("compressed",) * (rank - 1), order, None, f.pos_width, f.crd_width)
    return out


def _without_coiterated_blocks(fmts: list[Format]) -> list[Format]:
    """Block-sparse operands run as CSR when another operand is sparse too: MLIR 22 mixes up
    coordinates when it co-iterates demapped blocks with some sparse operands (found by the
    property tests: ``jl,lij->i`` with a BSR and a CSF/COO operand gave wrong values)."""
    if sum(not f.is_dense for f in fmts) < 2 or all(f.block is None for f in fmts):
        return fmts
    return [_CSR if f.block is not None else f for f in fmts]


def _orders_of_operands(stmt: Statement, formats: tuple[Format, ...], out: Format) -> list[Format]:
    """``out`` with its levels in the order the sparse operands store the output's indices
    (CSC * CSC -> CSR is built as CSC, then converted)."""
    found = []
    if out.block is not None:
        return found
    for a in accesses(stmt.expr):
        f = formats[stmt.operands.index(a.tensor)]
        if f.is_dense or f.block is not None:
            continue
        seq = [a.indices[d] for d in f.order if a.indices[d] in stmt.indices]
        seq = list(dict.fromkeys(seq)) + [i for i in stmt.indices if i not in seq]
        order = tuple(stmt.indices.index(i) for i in seq)
        if order != out.order and all(order != g.order for g in found):
            found.append(Format(out.levels, order, None, out.pos_width, out.crd_width))
    return found


@lru_cache(maxsize=4096)
def _result_dtype(stmt: Statement, dtypes: tuple[str, ...]) -> np.dtype:
    return infer_dtypes(stmt, {n: np.dtype(d) for n, d in zip(stmt.operands, dtypes)})[stmt.expr]


def _bare_bsr(spec) -> bool:
    """``spec`` is the name "bsr" without a block size."""
    return isinstance(spec, str) and spec.strip().lower() == "bsr"


#: block sizes tried for out_format="bsr", largest first (1 fails to compile in MLIR 22)
RESULT_BLOCKS = (4, 3, 2)


def _result_block(shape) -> tuple[int, ...]:
    """The block size of a plain "bsr" result of ``shape``: per dimension the largest of
    ``RESULT_BLOCKS`` that divides it."""
    if not shape:
        raise FormatError("out_format='bsr' picks its block size from the result's shape: call the kernel "
                          "once first, or name the size ('bsr2x2')")
    block = []
    for n in shape:
        b = next((b for b in RESULT_BLOCKS if n % b == 0), None)
        if b is None or n == 0:
            raise FormatError(f"out_format='bsr': no block size of {', '.join(map(str, RESULT_BLOCKS))} "
                              f"divides the result's shape {tuple(shape)}; name one ('bsr2x2') or use 'csr'")
        block.append(b)
    return tuple(block)


def _check_blocks(fmt: Format, shape) -> None:
    for n, b in zip(shape, fmt.block):
        if n % b:
            raise ShapeError(f"the result has shape {tuple(shape)}, which blocks of "
                             f"{'x'.join(map(str, fmt.block))} (out_format={str(fmt)!r}) do not tile")


def _check_block_result(fmt: Format, sparse: frozenset, shape) -> None:
    """What MLIR 22 cannot build as a block-sparse result, refused before compiling."""
    if fmt.block is None:
        return
    if sparse:
        raise FormatError(f"out_format={str(fmt)!r}: MLIR 22 cannot build a block-sparse (BSR) result from "
                          f"sparse operands (it fails to legalize the block conversion); use out_format='csr' "
                          f"and .tobsr() on the result")
    if 1 in fmt.block:
        raise FormatError(f"out_format={str(fmt)!r}: a block size of 1 fails to compile in MLIR 22; use 'csr'")
    if shape:
        _check_blocks(fmt, shape)
