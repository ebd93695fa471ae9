"""The user-facing calls: ``einsum``, ``evaluate``, ``compile``, ``cache_info``."""

from __future__ import annotations

from .errors import FormatError, OperandError, SparseccError
from .options import DEFAULT, Options
from .parse import looks_like_notation, parse_einsum, parse_notation
from .runtime.kernel import STATS, Kernel, Stats
from .semiring import apply as apply_semiring
from .semiring import lookup as lookup_semiring

_kernels: dict = {}


def _einsum_arity(subscripts: str) -> int:
    return subscripts.split("->")[0].count(",") + 1


def _kernel(expr: str, positional: tuple, named: dict, options: Options | None,
            out_format=None, prune: bool = False, check: bool = True, semiring=None) -> Kernel:
    options = options or DEFAULT
    if not isinstance(options, Options):
        raise SparseccError(f"options must be sc.Options, got {type(options).__name__}")
    try:
        key = (expr, positional, tuple(sorted(named.items())), options, out_format, bool(prune), bool(check),
               semiring)
        k = _kernels.get(key)
    except TypeError:           # unhashable format objects: no memo
        key, k = None, None
    if k is not None:
        return k
    if not isinstance(expr, str):
        raise SparseccError(f"an expression is a string, got {type(expr).__name__}")
    if semiring is not None:
        semiring = lookup_semiring(semiring)
    if looks_like_notation(expr):
        if semiring is not None:
            raise SparseccError("semiring= is for einsum subscripts; in index notation write the monoid "
                                "and the multiply in the statement, e.g. 'y[i] = min[j](W[j,i] + d[j])'")
        stmt = parse_notation(expr)
        if len(positional) > len(stmt.operands):
            raise OperandError(f"'{expr}' has {len(stmt.operands)} operand(s) but {len(positional)} formats were given")
        formats = dict(zip(stmt.operands, positional))
        for name, f in named.items():
            if name not in stmt.operands:
                raise FormatError(f"format given for {name!r}, which is not an operand of '{expr}' "
                                  f"(operands: {', '.join(stmt.operands)})")
            formats[name] = f
    else:
        if named:
            raise FormatError(f"einsum kernels take formats by position, got keyword(s) {', '.join(named)}")
        n = _einsum_arity(expr)
        stmt = parse_einsum(expr, n)
        if semiring is not None:
            stmt = apply_semiring(stmt, semiring)
        if positional and len(positional) != n:
            raise OperandError(f"'{expr}' has {n} operand(s) but {len(positional)} formats were given")
        formats = dict(zip(stmt.operands, positional))
    k = Kernel(stmt, formats, options, source=expr, out_format=out_format, prune=prune, check=check)
    if key is not None:
        _kernels[key] = k
    return k


_OUT_DOC = """
    ``out_format``: the result's format - ``"dense"`` (a NumPy array), ``"csr"``, ``"csc"``,
    ``"coo"``, ``"dcsr"``, ``"dcsc"``, ``"csf"``, ``"bsrRxC"``, an MLIR map or a Format (a
    SciPy array: csr/csc/bsr where SciPy has the layout, else an N-d coo_array).  ``None``
    follows the pattern rules (docs/sparse-results.md): dense for rank 0/1 results and for
    patterns dense in some dimension, else CSR (rank 2) or COO (rank 3+).
    ``prune``: drop stored zeros from a sparse result (entries that cancel are kept otherwise).
    ``check``: validate every operand's buffers before native code runs (index ranges, index
    pointers, lengths; O(nnz), vectorized).  ``check=False`` skips it: unsafe, for trusted hot
    loops only - a malformed operand is then a wild memory access.
"""


def compile(expr: str, *formats, options: Options | None = None, out_format=None, prune: bool = False,
            check: bool = True, semiring=None, autotune: bool = False, **named_formats) -> Kernel:  # noqa: A001
    """A reusable kernel.

    ``sc.compile("ij,j->i", "csr", "dense")`` (einsum: one format per operand, by position) or
    ``sc.compile("y[i] = A[i,j] * x[j]", A="csr")`` (index notation: formats by operand name).
    An operand without a format runs in its own (a csr_array as CSR, a NumPy array dense).
    ``autotune=True``: the first call explores formats for the operands without one (a list
    of formats: the candidates for that operand) on its operands, remembers the choice on
    disk, and every call runs the chosen kernel (docs/explore.md).
    """
    if autotune:
        if semiring is not None:
            raise SparseccError("autotune=True does not take a semiring yet; compile with explicit formats "
                                "(sc.explore does not either)")
        from .explore import AutotunedKernel
        return AutotunedKernel(expr, tuple(formats), named_formats, options, out_format, prune, check)
    return _kernel(expr, tuple(formats), named_formats, options, out_format, prune, check, semiring)


def einsum(subscripts: str, *operands, formats=None, options: Options | None = None, out_format=None,
           prune: bool = False, check: bool = True, semiring=None):
    """``numpy.einsum`` over sparse and dense operands, computed by compiled code.

    ``formats``: one format per operand (``None`` entries keep the operand's own).
    ``semiring``: ``"min_plus"``, ``"lor_land"``, ... or ``sc.Semiring(add, mul, identity)``:
    the product over that semiring, with GraphBLAS's rules - only stored entries take part,
    and an output entry with no term gets the identity (dense result) or is not stored
    (sparse result); docs/semirings.md.
    """
    if looks_like_notation(subscripts):
        raise SparseccError("einsum takes subscripts like 'ij,j->i'; use sc.evaluate for index notation")
    parse_einsum(subscripts, len(operands))   # subscript and operand-count errors, in einsum's terms
    if formats is not None:
        formats = tuple(formats)
        if len(formats) != len(operands):
            raise OperandError(f"formats names {len(formats)} format(s) for {len(operands)} operand(s)")
    return _kernel(subscripts, formats or (), {}, options, out_format, prune, check, semiring)(*operands)


def evaluate(statement: str, *, formats: dict | None = None, options: Options | None = None,
             out_format=None, prune: bool = False, check: bool = True, **operands):
    """Evaluate one index-notation statement: ``sc.evaluate("y[i] = A[i,j] * x[j]", A=A, x=x)``."""
    if not (isinstance(statement, str) and looks_like_notation(statement)):
        raise SparseccError(f"evaluate takes a statement like 'y[i] = A[i,j] * x[j]', got {statement!r}")
    return _kernel(statement, (), dict(formats or {}), options, out_format, prune, check)(**operands)


for _f in (compile, einsum, evaluate):
    _f.__doc__ += _OUT_DOC


def cache_info() -> Stats:
    """Counters: ``hits`` (calls served by a loaded kernel), ``disk_hits`` (kernels found
    on disk), ``misses`` (compilations)."""
    return Stats(STATS.hits, STATS.disk_hits, STATS.misses)
