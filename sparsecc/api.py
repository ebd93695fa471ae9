"""The user-facing calls: ``einsum``, ``evaluate``, ``compile``, ``cache_info``."""

from __future__ import annotations

import string

import numpy as np
import scipy.sparse as sp

from .errors import DeviceError, FormatError, OperandError, ParseError, ShapeError, SparseccError
from .formats import Format
from .options import DEFAULT, Options
from .parse import looks_like_notation, parse_einsum, parse_notation
from .make import _kernels, make_kernel as _kernel  # noqa: F401  (the memo of Kernel objects)
from .plan import check_optimize
from .runtime.kernel import STATS, Kernel, Stats
from .runtime.operands import as_operand, to_coo
from .runtime.validate import validate


def _on_device(options: Options | None, device) -> Options | None:
    """``options`` with ``device`` (``None``: the options' own, ``"cpu"`` by default)."""
    if device is None:
        return options
    options = DEFAULT if options is None else options
    if not isinstance(options, Options):
        raise SparseccError(f"options must be sc.Options, got {type(options).__name__}")
    if device == options.device:
        return options
    import dataclasses
    return dataclasses.replace(options, device=device)     # validated by Options


def compile(expr: str, *formats, options: Options | None = None, out_format=None, prune: bool = False,
            check: bool = True, semiring=None, autotune: bool = False, device: str | None = None,
            optimize=True, outputs=None, **named_formats) -> Kernel:  # noqa: A001
    """Compile an expression into a reusable kernel.

    ``sc.compile("ij,j->i", "csr", "dense")`` (einsum subscripts: one format per operand, by
    position) or ``sc.compile("y[i] = A[i,j] * x[j]", A="csr")`` (index notation: formats by
    operand name). Nothing compiles until the first call; each combination of formats,
    dtypes and index widths seen in calls compiles once and is cached in memory and on disk.
    Shapes are not part of a kernel: one kernel serves operands of every size.

    Args:
        expr: Einsum subscripts (``"ij,j->i"``, ellipsis allowed) or an index-notation
            statement (``"y[i] = A[i,j] * x[j]"``).
        *formats (str | Format | list | None): One format per operand, by position (einsum; for index notation: in the
            order operands first appear). ``None`` or a missing entry keeps the operand's own
            format at call time (a ``csr_array`` as CSR, a NumPy array dense). A format is a
            name (``"csr"``, ``"csc"``, ``"coo"``, ``"dcsr"``, ``"dcsc"``, ``"csf"``,
            ``"bsr4x4"``, ``"dense"``), an MLIR level map or an ``sc.Format``. With
            ``autotune=True``, a list of formats gives the candidates for that operand.
        options: Code generation options (``sc.Options``); ``None``: the defaults.
        out_format (str | Format | None): The result's format. ``"dense"`` gives a NumPy array; ``"csr"``, ``"csc"``,
            ``"coo"``, ``"dcsr"``, ``"dcsc"``, ``"csf"``, ``"bsrRxC"`` (``"bsr"``: the largest of
            4, 3, 2 dividing each dimension; dense operands only), an MLIR level map or an
            ``sc.Format`` give a SciPy array (csr/csc/bsr where SciPy has the layout, else an N-d
            ``coo_array``). ``None`` follows the pattern rules (docs: Sparse results): dense for
            rank 0/1 results and patterns dense in some dimension, else CSR (rank 2) or COO.
        prune: Drop stored zeros from a sparse result (entries that cancel are kept otherwise).
        check: Validate every operand's buffers before native code runs (index ranges, index
            pointers, lengths; O(nnz), vectorized). ``False`` skips it: for trusted inputs in
            hot loops only, since a malformed operand is then a wild memory access.
        semiring (str | Semiring | None): Einsum only: ``"min_plus"``, ``"lor_land"``, ``"plus_pair"``, ... or an
            ``sc.Semiring``: the product over that semiring, with GraphBLAS's rules (only stored
            entries take part). In index notation, write the monoid in the statement instead.
        autotune: The first call explores formats for the operands without a fixed one on its
            operands (``sc.explore``), remembers the choice on disk, and every call runs the
            chosen kernel. Not with a semiring or an ellipsis.
        device: ``"cpu"`` (default) or ``"cuda"``: PTX for an NVIDIA GPU; NumPy/SciPy operands
            are copied to the GPU and the result back (docs: GPU).
        optimize: How a statement of three or more factors runs: ``True`` (default) plans it
            from the operands (contraction order, intermediates' formats; docs: Planning);
            ``"greedy"``/``"optimal"`` choose the search; a path in ``numpy.einsum``'s format
            (``[(1, 2), (0, 1)]``) fixes the order; ``False`` runs one loop nest.
        outputs: A program only (several statements): the outputs a call returns (default:
            every statement's); statements no output needs are not run.
        **named_formats (str | Format | list | None): Index notation only: formats by operand name (``A="csr"``).

    Several statements (separated by newlines or ``;``) make a ``sparsecc.program.Program``:
    a call returns a dict of outputs by name, a statement may read an earlier one's output,
    and equal steps run once (docs: Planning, Programs).

    Returns:
        A callable kernel: ``k(A, x)`` or ``k(A=A, x=x)`` returns the result (a NumPy array or
        a SciPy sparse array); ``k.ir()`` shows the MLIR. An ``AutotunedKernel`` with
        ``autotune=True``; an ``EinsumFamily`` (one kernel per operand ranks) for subscripts
        with an ellipsis.

    Raises:
        ParseError: The expression or subscripts are malformed.
        ShapeError: Operand shapes do not agree with the expression.
        FormatError: A format is unknown or does not fit its operand.
        DTypeError: An operand's dtype is not supported.
        OperandError: An operand is missing, extra, malformed (bad index arrays) or of an
            unsupported type.
        SparseccError: Any other misuse (a bad ``options``, ``prune`` or ``check`` value).
        CompileError: MLIR or LLVM could not compile the kernel (a known limitation or a
            compiler crash; the Python process keeps running).
    """
    options = _on_device(options, device)
    from .program import compile_program, is_program
    if is_program(expr) or outputs is not None:
        if autotune or semiring is not None or formats:
            raise SparseccError("a program of several statements takes formats by input name (A='csr'); "
                                "not autotune=, semiring= or formats by position")
        return compile_program(expr, named_formats, options, out_format, prune, check, optimize, outputs)
    if autotune:
        if options is not None and options.device != "cpu":
            raise DeviceError("autotune=True explores formats on the CPU only; compile with explicit formats "
                              "for device='cuda'")
        if isinstance(expr, str) and "..." in expr:
            raise SparseccError("autotune=True does not take subscripts with an ellipsis yet; name every "
                                "index (its kernel depends on the operands' ranks)")
        if semiring is not None:
            raise SparseccError("autotune=True does not take a semiring yet; compile with explicit formats "
                                "(sc.explore does not either)")
        from .explore import AutotunedKernel
        return AutotunedKernel(expr, tuple(formats), named_formats, options, out_format, prune, check)
    if isinstance(expr, str) and "." in expr and not looks_like_notation(expr):
        if named_formats:
            raise FormatError(f"einsum kernels take formats by position, got keyword(s) {', '.join(named_formats)}")
        return EinsumFamily(expr, tuple(formats), options, out_format, prune, check, semiring)
    return _kernel(expr, tuple(formats), named_formats, options, out_format, prune, check, semiring,
                   check_optimize(optimize))


def einsum(subscripts, *operands, formats=None, options: Options | None = None, out_format=None,
           prune: bool = False, check: bool = True, semiring=None, device: str | None = None, optimize=True):
    """``numpy.einsum`` over sparse and dense operands, computed by compiled code.

    Subscripts as in NumPy, ellipsis (``"...ij,...jk->...ik"``) and size-1 broadcasting
    included, or NumPy's sublist form ``sc.einsum(A, [0, 1], x, [1], [0])``. The result has
    ``numpy.einsum``'s dtype. The kernel is compiled on the first call and cached.

    Args:
        subscripts (str): Einsum subscripts, e.g. ``"ij,j->i"`` (or the first operand, in the
            sublist form).
        *operands (numpy.ndarray | scipy.sparse array | scalar):
            NumPy arrays, SciPy sparse arrays or matrices (csr, csc, coo, bsr natively;
            dia, lil, dok converted to CSR), N-d ``coo_array``; Python scalars for 0-d operands.
            They are read in place and never modified.
        formats (Sequence | dict | None): One format per operand (a sequence; ``None`` entries keep the operand's own
            format): a name such as ``"csr"``, an MLIR level map or an ``sc.Format``.
        options: Code generation options (``sc.Options``); ``None``: the defaults.
        out_format (str | Format | None): The result's format. ``"dense"`` gives a NumPy array; ``"csr"``, ``"csc"``,
            ``"coo"``, ``"dcsr"``, ``"dcsc"``, ``"csf"``, ``"bsrRxC"`` (``"bsr"``: the largest of
            4, 3, 2 dividing each dimension; dense operands only), an MLIR level map or an
            ``sc.Format`` give a SciPy array (csr/csc/bsr where SciPy has the layout, else an N-d
            ``coo_array``). ``None`` follows the pattern rules (docs: Sparse results): dense for
            rank 0/1 results and patterns dense in some dimension, else CSR (rank 2) or COO.
        prune: Drop stored zeros from a sparse result (entries that cancel are kept otherwise).
        check: Validate every operand's buffers before native code runs (index ranges, index
            pointers, lengths; O(nnz), vectorized). ``False`` skips it: for trusted inputs in
            hot loops only, since a malformed operand is then a wild memory access.
        semiring (str | Semiring | None): ``"min_plus"``, ``"lor_land"``, ... or ``sc.Semiring(add, mul, identity)``:
            the product over that semiring, with GraphBLAS's rules: only stored entries take
            part, and an output entry with no term gets the identity (dense result) or is not
            stored (sparse result).

        device: ``"cpu"`` (default) or ``"cuda"``: PTX for an NVIDIA GPU; NumPy/SciPy operands
            are copied to the GPU and the result back (docs: GPU).
        optimize: ``True`` (default): three or more operands run as a plan of steps chosen
            from the operands (docs: Planning); ``"greedy"``, ``"optimal"``: that search; a
            path in ``numpy.einsum_path``'s format (``[(1, 2), (0, 1)]``); ``False``: one loop
            nest. Two operands always run as one nest.
    Returns:
        result (numpy.ndarray | scipy.sparse.sparray): A NumPy array (dense results, 0-d for
            a full contraction) or a SciPy sparse array (sparse results, see
            ``out_format``), in buffers the kernel allocated.

    Raises:
        ParseError: The expression or subscripts are malformed.
        ShapeError: Operand shapes do not agree with the expression.
        FormatError: A format is unknown or does not fit its operand.
        DTypeError: An operand's dtype is not supported.
        OperandError: An operand is missing, extra, malformed (bad index arrays) or of an
            unsupported type.
        SparseccError: Any other misuse (a bad ``options``, ``prune`` or ``check`` value).
        CompileError: MLIR or LLVM could not compile the kernel (a known limitation or a
            compiler crash; the Python process keeps running).
    """
    # a repeated call: the arguments of an earlier call (checked then), no ellipsis, and no
    # size-1 dimension that broadcasting could drop (what _expand looks for): its kernel
    repeat = None
    if type(subscripts) is str and (prune is False or prune is True) and (check is True or check is False):
        try:
            repeat = (subscripts, len(operands), formats, options, out_format, prune, check, semiring, device,
                      optimize)
            k = _einsum_kernels.get(repeat)
        except TypeError:       # unhashable arguments (formats as a list): the full path
            repeat = k = None
        if k is not None:
            for x in operands:
                shape = getattr(x, "shape", None)
                if type(shape) is not tuple or 1 in shape:
                    break
            else:
                return k(*operands)
    options = _on_device(options, device)
    if not isinstance(subscripts, str):
        subscripts, operands = _from_sublists(subscripts, operands)
    if looks_like_notation(subscripts):
        raise SparseccError("einsum takes subscripts like 'ij,j->i'; use sc.evaluate for index notation")
    formats = _check_formats(formats, len(operands))
    optimize = check_optimize(optimize)
    expanded, operands, formats = _expand(subscripts, operands, formats)
    parse_einsum(expanded, len(operands))   # subscript and operand-count errors, in einsum's terms
    k = _kernel(expanded, formats or (), {}, options, out_format, prune, check, semiring, optimize)
    if repeat is not None and "." not in subscripts and expanded == subscripts:
        _einsum_kernels[repeat] = k
    return k(*operands)


#: sc.einsum's kernels by the arguments of the calls that made them (see einsum)
_einsum_kernels: dict = {}


def _check_formats(formats, n: int):
    if formats is None:
        return None
    if isinstance(formats, dict):
        raise FormatError("einsum takes formats as a sequence, one per operand in order "
                          "(a dict by name is for sc.evaluate)")
    if isinstance(formats, (str, Format)) or not hasattr(formats, "__iter__"):
        raise FormatError(f"formats is a sequence with one format per operand, got {formats!r}; "
                          f"for one operand write formats=[{formats!r}]")
    formats = tuple(formats)
    if len(formats) != n:
        raise OperandError(f"formats names {len(formats)} format(s) for {n} operand(s)")
    return formats


# ------------------------------------------------------------ NumPy's einsum forms
_LETTERS = string.ascii_uppercase + string.ascii_lowercase     # NumPy's sublist labels 0..51


def _from_sublists(first, rest) -> tuple[str, tuple]:
    """NumPy's sublist form ``einsum(op0, sub0, op1, sub1, ..., [sub_out])`` as subscripts."""
    args = (first,) + tuple(rest)
    pairs, out = args, None
    if len(args) % 2:
        pairs, out = args[:-1], args[-1]
    if not pairs or not all(isinstance(sub, (list, tuple)) for sub in pairs[1::2]) or (
            out is not None and not isinstance(out, (list, tuple))):
        raise ParseError(f"einsum subscripts must be a string (or NumPy's sublist form "
                         f"einsum(A, [0, 1], x, [1], [0])), got {type(first).__name__}")

    def text(sub, what):
        if isinstance(sub, (str, bytes)) or not hasattr(sub, "__iter__"):
            raise ParseError(f"einsum sublist form: {what} must be a list of integers 0-51 or "
                             f"Ellipsis, got {sub!r}")
        out = []
        for v in sub:
            if v is Ellipsis:
                out.append("...")
            elif isinstance(v, (int,)) and not isinstance(v, bool) and 0 <= v < len(_LETTERS):
                out.append(_LETTERS[v])
            else:
                raise ParseError(f"einsum sublist form: {what} holds {v!r}; labels are integers "
                                 f"0-51 or Ellipsis")
        return "".join(out)
    ops = pairs[0::2]
    subs = [text(s, f"the sublist of operand {k}") for k, s in enumerate(pairs[1::2])]
    expr = ",".join(subs) + ("" if out is None else "->" + text(out, "the output sublist"))
    return expr, ops


def _shape_of(x) -> tuple[int, ...]:
    shape = getattr(x, "shape", None)
    if shape is None or not isinstance(shape, tuple):
        try:
            shape = np.shape(x)
        except Exception:   # noqa: BLE001 - the call path says what is wrong with it
            return None
    try:
        return tuple(int(s) for s in shape)
    except ValueError:      # NaN: a Dask array of unknown chunk sizes (the call path says so)
        return None


def _expand(subscripts: str, operands: tuple, formats):
    """Ellipses replaced by fresh index letters from the operands' ranks, and size-1
    dimensions broadcast as NumPy broadcasts them (the operand is read without that
    dimension).  Returns (subscripts, operands, formats) - unchanged when neither applies."""
    s = subscripts.replace(" ", "")
    lhs, arrow, rhs = s.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands) or "->" in rhs:
        return subscripts, operands, formats      # parse_einsum reports it
    shapes = [_shape_of(x) for x in operands]
    if any(sh is None for sh in shapes):
        return subscripts, operands, formats      # the call path reports it
    has_dots = "." in s
    if has_dots:
        for t in terms + ([rhs] if arrow else []):
            if t.count(".") and (t.count(".") != 3 or "..." not in t):
                raise ParseError(f"{subscripts!r}: '.' only appears as one ellipsis '...' per term")
        named = [t.replace("...", "") for t in terms]
        for k, (t, n, sh) in enumerate(zip(terms, named, shapes)):
            if "..." in t and len(n) > len(sh):
                raise ShapeError(f"einsum subscripts {subscripts!r}: operand {k} has {len(sh)} dimension(s) "
                                 f"but '{t}' names {len(n)} besides the ellipsis")
        widths = [len(sh) - len(n) if "..." in t else 0 for t, n, sh in zip(terms, named, shapes)]
        width = max(widths, default=0)
        used = set(lhs + rhs)
        fresh = [c for c in _LETTERS if c not in used]
        if width > len(fresh):
            raise ParseError(f"{subscripts!r}: the ellipsis covers {width} dimensions, more than the "
                             f"{len(fresh)} unused index letters")
        dots = "".join(fresh[:width])
        terms = [t.replace("...", dots[width - w:]) for t, w in zip(terms, widths)]
        if arrow:
            if "..." not in rhs and width:
                raise ParseError(f"{subscripts!r}: the operands have {width} dimension(s) under the "
                                 f"ellipsis, but the output names no '...' to put them in")
            rhs = rhs.replace("...", dots)
        else:
            counts = {}
            for t in terms:
                for c in t:
                    counts[c] = counts.get(c, 0) + 1
            rhs = dots + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in dots))
        arrow = "->"
    # size-1 broadcasting: an index of size n > 1 read through a size-1 dimension elsewhere
    size: dict[str, int] = {}
    for t, sh in zip(terms, shapes):
        if len(t) == len(sh):
            for c, n in zip(t, sh):
                if n != 1:
                    size.setdefault(c, n)
    drop = [[d for d, (c, n) in enumerate(zip(t, sh)) if n == 1 and c in size and t.count(c) == 1]
            if len(t) == len(sh) else [] for t, sh in zip(terms, shapes)]
    if not has_dots and not any(drop):
        return subscripts, operands, formats
    if not arrow:
        # NumPy's implicit output: the indices that appear once in the subscripts as written
        # (a dropped size-1 dimension must not turn an index it shares into a "once" index)
        counts: dict[str, int] = {}
        for t in terms:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        rhs, arrow = "".join(sorted(c for c, n in counts.items() if n == 1)), "->"
    operands, formats = list(operands), list(formats) if formats is not None else None
    spare = [c for c in _LETTERS if c not in set(",".join(terms) + rhs)]
    for k, d in enumerate(drop):
        if d:
            terms[k] = "".join(c for j, c in enumerate(terms[k]) if j not in d)
            operands[k] = _drop_dims(operands[k], d, f"operand {k}")
            if not terms[k] and getattr(operands[k], "ndim", 0) == 1:
                # a sparse operand broadcast in every dimension: a length-1 vector over an index
                # of its own, summed (a SciPy array has no rank 0)
                if not spare:
                    raise ParseError(f"{subscripts!r}: no unused index letter is left to read operand {k} "
                                     f"(broadcast in every dimension) with")
                terms[k] = spare.pop(0)
            if formats is not None and formats[k] is not None and not (
                    isinstance(formats[k], str) and formats[k].strip().lower() in ("dense", "coo", "csf")):
                formats[k] = None       # a rank-specific format no longer fits: the operand's own
    expr = ",".join(terms) + arrow + rhs
    return expr, tuple(operands), tuple(formats) if formats is not None else None


def _drop_dims(x, dims: list[int], what: str):
    """Operand ``x`` without its size-1 dimensions ``dims`` (a view of a dense operand; the
    same coordinate and value arrays for a sparse one, which keeps one size-1 dimension when
    ``dims`` are all of them)."""
    if type(x).__module__.startswith("dask."):     # a Dask array: a lazy view without those dimensions
        return x[tuple(0 if d in dims else slice(None) for d in range(x.ndim))]
    if not sp.issparse(x) and not isinstance(x, np.ndarray):
        x = as_operand(x, what)     # e.g. pydata/sparse: a SciPy array over its buffers
    if sp.issparse(x):
        x = as_operand(x, what)
        validate(x, what)           # SciPy's tocoo trusts the buffers: check them first
        c = to_coo(x)
        # broadcast in every dimension: keep one (of size 1; the caller gives it its own index)
        keep = [d for d in range(c.ndim) if d not in dims] or list(dims[:1])
        out = sp.coo_array((c.data, tuple(c.coords[d] for d in keep)), shape=tuple(c.shape[d] for d in keep))
        out.has_canonical_format = bool(c.has_canonical_format)
        return out
    a = np.asarray(x)
    return a[tuple(0 if d in dims else slice(None) for d in range(a.ndim))]


class EinsumFamily:
    """``sc.compile`` of einsum subscripts with an ellipsis: one kernel per combination of
    operand ranks (and broadcast dimensions), made on the call that first needs it."""

    def __init__(self, subscripts, formats, options, out_format, prune, check, semiring):
        self.source = subscripts
        self._args = (options, out_format, prune, check, semiring)
        self._formats = formats
        self.last: Kernel | None = None

    def __call__(self, *operands):
        formats = _check_formats(self._formats or None, len(operands))
        expr, operands, formats = _expand(self.source, operands, formats)
        parse_einsum(expr, len(operands))
        self.last = _kernel(expr, formats or (), {}, *self._args)
        return self.last(*operands)

    def ir(self, stage: str = "mlir") -> str:
        """The IR of the kernel the last call ran."""
        if self.last is None:
            raise SparseccError(f"'{self.source}' has an ellipsis: its kernel depends on the operands' "
                                f"ranks; call it once before asking for its IR")
        return self.last.ir(stage)

    def __repr__(self):
        return f"<sparsecc.EinsumFamily '{self.source}' (one kernel per operand ranks)>"


def evaluate(statement: str, *positional, formats=None, options: Options | None = None,
             out_format=None, prune: bool = False, check: bool = True, device: str | None = None,
             optimize=True, **operands):
    """Evaluate one index-notation statement: ``sc.evaluate("y[i] = A[i,j] * x[j]", A=A, x=x)``.

    The kernel is compiled on the first call and cached. Reductions are sums over indices
    that do not appear on the left, or a monoid written out (``min[j](...)``, ``max[j]``,
    ``times[j]`` ...).

    Args:
        statement: An index-notation statement (docs: The DSL).
        *positional (numpy.ndarray | scipy.sparse array | scalar):
            Operands by position, in the order they first appear in the statement
            (``sc.evaluate("y[i] = A[i,j] * x[j]", A, x)``).
        formats (Sequence | dict | None): A dict by operand name (``{"A": "csr"}``), or a sequence with one format per
            operand in the order they first appear. Operands left out keep their own format.
        options: Code generation options (``sc.Options``); ``None``: the defaults.
        out_format (str | Format | None): The result's format. ``"dense"`` gives a NumPy array; ``"csr"``, ``"csc"``,
            ``"coo"``, ``"dcsr"``, ``"dcsc"``, ``"csf"``, ``"bsrRxC"`` (``"bsr"``: the largest of
            4, 3, 2 dividing each dimension; dense operands only), an MLIR level map or an
            ``sc.Format`` give a SciPy array (csr/csc/bsr where SciPy has the layout, else an N-d
            ``coo_array``). ``None`` follows the pattern rules (docs: Sparse results): dense for
            rank 0/1 results and patterns dense in some dimension, else CSR (rank 2) or COO.
        prune: Drop stored zeros from a sparse result (entries that cancel are kept otherwise).
        check: Validate every operand's buffers before native code runs (index ranges, index
            pointers, lengths; O(nnz), vectorized). ``False`` skips it: for trusted inputs in
            hot loops only, since a malformed operand is then a wild memory access.
        **operands (numpy.ndarray | scipy.sparse array | scalar):
            Operands by name (``A=A, x=x``): NumPy arrays, SciPy sparse arrays,
            Python scalars. They are read in place and never modified.

        device: ``"cpu"`` (default) or ``"cuda"``: PTX for an NVIDIA GPU; NumPy/SciPy operands
            are copied to the GPU and the result back (docs: GPU).
        optimize: As for ``sc.einsum``: a sum of products of three or more factors runs as a
            plan (docs: Planning) unless ``False``.
    Returns:
        result (numpy.ndarray | scipy.sparse.sparray): A NumPy array (dense results) or a
            SciPy sparse array (sparse results); for several statements (separated by
            newlines or ``;``), a dict of every statement's output by name (docs: Planning,
            Programs).

    Raises:
        ParseError: The expression or subscripts are malformed.
        ShapeError: Operand shapes do not agree with the expression.
        FormatError: A format is unknown or does not fit its operand.
        DTypeError: An operand's dtype is not supported.
        OperandError: An operand is missing, extra, malformed (bad index arrays) or of an
            unsupported type.
        SparseccError: Any other misuse (a bad ``options``, ``prune`` or ``check`` value).
        CompileError: MLIR or LLVM could not compile the kernel (a known limitation or a
            compiler crash; the Python process keeps running).
    """
    options = _on_device(options, device)
    optimize = check_optimize(optimize)
    from .program import compile_program, is_program
    if is_program(statement):
        if formats is not None and not isinstance(formats, dict):
            raise FormatError("a program of several statements takes formats as a dict by input name")
        return compile_program(statement, formats, options, out_format, prune, check, optimize)(*positional,
                                                                                                 **operands)
    if not (isinstance(statement, str) and looks_like_notation(statement)):
        raise SparseccError(f"evaluate takes a statement like 'y[i] = A[i,j] * x[j]', got {statement!r}")
    if formats is None or isinstance(formats, dict):
        return _kernel(statement, (), dict(formats or {}), options, out_format, prune, check, None,
                       optimize)(*positional, **operands)
    if isinstance(formats, (str, Format)) or not hasattr(formats, "__iter__"):
        raise FormatError(f"formats is a dict by operand name or a sequence in operand order, got {formats!r}")
    formats = tuple(formats)
    names = parse_notation(statement).operands
    if len(formats) != len(names):
        raise OperandError(f"formats names {len(formats)} format(s), but '{statement}' has {len(names)} "
                           f"operand(s) ({', '.join(names)}); or pass a dict by name")
    return _kernel(statement, formats, {}, options, out_format, prune, check, None, optimize)(*positional, **operands)


def plan(expr, *operands, formats=None, optimize=True, semiring=None, out_format=None, options=None, **named):
    """The plan ``sc.einsum(expr, *operands, ...)`` / ``sc.evaluate(expr, ...)`` would run:
    ``sc.plan("ij,jk,k->i", A, B, x)``; ``print(plan)`` shows its steps, each
    intermediate's format and estimated entries (docs/planning.md).  Nothing is compiled."""
    from .planned import PlannedKernel, plan_of
    if not isinstance(expr, str):
        raise SparseccError(f"an expression is a string, got {type(expr).__name__}")
    optimize = check_optimize(optimize)
    if looks_like_notation(expr):
        if isinstance(formats, dict) or formats is None:
            k = _kernel(expr, (), dict(formats or {}), options, out_format, False, True, None, optimize)
        else:
            k = _kernel(expr, tuple(formats), {}, options, out_format, False, True, None, optimize)
        ops = k.bind(*operands, **named)
    else:
        if named:
            raise SparseccError(f"einsum operands are positional, got keyword(s) {', '.join(named)}")
        fm = _check_formats(formats, len(operands))
        k = _kernel(expr, fm or (), {}, options, out_format, False, True, semiring, optimize)
        ops = list(operands)
    return k.plan(*ops) if isinstance(k, PlannedKernel) else plan_of(k, ops, {})


def cache_info() -> Stats:
    """The kernel cache's counters for this process.

    Returns:
        A named tuple ``(hits, disk_hits, misses)``: calls served by a kernel already loaded,
        kernels loaded from the disk cache, and compilations.
    """
    return Stats(STATS.hits, STATS.disk_hits, STATS.misses)
