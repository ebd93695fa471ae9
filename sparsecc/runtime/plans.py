"""Call plans: what the in-memory call path decides once per kernel and once per kind of
operands, never from an operand's contents.

Per kernel (:class:`_CallInfo`): operand names for messages, where each index takes its
size, the plans made so far.  Per kind of operands (type, dtype, rank, index widths: see
:func:`_key_of`), a plan (:class:`_Plan`, made by :func:`prepare`): resolved formats and
index widths, a loader per operand, the loaded specialization and the argument layout
(``memref.ArgPacker``).  ``runtime/call.py`` runs calls with them; ``Kernel._prepare`` is
:func:`prepare` and ``Kernel._operand_widths`` is :func:`operand_widths`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .. import dtypes as dt
from ..errors import FormatError, OperandError, ShapeError
from ..expr import Statement, accesses, bind_by_name, describe, index_sizes
from ..formats import Format, resolve
from . import fast_paths
from . import specialization as _spec
from .memref import ArgPacker
from .operands import aos_like, as_operand, coo_aos, default_format, index_dtypes, loader, nnz_bound, own_widths
from .operand_orders import sparse_result_formats
from .specialization import Compiled, _result_dtype, _without_coiterated_blocks, gpu_formats, inexact_pattern, specialize
from .validate import check_widths, validate


def bind_named(source: str, names, args, kwargs) -> list:
    """The operands of index-notation statement ``source`` (operand ``names``), given by
    position and/or by name, in ``names`` order (:func:`sparsecc.expr.bind_by_name`)."""
    return bind_by_name(f"'{source}'", names, args, kwargs)


_SPARSE_TYPES = {sp.csr_array, sp.csr_matrix, sp.csc_array, sp.csc_matrix, sp.coo_array, sp.coo_matrix}
_BSR_TYPES = {sp.bsr_array, sp.bsr_matrix}
_DIRECT = frozenset({np.ndarray} | _SPARSE_TYPES | _BSR_TYPES)    # no as_operand needed


def _key_of(x) -> tuple:
    """What a call plan depends on about operand ``x`` (its kind, never its contents):
    the type (for SciPy: the format), the value dtype, the rank or block size, the index
    dtypes (they decide the index widths)."""
    t = type(x)
    if t is np.ndarray:
        return t, x.dtype, x.ndim
    if t in _SPARSE_TYPES:
        return t, x.data.dtype, len(x.shape), index_dtypes(x)
    if t in _BSR_TYPES:
        return t, x.data.dtype, x.data.shape[1:], index_dtypes(x)
    if isinstance(x, np.ndarray):
        return t, x.dtype, x.ndim
    return (t, x.format, x.dtype, len(x.shape), tuple(x.blocksize) if x.format == "bsr" else None,
            index_dtypes(x))


class _CallInfo:
    """What every call of one kernel shares: how operands are named in messages, where
    each index takes its size from, and the call plans made so far."""

    __slots__ = ("stmt", "n", "named", "whats", "slot", "src", "same", "ranks", "out_slots", "plans", "fast")

    def __init__(self, stmt: Statement):
        ops = stmt.operands
        self.stmt = stmt
        self.n = len(ops)
        self.named = bool(ops) and not ops[0].startswith("#")
        self.whats = tuple(describe(n) for n in ops)
        names = list(dict.fromkeys([i for a in accesses(stmt.expr) for i in a.indices] + list(stmt.indices)))
        self.slot = {i: j for j, i in enumerate(names)}
        src, same, ranks = {}, [], []
        for a in accesses(stmt.expr):
            k = ops.index(a.tensor)
            ranks.append((k, len(a.indices)))
            for d, i in enumerate(a.indices):
                j = self.slot[i]
                if j in src:
                    same.append((k, d, j))
                else:
                    src[j] = (k, d)
        self.src = tuple(src.get(j) for j in range(len(names)))
        self.same = tuple(same)
        self.ranks = tuple(dict.fromkeys(ranks))
        self.out_slots = tuple(self.slot[i] for i in stmt.indices)
        self.plans: dict = {}
        #: the repeated-call path of the plan used last (see :func:`_fast_source`), or None
        self.fast = None

    def sizes(self, shapes: list) -> list[int]:
        """The size of every index (in slot order); a ShapeError where shapes disagree."""
        for k, r in self.ranks:
            if len(shapes[k]) != r:
                self._fail(shapes)
        try:
            sizes = [shapes[k][d] for k, d in self.src]
        except TypeError:          # an index no operand binds
            self._fail(shapes)
        for k, d, j in self.same:
            if shapes[k][d] != sizes[j]:
                self._fail(shapes)
        return sizes

    def _fail(self, shapes):
        sizes = index_sizes(self.stmt, {n: tuple(s) for n, s in zip(self.stmt.operands, shapes)})
        unbound = [i for i in self.slot if i not in sizes]
        raise ShapeError(f"index {unbound[0]!r} takes its size from no operand" if unbound else
                         f"operand shapes {[tuple(s) for s in shapes]} do not fit '{self.stmt}'")


class _LoadedKey:
    """A key of the loaded-kernel table with its hash computed once (a Statement hashes its
    whole expression tree each time): a plan checks on every call that its kernel is still
    the loaded one, so forgetting loaded kernels reaches kernels already planned."""

    __slots__ = ("key", "hash")

    def __init__(self, key):
        self.key = key
        self.hash = hash(key)

    def __hash__(self):
        return self.hash

    def __eq__(self, other):
        return other is self.key or other == self.key


def _loaded_key(comp: Compiled) -> _LoadedKey | None:
    for k, v in list(_spec._loaded.items()):
        if v is comp:
            return _LoadedKey(k)
    return None


@dataclass(eq=False, slots=True)
class _Plan:
    """How to call a kernel on operands of one kind (see ``Kernel._prepare``).  Holds nothing
    read from an operand's buffers: those are read and validated on every call."""

    comp: Compiled
    key: _LoadedKey | None          # where ``comp`` is in ``_loaded``; None: ahead-of-time
    library: dict | None
    formats: tuple[Format, ...]     # widths resolved
    out_fmt: Format | None
    transposed: bool                # the result, built as ``out_fmt`` (CSR), is returned as CSC
    loaders: tuple                  # per operand: operands.load_*
    converts: tuple | None          # per operand: the dtype its values are converted to
    size_slots: tuple[int, ...]     # the kernel's size arguments, as slots of the call's sizes
    out_dtype: np.dtype
    packer: ArgPacker
    #: operands whose indices range check the kernel does itself (validate.check_deferred)
    guarded: frozenset = frozenset()
    fast: object = None             # the repeated-call path (see _fast_source), or None

    def current(self, k: "Kernel") -> bool:
        if self.library is not None:
            return k._library is self.library
        return k._library is None and self.key is not None and _spec._loaded.get(self.key) is self.comp


_resolved: dict = {}


def _resolve_cached(spec, rank, what, block) -> Format:
    try:
        k = (spec, rank, block)
        f = _resolved.get(k)
    except TypeError:
        return resolve(spec, rank, what, block)
    if f is None:
        f = _resolved[k] = resolve(spec, rank, what, block)
    return f


def _to_bsr(args, positions, whats) -> list:
    """Operands given as plain "bsr" that are not SciPy BSR arrays, as ``bsr_array``s with
    the block size SciPy's ``tobsr()`` picks (``scipy.sparse``'s ``estimate_blocksize``): a
    change of layout.  A block size with a 1 then runs as CSR (see ``formats.resolve``)."""
    args = list(args)
    for k in positions:
        x = args[k]
        if sp.issparse(x) and x.format == "bsr":
            continue
        x = as_operand(x, whats[k])
        validate(x, whats[k])       # SciPy's conversion trusts the buffers: check them first
        if x.ndim != 2:
            raise FormatError(f"{whats[k]} has rank {x.ndim}, but 'bsr' is for matrices")
        try:
            args[k] = sp.bsr_array(x)
        except (TypeError, ValueError) as err:
            raise OperandError(f"{whats[k]} cannot be stored as BSR: {err}") from None
    return args


def prepare(self, values, keys, shapes, sizes, wide, huge=False) -> _Plan:
    """The plan for calls with operands like ``values``: resolved formats and widths,
    a loader per operand, the compiled kernel and its argument layout.  It depends only
    on what ``keys``, ``wide`` and ``huge`` (a dimension much larger than the stored
    entries: see ``specialization.huge_dimension``) say about the operands, never on
    their contents."""
    info = self._static()
    ops = self.stmt.operands
    dtypes, fmts = [], []
    for name, x, what in zip(ops, values, info.whats):
        dtypes.append(dt.lookup(x.dtype, what).name)
        own, block = default_format(x)
        spec = self.formats.get(name)
        if spec is None and own == "coo" and x.ndim >= 2 and aos_like(x):
            fmts.append(coo_aos(x.ndim))    # its coordinates are one (nnz, rank) array: read it as is
            continue
        fmts.append(_resolve_cached(spec or own, self._ranks[name], what, block))
    fmts = _without_coiterated_blocks(fmts)
    if self.options.device != "cpu":
        fmts = gpu_formats(self.stmt, fmts)     # a GPU loop needs a dense outer level (docs/gpu.md)
    out_shape = tuple(sizes[j] for j in info.out_slots)
    out_fmt = self._result_format(frozenset(n for n, f in zip(ops, fmts) if not f.is_dense), out_shape,
                                  bool(wide and wide[2]))
    # a contraction's CSC result is built as CSR and transposed by SciPy (O(nnz)): MLIR 22's
    # conversion inside the kernel grew with the square of the entries
    transposed = (out_fmt is not None and not huge and self._library is None and self.options.device == "cpu"
                  and _spec.csc_built_as_csr(self.stmt, out_fmt))
    if transposed:
        out_fmt = _spec._in_dimension_order(out_fmt)
    if out_fmt is not None and (huge or self.options.device != "cpu"
                                or not fast_paths.reads_transposed(self.stmt, fmts, tuple(dtypes), out_fmt)):
        fmts = sparse_result_formats(self.stmt, fmts, huge, out_fmt, self._library is not None)
    fmts = [f if f.is_dense else self._operand_widths(f, x, shape, what, wide and wide[0][k])
            for k, (f, x, shape, what) in enumerate(zip(fmts, values, shapes, info.whats))]
    out = _result_dtype(self.stmt, tuple(dtypes))
    converts = [None] * len(ops)
    if out.kind == "c":
        # The sparsifier cannot lower real->complex conversions inside a sparse loop:
        # store such an operand's values as complex (numpy.einsum converts them too).
        for k, f in enumerate(fmts):
            if not f.is_dense and dtypes[k] != out.name:
                converts[k] = out
                dtypes[k] = out.name
    formats, dtypes = tuple(fmts), tuple(dtypes)
    if self._library is not None:
        comp = self._library.get((formats, dtypes, out_fmt))
        if comp is None:
            (fm, dd, _), = self._library
            raise OperandError(
                f"this ahead-of-time kernel '{self.source}' was built for operands "
                f"{', '.join(f'{f} {d}' for f, d in zip(fm, dd))}; got "
                f"{', '.join(f'{f} {d}' for f, d in zip(formats, dtypes))}")
        key = None
    else:
        comp = specialize(self.stmt, formats, dtypes, self.options, out_fmt, huge)
        if comp.inexact and not self.inexact_ok:
            raise inexact_pattern(self.stmt)        # before any native code runs
        key = _loaded_key(comp)
    sig = comp.signature
    layout = [len(s) if f.is_dense else (len(f.fields()), len(f.levels)) for f, s in zip(formats, shapes)]
    out_layout = (len(out_fmt.fields()), len(out_fmt.levels)) if out_fmt is not None else len(out_shape)
    return _Plan(comp=comp, key=key, library=self._library, formats=formats, out_fmt=out_fmt, transposed=transposed,
                 guarded=_guarded_operands(comp, values, formats, len(sig.index_order)),
                 loaders=tuple(loader(x, f) for x, f in zip(values, formats)),
                 converts=tuple(converts) if any(c is not None for c in converts) else None,
                 size_slots=tuple(info.slot[i] for i in sig.index_order),
                 out_dtype=np.dtype(sig.out_dtype),
                 packer=ArgPacker(len(sig.index_order), layout, out_layout))

_OWN_ORDER = {"csr": (None, (0, 1)), "csc": ((1, 0),)}


def _guarded_operands(comp, values, formats, n_sizes: int) -> frozenset:
    """The positions of the SciPy CSR/CSC operands whose ``indices`` the kernel reads as
    they are (their own layout, a coordinate width that holds every index) from an argument
    it range-checks itself (``Compiled.guarded``, passes/guards.py)."""
    guarded = getattr(comp, "guarded", ())
    if not guarded:
        return frozenset()
    out, at = set(), n_sizes
    for k, (x, f) in enumerate(zip(values, formats)):
        if f.is_dense:
            at += 1
            continue
        fields = f.fields()
        if (type(x) in _SPARSE_TYPES and x.format in _OWN_ORDER and len(x.shape) == 2
                and f.levels == ("dense", "compressed") and f.block is None
                and f.order in _OWN_ORDER[x.format] and f.crd_width
                and x.indices.dtype.itemsize * 8 <= f.crd_width
                and at + fields.index(("crd", 1)) in guarded):
            out.add(k)
        at += len(fields) + 1
    return frozenset(out)


def operand_widths(self, f: Format, x, shape, what: str, wide) -> Format:
    """``f`` with its index widths resolved (a width the format fixes is kept):
    ``Options.index_width`` if set; else 64 bits where a dimension or the entry count
    does not fit in int32; else the widths of the operand's own index arrays where the
    kernel reads them as they are (int64 SciPy indices are not copied); else 32 bits.
    ``wide``: (a dimension, the entry count) need 64 bits."""
    want = self.options.index_width
    crd = None
    if want is None:
        if wide and (wide[0] or wide[1]):
            want = 64
        else:
            own = None if f.pos_width or f.crd_width else own_widths(x, f)
            want, crd = own if own is not None else (32, None)
    # a width the format fixes is kept; an unset crdWidth follows a set posWidth (docs/formats.md)
    f = f.with_widths(want, f.pos_width or crd or want)
    nnz = nnz_bound(x)
    if self.options.index_width == 32 and wide and (
            (f.crd_width == 32 and wide[0]) or (f.pos_width == 32 and wide[1])):
        raise OperandError(f"{what} needs 64-bit indices ({max(shape)} is its largest dimension, it stores "
                           f"up to {nnz} entries; 2^31 - 1 is the most 32 bits hold), but "
                           f"Options(index_width=32) fixes 32; use index_width=None or 64")
    check_widths(f, shape, nnz, what)
    return f
