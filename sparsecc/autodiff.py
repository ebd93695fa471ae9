"""Reverse-mode derivatives of sparsecc kernels, computed by other sparsecc kernels.

``vjp(kernel, cotangent, *operands)`` (also ``Kernel.vjp``) returns the gradient of each
operand.  The gradient of operand ``X`` (read once) is one index-notation statement,
compiled and cached like any kernel: the cotangent times the chain-rule factors of the path
from the root to ``X`` (``_chain``: sums, products, scalars, division by scalars, ``pow``,
``min``/``max``, ``where``, the DSL's functions, sums nested inside), summed at the root
over every index ``X`` does not have.  A root ``max``/``min`` reduction (or semiring) gives
the gradient to the terms attaining the result, ties split evenly (a count kernel first).

- **Sparse operands** get a gradient on their own pattern (masked semantics, as
  ``torch.sparse.mm`` and JAX): the adjoint statement is multiplied by a pattern operand
  ``P`` (the operand's indices, values 1), so it is an SDDMM evaluated only at the stored
  coordinates - no dense matrix of the operand's shape ever exists.  The result has the
  operand's type (CSR, CSC, COO, BSR), its index arrays and its entry order; stored zeros
  get their gradient too.  An uncoalesced COO operand gets one entry per coordinate (its
  coalesced pattern, sorted), as ``torch.sparse.mm`` gives; a CSR/CSC operand repeating a
  coordinate keeps its index arrays, each value the gradient at its coordinate.
- **Repeated indices** (``ii->``): the adjoint carries ``where(index(i) == index(i_), ...)``
  for a sparse operand; for a dense operand the gradient over the distinct indices is placed
  on the diagonal of a zero array (NumPy writes it; it computes nothing).
- **Indices only the operand has** (``ij->i``: ``j`` is summed over ``A`` alone): the
  gradient does not depend on them; a sparse operand's pattern supplies them, a dense
  operand's gradient is a read-only broadcast view (``numpy.broadcast_to``).
- **Complex values**: ``vjp`` is JAX's transpose by default; ``conjugate=True`` (what
  ``sparsecc.torch`` uses) gives torch's conjugate Wirtinger derivative, the factors
  conjugated by the DSL's ``conj`` inside the adjoint statement (``_conjugated``).
- Other monoids, operators without a derivative, ``stored``/``dense`` and operands read
  twice raise :class:`NotDifferentiableError` (a :class:`~sparsecc.errors.SparseccError`).

This module imports no torch; ``sparsecc.torch`` builds its autograd on it.  It imports
nothing above the runtime either (``runtime/kernel.py`` imports it for ``Kernel.vjp``):
the adjoint statements run as ``kernel.derived(statement, out_format)``, kernels with the
forward kernel's options.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .errors import OperandError, ShapeError, SparseccError
from .expr import CASTS, Access, Binary, Const, Dense, Expr, Index, Reduce, Statement, Stored, Unary, Where, accesses, show

_OUT, _COT, _PAT, _RES, _CNT = "Grad_", "Gcot_", "Ppat_", "Res_", "Cnt_"


class NotDifferentiableError(SparseccError):
    """The kernel's statement has no derivative sparsecc can compile (yet)."""


def _body(stmt: Statement, source: str):
    """(the statement's expression under its root reduction, that reduction's monoid: None
    for a sum, "max" or "min"); NotDifferentiableError for other monoids and for operands
    read more than once."""
    e, monoid = stmt.expr, None
    if isinstance(e, Reduce):
        if e.op in ("max", "min"):
            monoid = e.op
        elif e.op != "sum":
            raise NotDifferentiableError(
                f"'{source}' reduces with the monoid '{e.op}' (a semiring or a stored-only reduction): "
                f"no backward for it (sum, max and min have one)")
        e = e.body
    names = [a.tensor for a in accesses(e)]
    if len(set(names)) != len(names):
        raise NotDifferentiableError(f"'{source}' reads an operand more than once: no gradient for that yet "
                                     f"(pass it as two operands)")
    return e, monoid


class _Printer:
    """Index notation for subtrees of the forward statement, its operands renamed; records
    the operands and indices it prints.  The text is ``expr.show``'s (the one printer) of
    the subtree rewritten: operands renamed, a nested reduction's indices given fresh names
    (so that the adjoint's root sum can reuse the originals)."""

    def __init__(self, rename: dict):
        self.rename, self.names, self.indices = rename, set(), set()
        self._bound: dict = {}          # a nested reduction's indices -> fresh names
        self._fresh = 0

    def __call__(self, e: Expr) -> str:
        return show(self._tree(e))

    def _idx(self, i: str) -> str:
        return self._bound.get(i, i)

    def _tree(self, e: Expr) -> Expr:
        if isinstance(e, Access):
            self.names.add(e.tensor)
            self.indices.update(i for i in e.indices if i not in self._bound)
            return Access(self.rename[e.tensor], tuple(self._idx(i) for i in e.indices))
        if isinstance(e, Index):
            if e.name not in self._bound:
                self.indices.add(e.name)
            return Index(self._idx(e.name))
        if isinstance(e, Reduce):
            saved = dict(self._bound)
            for i in e.indices:
                self._fresh += 1
                self._bound[i] = f"{i}_r{self._fresh}_"
            try:
                return Reduce(e.op, tuple(self._idx(i) for i in e.indices), self._tree(e.body), e.identity)
            finally:
                self._bound = saved
        if isinstance(e, Const):
            return e
        if isinstance(e, Unary):
            return Unary(e.fn, self._tree(e.arg))
        if isinstance(e, Binary):
            return Binary(e.op, self._tree(e.left), self._tree(e.right))
        if isinstance(e, Where):
            return Where(self._tree(e.cond), self._tree(e.left), self._tree(e.right))
        if isinstance(e, (Stored, Dense)):
            return type(e)(self._tree(e.body))
        raise NotDifferentiableError(f"no derivative through {type(e).__name__} yet")


#: d f(X) / dX for the DSL's functions, as a factor in X
_DERIVATIVES = {
    "neg": "(-1)", "exp": "exp({x})", "log": "pow({x}, -1.0)", "sqrt": "(0.5 * pow(sqrt({x}), -1.0))",
    "sin": "cos({x})", "cos": "(-sin({x}))", "tan": "(1 + tan({x}) * tan({x}))",
    "tanh": "(1 - tanh({x}) * tanh({x}))", "sinh": "(0.5 * (exp({x}) + exp(-{x})))",
    "asin": "pow(sqrt(1 - {x} * {x}), -1.0)", "atan": "pow(1 + {x} * {x}, -1.0)", "expm1": "exp({x})",
    "log1p": "pow(1 + {x}, -1.0)", "abs": "where({x} > 0, 1, where({x} < 0, -1, 0))",
    "ceil": "(0)", "floor": "(0)",
    # conversions (astype_float32, ...): 1 into a float/complex dtype, 0 into an integer one
    **{f: "(1)" if f[7:].startswith(("float", "complex")) else "(0)" for f in CASTS},
}


class _Raw(str):
    """A factor already in the gradient's convention (a non-holomorphic function's, such as
    ``abs`` of a complex value): not conjugated as holomorphic derivatives are."""


#: in a chain: a ``conj`` node (the gradient flowing through it is conjugated)
_CONJ = object()


def _chain(e: Expr, target: str, show: _Printer, source: str, dtypes=None):
    """The factors (index-notation strings) whose product is d e / d target, or None when
    ``e`` does not read ``target`` (an operand read once: the chain rule along one path).
    Listed from the target up; a ``conj`` node on the path is the marker ``_CONJ`` (see
    ``_conjugated``).  ``dtypes``: each node's dtype (for complex ``abs``)."""
    if isinstance(e, Access):
        return [] if e.tensor == target else None
    if isinstance(e, (Const, Index)):
        return None
    if isinstance(e, Unary):
        inner = _chain(e.arg, target, show, source, dtypes)
        if inner is None:
            return None
        if e.fn == "conj":
            return inner + [_CONJ]
        if e.fn == "abs" and dtypes is not None and dtypes[e.arg].kind == "c":
            # |z| is real and not holomorphic: d loss / d conj(z) is g * z / |z| (0 at z = 0),
            # torch's sgn rule
            x = show(e.arg)
            return inner + [_Raw(f"where(abs({x}) == 0, 0, {x} * pow(abs({x}), -1.0))")]
        return inner + [_DERIVATIVES[e.fn].format(x=show(e.arg))]
    if isinstance(e, Where):
        if any(a.tensor == target for a in accesses(e.cond)):
            return ["(0)"]                  # a condition has no derivative
        lc, rc = _chain(e.left, target, show, source, dtypes), _chain(e.right, target, show, source, dtypes)
        if lc is not None:
            return lc + [f"where({show(e.cond)}, 1, 0)"]
        if rc is not None:
            return rc + [f"where({show(e.cond)}, 0, 1)"]
        return None
    if isinstance(e, Binary):
        lc, rc = _chain(e.left, target, show, source, dtypes), _chain(e.right, target, show, source, dtypes)
        if lc is None and rc is None:
            return None
        left = lc is not None
        op = e.op
        if op == "+":
            return lc if left else rc
        if op == "-":
            return lc if left else rc + ["(-1)"]
        if op == "*":
            return lc + [show(e.right)] if left else rc + [show(e.left)]
        if op == "/":
            if left:
                return lc + [f"pow({show(e.right)}, -1.0)"]
            return rc + [f"(-{show(e.left)})", f"pow({show(e.right)}, -2.0)"]
        if op == "pow":
            # torch's pow_backward: 0 where the exponent is 0 (d x**0 / dx, also at x = 0,
            # where R * x**(R-1) is 0 * inf), and d/dR is 0 where x = 0 and R >= 0 (x**R *
            # log(x) is 0 * -inf there: a zero, stored or not, made the whole sum NaN)
            L, R = show(e.left), show(e.right)
            if left:
                if isinstance(e.right, Const) and e.right.value != 0:
                    return lc + [R, f"pow({L}, {R} - 1)"]
                return lc + [f"where({R} == 0, 0, {R} * pow({L}, {R} - 1))"]
            factor = f"pow({L}, {R}) * log({L})"
            if isinstance(e.left, Const) and e.left.value != 0:
                return rc + [factor]
            if dtypes is not None and dtypes[e.right].kind == "c":
                # torch: a real exponent (imag 0) with real part >= 0; |R+1| >= |R-1| is Re(R) >= 0
                nonneg = f"land({R} == conj({R}), abs({R} + 1) >= abs({R} - 1))"
            else:
                nonneg = f"{R} >= 0"
            return rc + [f"where(land({L} == 0, {nonneg}), 0, {factor})"]
        if op in ("max", "min"):            # ties split evenly, as torch.maximum / torch.minimum
            L, R = show(e.left), show(e.right)
            a, b = (L, R) if left else (R, L)
            cmp = ">" if op == "max" else "<"
            return (lc if left else rc) + [f"where({a} {cmp} {b}, 1, where({a} == {b}, 0.5, 0))"]
        raise NotDifferentiableError(f"'{source}': the operator '{op}' has no derivative (comparisons, "
                                     f"Boolean and structural operators, //, %)")
    if isinstance(e, Reduce) and e.op == "sum":
        # d/dX sum[k](body) = sum[k](d body/dX): the adjoint's root sum covers k
        return _chain(e.body, target, show, source, dtypes)
    if isinstance(e, Stored):
        raise NotDifferentiableError(f"'{source}': no derivative through stored(...) yet")
    if isinstance(e, Dense):
        raise NotDifferentiableError(f"'{source}': no derivative through dense(...) yet")
    raise NotDifferentiableError(f"'{source}': no derivative through a nested reduction {e.op}[...] yet")


def _conjugated(factors: list, cot: str, conjugate: bool) -> list:
    """The cotangent and the factors of a chain as a list of index-notation factors to
    multiply.  Real chains (and JAX's convention without ``conj``/complex ``abs`` on the path)
    are the flat product ``cot * f1 * ... * fn``.  Otherwise the gradient is built from the
    root down: a holomorphic factor multiplies it (conjugated for torch's convention,
    ``conjugate``: g * conj(f'(z)), the conjugate Wirtinger derivative), a ``conj`` node
    conjugates it, a ``_Raw`` factor (complex ``abs``: a real intermediate) multiplies its
    real part ((g + conj(g)) / 2, as torch keeps the real part of a real tensor's gradient)."""
    if not conjugate and not any(f is _CONJ or isinstance(f, _Raw) for f in factors):
        return [cot] + list(factors)
    g = cot
    for f in reversed(factors):                 # from the root down to the operand
        if f is _CONJ:
            g = f"conj({g})"
        elif isinstance(f, _Raw):
            g = f"((({g}) + conj({g})) * 0.5) * {f}"
        else:
            g = f"({g}) * {f'conj({f})' if conjugate else f}"
    return [g]


def _access(name: str, idx) -> str:
    return f"{name}[{','.join(idx)}]" if idx else name


def _element_coords(x):
    """Coordinates of each stored element of sparse ``x`` in its storage order (one array per
    dimension; for BSR, block by block, each block row-major)."""
    f = x.format
    if f == "coo":
        return tuple(np.asarray(c) for c in x.coords)
    if f in ("csr", "csc"):
        major = np.repeat(np.arange(len(x.indptr) - 1, dtype=np.int64), np.diff(x.indptr))
        minor = np.asarray(x.indices, dtype=np.int64)
        return (major, minor) if f == "csr" else (minor, major)
    if f == "bsr":
        R, C = x.blocksize
        brow = np.repeat(np.arange(len(x.indptr) - 1, dtype=np.int64), np.diff(x.indptr))
        bcol = np.asarray(x.indices, dtype=np.int64)
        r = (brow[:, None, None] * R + np.arange(R)[None, :, None]) + np.zeros((1, 1, C), np.int64)
        c = (bcol[:, None, None] * C + np.arange(C)[None, None, :]) + np.zeros((1, R, 1), np.int64)
        return r.reshape(-1), c.reshape(-1)
    raise OperandError(f"no gradient for a sparse operand in format {f!r} yet")


def _pattern(x, dtype):
    """A pattern operand (values 1) with ``x``'s stored coordinates, and the result format
    the sampled adjoint is built in."""
    f = x.format
    if f in ("csr", "csc") and x.has_canonical_format:
        cls = sp.csr_array if f == "csr" else sp.csc_array
        return cls((np.ones(len(x.indices), dtype), x.indices, x.indptr), shape=x.shape), f
    coords = _element_coords(x)
    if len(coords) == 2:
        # COO, BSR and CSR/CSC with repeated coordinates (SciPy's non-canonical format: a
        # pattern of ones there would count the product once per duplicate): the coalesced
        # element pattern, row-wise
        key = np.unique(np.ravel_multi_index(coords, x.shape))
        r, c = np.unravel_index(key, x.shape)
        indptr = np.searchsorted(r, np.arange(x.shape[0] + 1)).astype(np.int64)
        return sp.csr_array((np.ones(len(key), dtype), c.astype(np.int64), indptr), shape=x.shape), "csr"
    key = np.unique(np.ravel_multi_index(coords, x.shape))
    p = sp.coo_array((np.ones(len(key), dtype), np.unravel_index(key, x.shape)), shape=x.shape)
    p.has_canonical_format = True
    return p, "coo"


def _values_on(x, g):
    """The values of sparse result ``g`` at every stored element of ``x``, in ``x``'s order
    and shape of ``x.data`` (0 where ``g`` stores nothing).  Only moves values."""
    if g.format == x.format and g.format in ("csr", "csc") and np.array_equal(g.indptr, x.indptr) \
            and np.array_equal(g.indices, x.indices):
        return np.asarray(g.data)
    want = np.ravel_multi_index(_element_coords(x), x.shape) if x.nnz else np.zeros(0, np.int64)
    have = np.ravel_multi_index(_element_coords(g), g.shape) if g.nnz else np.zeros(0, np.int64)
    vals = np.asarray(g.data).reshape(-1)
    if len(have) > 1 and np.any(have[1:] < have[:-1]):
        order = np.argsort(have, kind="stable")
        have, vals = have[order], vals[order]
    out = np.zeros(len(want), vals.dtype if len(vals) else np.asarray(g.data).dtype)
    if len(have):
        pos = np.minimum(np.searchsorted(have, want), len(have) - 1)
        hit = have[pos] == want
        out[hit] = vals[pos[hit]]
    return out.reshape(np.shape(x.data))


def _coalesced_pattern(x, dtype):
    """COO operand ``x``'s coalesced pattern (sorted, one entry per coordinate; zeros of
    ``dtype``): where an uncoalesced operand's gradient lives."""
    key = np.unique(np.ravel_multi_index(tuple(x.coords), x.shape)) if x.nnz else np.zeros(0, np.int64)
    out = sp.coo_array((np.zeros(len(key), dtype), np.unravel_index(key, x.shape)), shape=x.shape)
    out.has_canonical_format = True
    return out


def _like(x, values):
    """A sparse array of ``x``'s type over ``x``'s index arrays holding ``values``."""
    f = x.format
    if f == "csr":
        return sp.csr_array((values, x.indices, x.indptr), shape=x.shape)
    if f == "csc":
        return sp.csc_array((values, x.indices, x.indptr), shape=x.shape)
    if f == "bsr":
        return sp.bsr_array((values, x.indices, x.indptr), shape=x.shape)
    out = sp.coo_array((values, tuple(x.coords)), shape=x.shape)
    out.has_canonical_format = bool(x.has_canonical_format)
    return out


def _reads(factors: list) -> tuple[set, set]:
    """The operand names and free indices of the product of ``factors`` (index notation)."""
    from .expr import free_indices
    from .parse import _Parser
    _, _, e = _Parser("Q_[] = " + " * ".join(factors)).statement()
    return {a.tensor for a in accesses(e)}, set(free_indices(e))


def _grad_one(kernel, target: str, body: Expr, stmt: Statement, cot, ops: list, attained=None,
              conjugate: bool = False, dtypes=None):
    """The gradient of operand ``target``.  ``attained``: for a root max/min, (the result,
    how many terms attain it), as dense operands.  ``conjugate``: torch's convention for
    complex values (see ``vjp``); ``dtypes``: each node's dtype."""
    pos = stmt.operands.index(target)
    x = ops[pos]
    sparse = sp.issparse(x)
    shape = np.shape(x) if not sparse else x.shape
    sk = next(a.indices for a in accesses(body) if a.tensor == target)
    rename = {n: f"X{k}_" for k, n in enumerate(stmt.operands)}
    show = _Printer(rename)
    factors = _chain(body, target, show, kernel.source, dtypes)
    if factors is None:
        factors = ["(0)"]
    factors = _conjugated(factors, _access(_COT, stmt.indices), conjugate)
    args = {_COT: cot}
    if attained is not None:
        # the entries that attain the max/min share its gradient evenly (as torch.amax)
        factors.append(f"stored(where({show(body)} == {_access(_RES, stmt.indices)}, 1.0, 0.0) / "
                       f"{_access(_CNT, stmt.indices)})")
        args[_RES], args[_CNT] = attained
    # what the adjoint reads: the printer also saw subtrees whose derivative dropped them
    # (d neg(x)/dx = -1 reads no x), so read the factors' own operands and free indices
    names, indices = _reads(factors)
    bound = set(stmt.indices) | indices
    args.update({rename[n]: ops[stmt.operands.index(n)] for n in stmt.operands if rename[n] in names})
    # the operand's own dimension names: a repeated index gets a fresh name and a delta factor
    dims, delta, seen = [], [], {}
    for d, i in enumerate(sk):
        if i in seen:
            fresh = f"{i}_{d}_"
            dims.append(fresh)
            delta.append((seen[i], fresh))
        else:
            seen[i] = i
            dims.append(i)
    dt = _result_dtype(x)

    def statement(out_idx, fs, names):
        used = [i for i in dict.fromkeys(list(stmt.indices) + sorted(names)) if i not in out_idx]
        rhs = " * ".join(fs)
        return f"{_access(_OUT, out_idx)} = " + (f"sum[{','.join(used)}]({rhs})" if used else rhs)
    if sparse:
        pat, fmt = _pattern(x, dt)
        args[_PAT] = pat
        fs = [_access(_PAT, dims)] + factors + [f"where(index({i}) == index({j}), 1, 0)" for i, j in delta]
        g = kernel.derived(statement(dims, fs, bound | set(dims)), fmt)(**args)
        if x.format == "coo" and not x.has_canonical_format:
            # duplicates: one gradient per coordinate, on the coalesced pattern (as torch.sparse.mm)
            x = _coalesced_pattern(x, dt)
        return _like(x, _real_for(_values_on(x, g), dt))
    # dense: the gradient over the distinct indices the derivative binds, then placed
    keep = [i for i in dict.fromkeys(sk) if i in bound]
    g = kernel.derived(statement(keep, factors, bound), "dense")(**args)
    g = _real_for(np.asarray(g), dt)
    uniq = list(dict.fromkeys(sk))
    if keep == list(sk):
        return g
    if keep != uniq:            # indices only the operand has: the gradient is constant along them
        g = g.reshape([shape[sk.index(i)] if i in keep else 1 for i in uniq])
        g = np.broadcast_to(g, [shape[sk.index(i)] for i in uniq])
    if len(uniq) == len(sk):
        return np.array(g)          # the user's own, writable array (not a broadcast view)
    out = np.zeros(shape, dt)
    letters = {i: chr(ord("a") + n) for n, i in enumerate(uniq)}
    np.einsum(f"{''.join(letters[i] for i in sk)}->{''.join(letters[i] for i in uniq)}", out)[...] = g
    return out


def _real_for(g, dt):
    """Gradient values ``g`` in the operand's dtype ``dt``: a real operand of a complex
    expression gets the real part (torch's rule), read from the complex values."""
    if g.dtype.kind == "c" and dt.kind != "c":
        g = g.real
    return g.astype(dt, copy=False)


def _result_dtype(x):
    dt = np.dtype(x.dtype)
    if dt.kind not in "fc":
        raise NotDifferentiableError(f"gradients are for floating-point and complex operands, got {dt}")
    return dt


def _attained(kernel, body, stmt: Statement, ops, result):
    """(the max/min result, the number of terms attaining it) for a root max/min."""
    if result is None:
        result = kernel(*ops)
    # a sparse result stays sparse: where it stores nothing no term was stored either (a
    # monoid reduces over stored terms), so the count and the gradient need no entry there
    result = result if sp.issparse(result) else np.asarray(result)
    rename = {n: f"X{k}_" for k, n in enumerate(stmt.operands)}
    show = _Printer(rename)
    text = (f"{_access(_CNT, stmt.indices)} = plus[{','.join(stmt.expr.indices)}]"
            f"(where({show(body)} == {_access(_RES, stmt.indices)}, 1, 0))")
    args = {rename[n]: ops[stmt.operands.index(n)] for n in show.names}
    args[_RES] = result if stmt.indices else result[()]
    cnt = kernel.derived(text, "dense")(**args)
    return args[_RES], (np.asarray(cnt) if stmt.indices else np.asarray(cnt)[()])


def vjp(kernel, cotangent, *args, wrt=None, result=None, conjugate=False, **kwargs):
    """Gradients of ``kernel(*args, **kwargs)`` for the output cotangent ``cotangent``.

    Returns a tuple with one gradient per operand, in the kernel's operand order (``None``
    for operands not in ``wrt``, a collection of operand positions).  A dense operand's
    gradient is a NumPy array of its shape; a sparse operand's is a SciPy array of its type
    over its index arrays (its pattern: stored zeros included).  The cotangent is a NumPy
    array (or a SciPy sparse array) of the result's shape.  For complex operands this is the
    transpose of the linear map (no conjugation, as JAX's ``vjp``); ``conjugate=True`` gives
    torch's convention instead, the conjugate Wirtinger derivative (for ``y = A x``:
    ``grad_A = g conj(x)^T`` on A's pattern, ``grad_x = conj(A)^T g``), with ``conj`` inside
    the compiled adjoint statements; a real operand then gets the real part.  ``result``:
    the forward result, for a max/min reduction (computed again if not given)."""
    from .runtime.operands import as_operand
    if getattr(kernel, "_library", None) is not None:
        raise NotDifferentiableError("an ahead-of-time kernel holds only its own specializations; "
                                     "compile the adjoints with sc.compile")
    stmt = kernel.stmt
    ops = [as_operand(x, f"operand {n}") for x, n in zip(kernel.bind(*args, **kwargs), stmt.operands)]
    body, monoid = _body(stmt, kernel.source)
    from .expr import index_sizes
    sizes = index_sizes(stmt, {n: tuple(np.shape(x)) if not sp.issparse(x) else tuple(x.shape)
                               for n, x in zip(stmt.operands, ops)})
    want = tuple(sizes[i] for i in stmt.indices)
    cotangent = as_operand(cotangent, "the cotangent")
    if tuple(cotangent.shape) != want:
        raise ShapeError(f"the cotangent of '{kernel.source}' must have the result's shape {want}, "
                         f"got {tuple(cotangent.shape)}")
    if not want:
        cotangent = cotangent.toarray()[()] if sp.issparse(cotangent) else cotangent[()]
    attained = None
    if monoid is not None:
        attained = _attained(kernel, body, stmt, ops, result)
    from .expr import infer_dtypes
    dtypes = infer_dtypes(stmt, {n: np.dtype(x.dtype) for n, x in zip(stmt.operands, ops)})
    conjugate = bool(conjugate) and (np.dtype(cotangent.dtype).kind == "c"
                                     or any(d.kind == "c" for d in dtypes.values()))
    grads = [None] * len(stmt.operands)
    for pos, name in enumerate(stmt.operands):
        if wrt is not None and pos not in wrt:
            continue
        grads[pos] = _grad_one(kernel, name, body, stmt, cotangent, ops, attained, conjugate, dtypes)
    return tuple(grads)
