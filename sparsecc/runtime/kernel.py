"""The ``Kernel`` API: what ``sc.compile`` returns - a statement plus the formats the user
fixed, called like a function, with its inspection (``last_formats``,
``last_specialization``, ``ir``).

Each call resolves the rest (formats from the operands, dtypes, index widths) into a
specialization, compiled once per process (memory cache) and once per machine (disk cache).
The jobs live apart: the in-memory call path in ``runtime/call.py`` (``Kernel.__call__``;
a call with operands it does not take goes to ``sparsecc/dispatch.py``), the call plans in
``runtime/plans.py``, specialization and format planning in ``runtime/specialization.py``,
compiling, loading, caching and the counters in ``runtime/loader.py``.  The names other modules import from
here (``STATS``, ``Stats``, ``Compiled``, ``specialize``, the AOT hooks) are re-exported.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import numpy as np

from ..errors import DeviceError, FormatError, OperandError, SparseccError
from ..expr import Access, Binary, Reduce, Statement, Unary, accesses, describe, walk
from ..formats import Format, resolve
from ..options import DEFAULT, Options
from ..parse import parse_notation
from ..patterns import check_sparse_result, default_result_format
from . import call as _call
from . import plans as _plans
from .plans import _CallInfo, bind_named
from .loader import STATS, Stats
from .operands import INT32_MAX
from .specialization import (Compiled, gpu_formats, _bare_bsr, _check_block_result, _result_block, _result_dtype,
                             compile_specialization, loaded_specialization, result_format_for, specialize)

__all__ = ["Kernel", "Specialization", "STATS", "Stats", "Compiled", "specialize", "bind_named",
           "compile_specialization", "result_format_for", "loaded_specialization", "_result_dtype"]

#: a sparse result's positions are 32-bit when the entries it can store number at most this:
#: a bound the call knows before the kernel runs (:func:`bound_rule`), else the product of
#: its dimensions (a module constant: tests make it small)
POS32_MAX = INT32_MAX


def bound_rule(stmt: Statement) -> tuple | None:
    """How a call of ``stmt`` bounds its result's stored entries before the kernel runs
    (:func:`entries_bound`), or None (only the product of the result's dimensions does).

    * ``("union", ops)``: element-wise ``+``, ``-``, ``*`` (and negation, scaling by a 0-d
      operand, a constant, or any expression of operands indexed by fewer of the result's
      indices: ``lam * exp(u[i]) * Id[i,k]``) of operands indexed by exactly the result's indices: the
      result's pattern is within the union of the accesses' patterns, so it stores at most
      their stored entries summed, one term per access (``ops``: the operand position of
      each; ``A[i,j] + A[j,i]`` reads A twice, and its union stores up to twice A's entries;
      a dense operand counts all its elements);
    * ``("product", x, y, xk, yk)``: ``sum[k](X * Y)`` of two operands (positions ``x``,
      ``y`` in the operand order; ``xk``/``yk``: where ``k`` is in each access), X indexed by
      one result index and ``k``, Y by the other and ``k``: each stored entry comes from at
      least one pair of stored entries of X and Y sharing ``k``;
    * ``("mask", ops)``: a product with a factor indexed by exactly the result's indices
      (operand positions ``ops``; SDDMM's ``sum[k](A[i,j] * X[i,k] * Y[j,k])``, also inside a
      sum): a product is stored only where each such factor is, so the result stores at most
      the fewest of their entries."""
    out = stmt.indices
    names = {t: n for n, t in enumerate(stmt.operands)}

    def elementwise(e) -> bool:
        if isinstance(e, Access):
            return len(e.indices) == len(out) and set(e.indices) == set(out)
        if isinstance(e, Unary):
            return e.fn == "neg" and elementwise(e.arg)
        if isinstance(e, Binary) and e.op in ("+", "-"):
            return elementwise(e.left) and elementwise(e.right)
        if isinstance(e, Binary) and e.op == "*":
            def scalar(x) -> bool:         # broadcast along the result: no index of its own
                if any(isinstance(n, Reduce) for n in walk(x)):
                    return False
                return all(len(a.indices) < len(out) and set(a.indices) <= set(out) for a in accesses(x))
            return ((elementwise(e.left) and (scalar(e.right) or elementwise(e.right)))
                    or (scalar(e.left) and elementwise(e.right)))
        return False

    def masks(e) -> list[int]:
        """Operands indexed by exactly the result's indices that ``e`` multiplies by."""
        if isinstance(e, Access):
            same = len(e.indices) == len(out) == len(set(e.indices)) and set(e.indices) == set(out)
            return [names[e.tensor]] if same else []
        if isinstance(e, Binary) and e.op == "*":
            return masks(e.left) + masks(e.right)
        if isinstance(e, Reduce) and e.op == "sum":      # a sum of products that each are
            return masks(e.body)
        return []

    e = stmt.expr
    if len(out) >= 1 and masks(e):      # the tighter where both apply (X[j] * (A * B): the fewer)
        return ("mask", tuple(masks(e)))
    if len(out) >= 1 and elementwise(e):
        return ("union", tuple(names[a.tensor] for a in accesses(e) if len(a.indices) == len(out)))
    if (len(out) == 2 and isinstance(e, Reduce) and e.op == "sum" and len(e.indices) == 1
            and isinstance(e.body, Binary) and e.body.op == "*"
            and isinstance(e.body.left, Access) and isinstance(e.body.right, Access)):
        k = e.indices[0]
        x, y = e.body.left, e.body.right
        if k in out:
            return None
        if any(len(a.indices) != 2 or k not in a.indices or len(set(a.indices)) != 2 for a in (x, y)):
            return None
        xo = next(ix for ix in x.indices if ix != k)
        yo = next(ix for ix in y.indices if ix != k)
        if {xo, yo} != set(out) or xo == yo:
            return None
        return ("product", names[x.tensor], names[y.tensor], x.indices.index(k), y.indices.index(k))
    return None


def _lengths_by(x, at: int):
    """The stored entries of each slice of SciPy CSR/CSC ``x`` along its dimension ``at``
    (its ``indptr`` steps), or None where ``x`` is not compressed along ``at``."""
    fmt = getattr(x, "format", None)
    if (fmt == "csr" and at == 0) or (fmt == "csc" and at == 1):
        p = np.asarray(x.indptr)
        return np.diff(p) if p.size > 1 else np.zeros(0, np.int64)
    return None


def entries_bound(rule: tuple, values, counts, total: int) -> int:
    """A bound on the stored entries of a result (``total``: its dimensions' product) by
    ``rule`` (:func:`bound_rule`), for operands ``values`` storing ``counts`` entries.
    SpGEMM tries the cheap bounds first: ``nnz(X) * nnz(Y)``; ``nnz(X)`` times Y's longest
    slice along ``k`` (or the reverse); then, for a CSR/CSC X with its ``k`` in ``indices``
    and Y compressed along ``k``, the exact count of products (O(nnz(X)))."""
    if rule[0] == "union":
        return min(total, sum(counts[o] for o in rule[1]))
    if rule[0] == "mask":
        return min(total, min(counts[o] for o in rule[1]))
    _, x, y, xk, yk = rule
    cx, cy = counts[x], counts[y]
    bound = min(total, cx * cy)
    if bound <= POS32_MAX:
        return bound
    ylen, xlen = _lengths_by(values[y], yk), _lengths_by(values[x], xk)
    for n, lens in ((cx, ylen), (cy, xlen)):
        if lens is not None:
            bound = min(bound, n * int(lens.max(initial=0)))
    if bound <= POS32_MAX:
        return bound
    fmt = getattr(values[x], "format", None)
    if ylen is not None and ((fmt == "csr" and xk == 1) or (fmt == "csc" and xk == 0)):
        # (a coordinate out of range is clipped: the kernel's own checks refuse it)
        ks = np.asarray(values[x].indices)
        bound = min(bound, int(ylen.take(ks, mode="clip").sum(dtype=np.int64)) if ylen.size else 0)
    return bound


@dataclass(frozen=True)
class Specialization:
    """What a kernel's last call ran (``Kernel.last_specialization()``): ``key``, the
    disk-cache key of its library (an ahead-of-time kernel: the library's path);
    ``formats``, the formats its operands were stored in (index widths resolved);
    ``out_format``, the sparse result's format (``None``: a dense result)."""

    key: str
    formats: tuple[Format, ...]
    out_format: Format | None


class Kernel:
    """A compiled-on-demand kernel, made by ``sc.compile``.

    Call it like the expression: ``k(A, x)`` (einsum: operands by position) or
    ``k(A=A, x=x)`` (index notation: by name, or by position in the order operands first
    appear). Each call validates its operands (unless compiled with ``check=False``) and
    returns a NumPy array or a SciPy sparse array, as ``sc.einsum`` does. The first call with
    a new combination of dtypes, formats and index widths compiles that specialization; later
    ones reuse it. Calls release the GIL and may run from several threads at once.

    Raises (on a call):
        OperandError: Missing, extra or malformed operands.
        ShapeError: Operand shapes that do not agree with the expression.
        DTypeError: Unsupported dtypes.
        CompileError: MLIR or LLVM could not compile the specialization.
    """

    def __init__(self, stmt: Statement, formats: dict[str, object], options: Options = DEFAULT,
                 source: str = "", out_format=None, prune: bool = False, check: bool = True):
        self.stmt = stmt
        self.formats = formats
        self.options = options
        self.source = source or str(stmt)
        self.out_format = out_format
        self.prune = bool(prune)
        self.check = bool(check)        # validate operands before native code runs
        self._ranks = {a.tensor: len(a.indices) for a in accesses(stmt.expr)}
        self._last: Compiled | None = None
        self._out_cache: dict = {}
        self._library: dict | None = None   # set by sc.aot.load: the only specializations
        #: run a one nest whose sparse result would store entries without a term, holding the
        #: sum's identity 0 there (``Compiled.inexact``): only for kernels whose results are
        #: read at a pattern of their own (``derived``: a gradient's values on its operand's
        #: pattern, where 0 is the right value); else the call raises InexactPatternError
        self.inexact_ok = False
        for name, spec in formats.items():
            if spec is not None and not _bare_bsr(spec):
                resolve(spec, self._ranks[name], describe(name))   # fail early on bad formats
        #: how a call bounds the result's stored entries (:func:`bound_rule`)
        self._bound_rule = bound_rule(stmt)
        #: operands given as plain "bsr": a non-BSR one becomes a bsr_array by SciPy's rule
        self._auto_bsr = tuple(k for k, n in enumerate(stmt.operands) if _bare_bsr(formats.get(n)))
        #: a plain "bsr" result's block size follows the result's shape: plans are per shape
        self._shape_keyed = _bare_bsr(out_format)
        if out_format is not None:
            if _bare_bsr(out_format) and len(stmt.indices) != 2:
                raise FormatError(f"the result has rank {len(stmt.indices)}, but 'bsr' is for matrices")
            if not stmt.indices and not (isinstance(out_format, str) and out_format.strip().lower() == "dense"):
                raise FormatError(f"'{self.source}' has a scalar result, which cannot be sparse")
            if not _bare_bsr(out_format):
                resolve(out_format, len(stmt.indices), "the result")

    def __repr__(self):
        fm = ", ".join(f"{describe(n)}: {self.formats.get(n) or 'from operand'}" for n in self.stmt.operands)
        return f"<sparsecc.Kernel '{self.source}' ({fm})>"

    # ------------------------------------------------------------------ calling
    def bind(self, *args, **kwargs) -> list:
        """The operands of a call ``k(*args, **kwargs)`` in operand order (by position for
        einsum kernels, by position and/or name for index notation); an OperandError for
        extra, unknown, repeated or missing operands.  Nothing is validated or converted."""
        ops = self.stmt.operands
        named = not ops[0].startswith("#") if ops else False
        if named:
            return bind_named(self.source, ops, args, kwargs)
        if kwargs:
            raise OperandError(f"einsum kernels take operands by position, got keyword(s) {', '.join(kwargs)}")
        if len(args) != len(ops):
            raise OperandError(f"'{self.source}' takes {len(ops)} operand(s), got {len(args)}")
        return list(args)

    __call__ = _call.call                    # runtime/call.py: the in-memory call path
    _prepare = _plans.prepare
    _operand_widths = _plans.operand_widths
    #: the module whose ``POS32_MAX`` the repeated-call path reads (tests lower it)
    _limits = sys.modules[__name__]

    _call_info: "_CallInfo | None" = None    # made on the first call (see _static)

    def _static(self) -> "_CallInfo":
        """What every call of this kernel shares (made on the first call)."""
        info = self._call_info
        if info is None:
            info = self._call_info = _CallInfo(self.stmt)
        return info

    def repeated_call(self) -> "_CallInfo":
        """For a front end that chains this kernel's calls itself (the planner's closures,
        ``sparsecc/planned_fast.py``): the holder whose ``fast`` is the repeated-call path of
        the kind of call made last (``fast(kernel, args)``: the result, or ``call.MISS``
        where the operands are not of its kind; every check still runs), None before one."""
        return self._static()

    @property
    def from_library(self) -> bool:
        """Whether the kernel runs an ahead-of-time library's code (``sc.aot.load``)."""
        return self._library is not None

    def operand_descriptions(self) -> list[str]:
        """How errors name each operand (``"operand 0"``, ``"'A'"``), in operand order."""
        return list(self._static().whats)

    def result_format(self, sparse_operands, shape: tuple[int, ...]) -> Format | None:
        """The result's format (``None``: dense) for a call whose operands named in
        ``sparse_operands`` are sparse and whose result has ``shape`` (front ends that plan
        calls themselves: ``sparsecc.dask``)."""
        return self._result_format(frozenset(sparse_operands), tuple(shape))

    def result_dtype(self, dtypes) -> np.dtype:
        """The result's NumPy dtype for operands of ``dtypes`` (names, in operand order)."""
        return np.dtype(_result_dtype(self.stmt, tuple(dtypes)))

    def _entries_wide(self, values, counts, shape) -> bool:
        """Whether a call's result could store more than ``POS32_MAX`` entries (then its
        positions are 64-bit): by the bound this statement gives for ``values`` (storing
        ``counts`` entries) before the kernel runs, else by ``shape``'s product."""
        total = math.prod(shape)
        if total <= POS32_MAX:
            return False
        rule = self._bound_rule
        return rule is None or entries_bound(rule, values, counts, total) > POS32_MAX

    def _result_format(self, sparse: frozenset, shape: tuple[int, ...],
                       entries_wide: bool | None = None) -> Format | None:
        """The result's format for this call (``None``: dense), index widths resolved:
        ``Options.index_width`` if set; else 32-bit coordinates when every dimension fits,
        32-bit positions when the entries the result can store are counted in 32 bits
        (``entries_wide``: the call's bound says not, :meth:`_entries_wide`; None: by the
        product of the dimensions)."""
        if entries_wide is None:
            entries_wide = math.prod(shape) > POS32_MAX
        wide = (max(shape, default=0) > INT32_MAX, entries_wide)
        k = (sparse, wide, shape if _bare_bsr(self.out_format) else None)
        got = self._out_cache.get(k, False)
        if got is not False:
            return got
        spec = self.out_format
        if spec is None:
            spec = default_result_format(self.stmt, sparse)
        fmt = resolve(spec, len(self.stmt.indices), "the result", _result_block(shape) if _bare_bsr(spec) else None)
        if fmt.is_dense:
            got = None
        else:
            if self.options.device != "cpu":
                raise DeviceError(f"'{self.source}' has a sparse result ({fmt}), which cannot run with "
                                  f"device={self.options.device!r}: MLIR's sparsifier keeps kernels with sparse "
                                  f"outputs entirely on the CPU (no GPU code); ask for a dense result "
                                  f"(out_format='dense') or run it on the CPU")
            check_sparse_result(self.stmt, sparse)
            _check_block_result(fmt, sparse, shape)
            want = self.options.index_width
            if want is None:
                got = fmt.with_widths(64 if wide[1] else 32, 64 if wide[0] else 32)
            else:
                got = fmt.with_widths(want, want)
            if (got.crd_width == 32 and wide[0]) or (got.pos_width == 32 and wide[1]):
                # a width fixed by index_width or the result's format that could overflow
                raise OperandError(
                    f"the result has shape {shape}: {'a dimension' if wide[0] else 'its entry count'} "
                    f"may not fit in 32 bits, but {'Options(index_width=32)' if want == 32 else 'its format'} "
                    f"fixes 32-bit {'coordinates' if wide[0] else 'positions'}; use index_width=None or 64")
        self._out_cache[k] = got
        return got

    def vjp(self, cotangent, *args, wrt=None, **kwargs) -> tuple:
        """The gradient of each operand of ``self(*args, **kwargs)`` for the output cotangent,
        computed by compiled kernels (sparse operands: on their pattern); docs/torch.md."""
        from ..autodiff import vjp
        return vjp(self, cotangent, *args, wrt=wrt, **kwargs)

    def derived(self, statement: str, out_format=None) -> "Kernel":
        """The kernel of index-notation ``statement`` with this kernel's options and the
        result format ``out_format`` (the adjoints ``vjp`` runs), made once per process."""
        try:
            key = (statement, self.options, out_format)
            k = _derived.get(key)
        except TypeError:           # an unhashable format object: no memo
            key, k = None, None
        if k is None:
            k = Kernel(parse_notation(statement), {}, self.options, source=statement, out_format=out_format)
            k.inexact_ok = True     # read on its operand's pattern (autodiff._values_on): stored 0s are right
            if key is not None:
                _derived[key] = k
        return k

    # -------------------------------------------------------------- inspection
    def last_formats(self) -> tuple[Format, ...] | None:
        """The formats the last call's specialization stored its operands in, in operand
        order, index widths resolved (``None`` before the first call).  They can differ from
        the kernel's own: BSR co-iterated with another sparse operand runs as CSR, and a
        sparse result reads contraction operands row-wise (sc.explore's ``ran as``)."""
        comp = self._last
        return None if comp is None else comp.formats

    def last_specialization(self) -> Specialization | None:
        """The specialization the last call ran: its cache key, its operands' formats and
        its result's format (``None`` before the first call)."""
        comp = self._last
        return None if comp is None else Specialization(comp.key, comp.formats, comp.out_format)

    def ir(self, stage: str = "mlir") -> str:
        """The kernel's IR at one stage of compilation.

        Of the last call's specialization, or of float64 operands if never called.

        Args:
            stage: ``"mlir"`` (as emitted), ``"sparsified"``, ``"llvm-dialect"`` or ``"llvm"``;
                for ``device="cuda"`` also ``"gpu"`` (the loops outlined into a ``gpu.module``)
                and ``"ptx"`` (the PTX embedded in the library; needs no device).

        Returns:
            The IR as text."""
        stages = ("mlir", "sparsified", "llvm-dialect", "llvm")
        if self.options.device == "cuda":
            stages += ("gpu", "ptx")
        if stage not in stages:
            raise SparseccError(f"unknown stage {stage!r}; stages: {', '.join(stages)}")
        comp = self._last
        if comp is None and self._library:      # sc.aot.load: the library's kernel, never a compile
            comp = next(iter(self._library.values()))
        if comp is None:
            fmts = []
            for n in self.stmt.operands:
                spec = self.formats.get(n) or "dense"
                w = self.options.index_width or 32
                fmts.append(resolve(spec, self._ranks[n], describe(n)).with_widths(w, w))
            if self.options.device != "cpu":
                fmts = [f if f.is_dense else f.with_widths(w, w) for f in gpu_formats(self.stmt, fmts)]
            out = self._result_format(frozenset(n for n, f in zip(self.stmt.operands, fmts) if not f.is_dense), ())
            comp = specialize(self.stmt, tuple(fmts), ("float64",) * len(fmts), self.options, out)
        if stage == "mlir" and comp.mlir:
            return comp.mlir
        got = comp.stages()             # an AOT kernel's "mlir": the text its compile parsed
        if stage == "ptx" and not got.get("ptx"):
            from .loader import read_info
            from .targets import no_gpu_code_reason
            raise DeviceError(no_gpu_code_reason(read_info(comp.info_path)))
        return got[stage]


#: Kernel.derived's memo
_derived: dict = {}
