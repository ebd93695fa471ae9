"""Ahead-of-time libraries: ``sc.aot.build(name, kernels, folder)`` and ``sc.aot.load(folder)``.

See docs/aot.md.  The implementation is in ``sparsecc.runtime.aot``; loading imports neither
MLIR nor llvmlite.  Jacobians and Hessians (``sc.jacobian``/``sc.hessian``, or
:class:`Derivative` for their layout, triangle and example operands) are built as their
derivative statement's kernel plus C entry points for the pattern and the values, and, when
example operands fix the pattern at build time, its constant tables.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .aot_plans import Planned, derivative_examples, expand, plain_dtype
from .errors import FormatError, SparseccError
from .runtime.aot import Library, load
from .runtime.aot import build as _build

__all__ = ["build", "load", "Library", "Derivative", "Planned"]


class Derivative:
    """A Jacobian or Hessian for ``sc.aot.build``.

    ``operands``: example operands (by name) whose patterns fix the derivative's pattern at
    build time: the header then publishes it as constant tables, and each operand's format is
    taken from it (a SciPy CSR/CSC/COO array, or dense).  Without them the pattern is
    computed at run time by ``<lib>_<kernel>_pattern`` and ``formats`` names each matrix
    operand's format (vectors and scalars are dense).  ``layout``: ``"csr"``, ``"csc"`` or
    ``"coo"`` (row-major triplets), the order of the values and tables; ``triangle``:
    ``"lower"``/``"upper"`` for a Hessian (symmetric solvers, IPOPT take one).
    """

    def __init__(self, derivative, operands: dict | None = None, *, formats: dict | None = None,
                 layout: str = "csr", triangle: str | None = None):
        from .derivatives import Hessian, Jacobian
        if not isinstance(derivative, Jacobian):
            raise SparseccError(f"sc.aot.Derivative takes sc.jacobian(...) or sc.hessian(...), got "
                                f"{type(derivative).__name__}")
        if layout not in ("csr", "csc", "coo"):
            raise SparseccError(f"layout must be 'csr', 'csc' or 'coo', got {layout!r}")
        if triangle not in (None, "lower", "upper"):
            raise SparseccError(f"triangle must be None, 'lower' or 'upper', got {triangle!r}")
        if triangle is not None and not isinstance(derivative, Hessian):
            raise SparseccError("triangle= is for Hessians (a Jacobian is not symmetric)")
        if getattr(derivative, "tensor", None) is not None:
            raise SparseccError(f"{derivative!r}: Jacobians with respect to stored values or of matrix results "
                                f"are not built ahead of time yet (vector results, dense vector wrt)")
        if derivative.statement is None:
            raise SparseccError(f"{derivative!r} is identically zero: nothing to build")
        self.derivative, self.layout, self.triangle = derivative, layout, triangle
        self.operands = dict(operands) if operands is not None else None
        self.formats = dict(formats or {})

    def kernel_and_record(self):
        """(the kernel of the derivative statement, the record ``runtime.aot.build`` takes)."""
        from .api import compile as compile_
        from .derivatives.symbolic import DELTA
        from .expr import accesses
        from .patterns import default_result_format
        J = self.derivative
        stmt = J.statement
        ranks = {a.tensor: len(a.indices) for a in accesses(stmt.expr)}
        fmts = {}
        for n in stmt.operands:
            base = J.aliases.get(n, n)
            if n == DELTA:
                fmts[n] = "csr"
            elif base in self.formats:
                fmts[n] = self.formats[base]
            elif self.operands is not None and base in self.operands:
                fmts[n] = _format_of(base, self.operands[base])
            elif ranks[n] <= 1:
                fmts[n] = "dense"
            else:
                raise FormatError(f"{J!r}: operand {base!r} needs a format: pass example operands "
                                  f"(sc.aot.Derivative(J, {{{base!r}: ...}})) or formats={{{base!r}: 'csr'}}")
        sparse = frozenset(n for n, f in fmts.items() if f != "dense")
        if default_result_format(stmt, sparse) == "dense":
            raise SparseccError(f"{J!r}: its pattern is full with these formats (every entry): build "
                                f"its statement as a kernel with a dense result instead")
        kernel = compile_(str(stmt), options=J.options, out_format="csc" if self.layout == "csc" else "csr",
                          **fmts)
        delta = next((a for a in accesses(stmt.expr) if a.tensor == DELTA), None)
        from .derivatives import Hessian
        record = {"kind": "hessian" if isinstance(J, Hessian) else "jacobian", "of": J.source, "wrt": J.wrt,
                  "layout": self.layout, "triangle": self.triangle,
                  "delta": DELTA if delta is not None else None,
                  "delta_index": delta.indices[1] if delta is not None else None,
                  "aliases": dict(J.aliases), "pattern": None,
                  # the formats the C caller passes (the kernel may read one transposed)
                  "formats": {J.aliases.get(n, n): str(f) for n, f in fmts.items() if n != DELTA and f != "dense"}}
        if self.operands is not None:
            ops = {n: x for n, x in self.operands.items() if n in J.names}
            kw = {"triangle": self.triangle} if self.triangle else {}
            record["pattern"] = J.pattern("csc" if self.layout == "csc" else "csr", **kw, **ops)
            record["shape"] = J._shape(ops)
            if _has_split(kernel):          # built as its split steps (docs/aot.md, Nested reductions)
                examples = derivative_examples(J, kernel, self.operands)
                if examples is not None:
                    return Planned(kernel, examples), record
        return kernel, record


def _format_of(name: str, x) -> str:
    if sp.issparse(x):
        if x.format not in ("csr", "csc", "coo"):
            raise FormatError(f"example operand {name!r} is {x.format.upper()}: give it as CSR, CSC or COO")
        return x.format
    np.asarray(x)
    return "dense"


def build(name: str, kernels: dict, outdir: str, **options) -> str:
    """``runtime.aot.build`` (docs/aot.md), where a kernel may also be ``sc.jacobian(...)``,
    ``sc.hessian(...)`` or an :class:`sc.aot.Derivative` of one, or an
    :class:`sc.aot.Planned` kernel (its plan fixed at build time from example operands)."""
    from .derivatives import Jacobian
    plain, records, plans = {}, {}, {}
    for kname, k in (kernels.items() if isinstance(kernels, dict) else ()):
        if isinstance(k, Jacobian):
            k = Derivative(k)
        if isinstance(k, Derivative):
            plain[kname], records[kname] = k.kernel_and_record()
        else:
            plain[kname] = k
    if any(isinstance(k, Planned) for k in plain.values()):
        dtype = plain_dtype(options.pop("dtype", "float64"), {n: getattr(k, "kernel", k) for n, k in plain.items()})
        expanded = {}
        for kname, k in plain.items():
            if not isinstance(k, Planned):
                expanded[kname] = k
                continue
            steps, dts, record = expand(kname, k, dtype)
            clash = sorted(set(steps) & (set(plain) - {kname}))
            if clash:
                raise SparseccError(f"kernel {kname!r}: its steps are built as kernels {', '.join(steps)}, "
                                    f"but {clash[0]!r} names another kernel; rename it")
            expanded.update(steps)
            dtype.update(dts)
            if record is not None:
                plans[kname] = dict(record, kernel=k.kernel)
        plain, options["dtype"] = expanded, dtype
    for kname, k in (plain.items() if isinstance(plain, dict) else ()):
        _refuse_nested(kname, k, kname in records)
    return _build(name, plain if isinstance(kernels, dict) else kernels, outdir,
                  derivatives=records or None, plans=plans or None, **options)


build.__doc__ = (_build.__doc__ or "") + "\n\n" + build.__doc__


def _has_split(k) -> bool:
    try:
        _refuse_nested("k", k, False)
    except SparseccError:
        return True
    return False


def _refuse_nested(kname, k, derivative: bool) -> None:
    """A SparseccError for a kernel with a sparse result whose body holds a reduction the
    JIT runs as a sparse step of its own (plan/nested.py; docs/aot.md "Nested
    reductions"): built as one loop nest, that reduction fills a dense temporary of the
    result's shape and the sparse result stores every entry - a result of another pattern
    than the JIT's (and, for a derivative, than its tables), in O(result shape)."""
    from .runtime.kernel import Kernel
    from .plan.nested import split_plan
    from .plan.path import product_form
    from .formats import resolve
    from .patterns import default_result_format
    if not isinstance(k, Kernel):
        return                                  # the builder says what is wrong with it
    stmt = k.stmt
    from .expr import accesses
    ranks = {a.tensor: len(a.indices) for a in accesses(stmt.expr)}
    dense = {}
    for op in stmt.operands:
        spec = k.formats.get(op)
        if spec is None:
            return                              # the builder's error: an operand without a format
        dense[op] = resolve(spec, ranks[op], f"kernel {kname!r} operand {op!r}").is_dense
    spec = k.out_format if k.out_format is not None else \
        default_result_format(stmt, frozenset(n for n, d in dense.items() if not d))
    if not isinstance(spec, str):
        spec = "csr" if not getattr(spec, "is_dense", False) else "dense"
    if spec.strip().lower() == "dense" or product_form(stmt) is not None:
        return
    split = split_plan(stmt, dense, spec)
    if split is None:
        return
    steps = "; ".join(s[5] for s in split[0][:-1])
    what = (f"derivative kernel {kname!r} ({stmt})" if derivative else f"kernel {kname!r} ('{stmt}')")
    todo = ("give example operands (sc.aot.Derivative(H, {name: matrix})) to build it as its steps, or build "
            "the derivative of each term of the objective (each a product, which a library builds "
            "exactly) and add them in the caller, or compile its statement with a dense result "
            "(sc.compile(H.statement, ..., out_format='dense'))"
            if derivative else
            f"give example operands, sc.aot.Planned(kernel, operands), to build it as its steps ({steps}; "
            f"then the statement reading it), or give the kernel a dense result (out_format='dense')")
    raise SparseccError(f"{what} has a sparse result and a nested reduction over a sparse operand, which the "
                        f"JIT computes as a sparse step of its own; a library builds one loop nest, where that "
                        f"reduction fills a dense temporary of the result's shape and the result would store "
                        f"every entry: {todo} (docs/aot.md, Nested reductions)")
