"""``sparsecc.torch``'s calls and conversions (the package re-exports them): ``einsum``,
``evaluate``, ``compile`` (:class:`TorchKernel`), ``to_sparsecc``/``from_sparsecc``, the
autograd functions over the compiled adjoints.  ``ops.py`` (``sct.ops``) and ``library.py``
(``torch.ops.sparsecc.*``) build on this module; it imports neither.
"""

from __future__ import annotations


import numpy as np
import scipy.sparse as sp
import torch

import sparsecc as sc
from .. import autodiff
from .. import dtypes as dt
from ..errors import DTypeError, FormatError, OperandError, ParseError, SparseccError
from ..formats import Format, resolve
from ..parse import looks_like_notation, parse_notation
from ..runtime import threads as _threads
from ..runtime.operands import to_coo

__all__ = ["einsum", "evaluate", "compile", "TorchKernel", "to_sparsecc", "from_sparsecc", "sync_threads"]

_DTYPES = (torch.float32, torch.float64, torch.complex64, torch.complex128, torch.int32, torch.int64, torch.bool)
_LAYOUT_NAMES = {torch.sparse_coo: "coo", torch.sparse_csr: "csr", torch.sparse_csc: "csc",
                 torch.sparse_bsr: "bsr"}


# ----------------------------------------------------------------------------------- threads
def sync_threads() -> None:
    """Make sparsecc's thread count follow ``torch.get_num_threads()``, unless the user chose
    one (``SPARSECC_NUM_THREADS`` or ``sc.set_num_threads``).  Every ``sct`` call runs it
    first."""
    _threads.follow_num_threads(torch.get_num_threads())


# ------------------------------------------------------------------------ tensors in and out
def _on_cuda(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "cuda"


def _check_tensor(t: torch.Tensor, what: str) -> None:
    if t.device.type != "cpu":
        # CUDA tensors run with device="cuda" (docs/gpu.md) when the driver sees a device
        from ..runtime.targets import cuda_probe
        problem = cuda_probe()[0] if t.device.type == "cuda" else ""
        if t.device.type != "cuda" or problem:
            raise OperandError(f"{what} is on {t.device}: sparsecc.torch runs on CPU tensors only, and on CUDA "
                               f"tensors where a CUDA device is usable"
                               + (f" ({problem})" if problem else "") + "; move it with .cpu()")
    if t.dtype not in _DTYPES:
        narrow = str(t.dtype).removeprefix("torch.") in dt.NARROW_INTEGERS
        raise DTypeError(f"{what} has dtype {t.dtype}; sparsecc.torch takes float32, float64, complex64, "
                         f"complex128, int32, int64 and bool (" + (
                             "narrow integers are refused on purpose: convert with .int(); docs/dsl.md, "
                             "Known limitations)" if narrow else "convert float16/bfloat16 with .float())"))
    if t.layout not in _LAYOUT_NAMES and t.layout != torch.strided:
        raise FormatError(f"{what} has layout {t.layout}; sparsecc.torch takes strided, sparse_coo, "
                          f"sparse_csr, sparse_csc and sparse_bsr tensors")


def _np(t: torch.Tensor) -> np.ndarray:
    """The NumPy view of a CPU tensor (a copy only for a non-contiguous, conjugated or
    negated view)."""
    t = t.detach()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    if not t.is_contiguous():
        t = t.contiguous()
    return t.numpy()


def to_sparsecc(t, what: str = "operand"):
    """The NumPy array or SciPy sparse array sparsecc takes for torch tensor ``t``, over the
    same memory (anything that is not a tensor is returned as it is)."""
    if not isinstance(t, torch.Tensor):
        return t
    _check_tensor(t, what)
    t = t.detach()
    if t.device.type == "cuda":
        return t                # on the device, read there (sparsecc/runtime/device.py)
    lay = t.layout
    if lay == torch.strided:
        return _np(t)
    if t.dense_dim() != 0 or (lay != torch.sparse_coo and t.dim() != 2):
        raise FormatError(f"{what} is a hybrid or batched sparse tensor (sparse_dim {t.sparse_dim()}, "
                          f"dense_dim {t.dense_dim()}, shape {tuple(t.shape)}); sparsecc.torch takes "
                          f"matrices (COO: any rank) without dense dimensions")
    shape = tuple(t.shape)
    if lay == torch.sparse_coo:
        idx = _np(t._indices())
        try:
            out = sp.coo_array((_np(t._values()), tuple(idx)), shape=shape)
        except ValueError as err:          # SciPy's check of the coordinates (built unchecked by torch)
            raise OperandError(f"{what}: {err}") from None
        out.has_canonical_format = bool(t.is_coalesced())
        return out
    if lay == torch.sparse_csr:
        cls, parts = sp.csr_array, (t.values(), t.col_indices(), t.crow_indices())
    elif lay == torch.sparse_csc:
        cls, parts = sp.csc_array, (t.values(), t.row_indices(), t.ccol_indices())
    else:
        cls, parts = sp.bsr_array, (t.values(), t.col_indices(), t.crow_indices())
    for name, p in zip(("indices", "indptr"), parts[1:]):
        if p.is_floating_point() or p.is_complex() or p.dtype == torch.bool:
            raise OperandError(f"{what}: its {name} tensor has dtype {p.dtype}; index tensors hold integers")
    arrays = tuple(_np(p) for p in parts)
    _check_count(what, lay, *arrays)
    try:
        return cls(arrays, shape=shape, copy=False)
    except ValueError as err:       # SciPy's check of the components (built unchecked by torch)
        raise OperandError(f"{what}: {err}") from None


def _check_count(what: str, layout, values, indices, indptr) -> None:
    """torch's invariant for compressed layouts, which SciPy does not have (it ignores entries
    past ``indptr[-1]``): ``indptr[-1]`` is the number of stored elements (blocks for BSR),
    which ``indices`` and ``values`` both hold.  A tensor built with
    ``check_invariants=False`` against it was silently truncated."""
    if indptr.ndim != 1 or indices.ndim != 1 or indptr.size == 0:
        return                          # SciPy's constructor says what is wrong with these
    ptr, ind = ("ccol_indices", "row_indices") if layout == torch.sparse_csc else ("crow_indices", "col_indices")
    last, n_ind, n_val = int(indptr[-1]), indices.size, (values.shape[0] if values.ndim else 1)
    if last != n_ind or n_ind != n_val:
        raise OperandError(f"{what}: {ptr}[-1] is {last}, {ind} has {n_ind} entries and values has {n_val} "
                           f"{'blocks' if layout == torch.sparse_bsr else 'entries'}; torch's invariant is "
                           f"{ptr}[-1] == nnz for each")


def _tensor(a: np.ndarray) -> torch.Tensor:
    a = np.asarray(a)
    if not a.flags.writeable:
        a = a.copy()            # a broadcast view: torch tensors are writable
    return torch.from_numpy(a)


def from_sparsecc(x) -> torch.Tensor:
    """A torch tensor over the buffers of sparsecc result ``x``: a NumPy array (or scalar) as a
    strided tensor; a SciPy csr/csc/bsr array as that sparse layout; a coo_array as sparse COO
    (its coordinates stacked into torch's one int64 index tensor: a copy).  A tensor (a
    device="cuda" result made by torch on the device) is returned as it is."""
    if isinstance(x, torch.Tensor):
        return x
    if not sp.issparse(x):
        return _tensor(x)
    # check_invariants=False, said explicitly (torch warns otherwise): the buffers are a
    # kernel's result or an already validated operand's
    shape = tuple(x.shape)
    f = x.format
    if f == "csr":
        return torch.sparse_csr_tensor(_tensor(x.indptr), _tensor(x.indices), _tensor(x.data), shape, check_invariants=False)
    if f == "csc":
        return torch.sparse_csc_tensor(_tensor(x.indptr), _tensor(x.indices), _tensor(x.data), shape, check_invariants=False)
    if f == "bsr":
        return torch.sparse_bsr_tensor(_tensor(x.indptr), _tensor(x.indices), _tensor(x.data), shape, check_invariants=False)
    x = to_coo(x)
    idx = torch.from_numpy(np.stack([np.asarray(c, np.int64) for c in x.coords]) if x.ndim
                           else np.zeros((0, x.nnz), np.int64))
    return torch.sparse_coo_tensor(idx, _tensor(x.data), shape, is_coalesced=bool(x.has_canonical_format),
                                   check_invariants=False)


def _width_format(t, spec):
    """A format fixing the index widths of sparse tensor ``t`` (so int64 indices stay int64),
    when the user gave none or named ``t``'s own layout; else ``spec`` unchanged."""
    if not isinstance(t, torch.Tensor) or t.layout not in _LAYOUT_NAMES:
        return spec
    name = _LAYOUT_NAMES[t.layout]
    if spec is not None and not (isinstance(spec, str) and spec.strip().lower() == name):
        return spec
    if t.layout == torch.sparse_coo:
        w = 64                                  # torch COO indices are int64
        fmt = resolve("coo", t.dim())
    else:
        ptr = t.ccol_indices() if t.layout == torch.sparse_csc else t.crow_indices()
        w = 64 if ptr.dtype == torch.int64 else 32
        if t.layout == torch.sparse_bsr:
            # a block size of 1 fails to compile in MLIR 22: "bsr" resolves those to CSR, as
            # for a SciPy bsr_array (formats.resolve)
            fmt = resolve("bsr", 2, block=tuple(t.values().shape[-2:]))
        else:
            fmt = resolve(name, 2)
    return fmt.with_widths(w, w)


# ------------------------------------------------------------------------------- autograd
class _Apply(torch.autograd.Function):
    """One sparsecc kernel call; backward: its compiled adjoints (sparsecc.autodiff)."""

    @staticmethod
    def forward(ctx, kernel, operands, *tensors):
        ctx.kernel, ctx.operands, ctx.tensors = kernel, operands, tensors
        # an undefined output gradient stays None, and gives no gradient (as torch's own ops):
        # torch.autograd.gradcheck checks that, with gi.eq(0), which sparse COO cannot run
        ctx.set_materialize_grads(False)
        # saved so that torch reports an operand modified in place before backward
        ctx.save_for_backward(*[t for t in tensors if isinstance(t, torch.Tensor)])
        ctx.result = kernel(*operands)          # kept for a max/min reduction's backward
        return from_sparsecc(ctx.result)

    @staticmethod
    def backward(ctx, gout):
        ctx.saved_tensors                       # noqa: B018 - raises if an operand changed in place
        if gout is None:                        # undefined: no gradient for any operand
            return (None,) * (2 + len(ctx.tensors))
        need = [k for k, b in enumerate(ctx.needs_input_grad[2:]) if b]
        cot = to_sparsecc(gout, "the output gradient")
        grads = autodiff.vjp(ctx.kernel, cot, *ctx.operands, wrt=set(need), result=ctx.result, conjugate=True)
        out = [None, None]
        for k, (t, g) in enumerate(zip(ctx.tensors, grads)):
            out.append(None if g is None or k not in need else _grad_tensor(t, g))
        if torch.is_grad_enabled():             # create_graph=True: the gradients are not differentiable
            inputs = [x for x in (gout, *ctx.tensors) if isinstance(x, torch.Tensor) and x.requires_grad]
            if inputs:
                out = [g if g is None else _FirstOrder.apply(g, *inputs) for g in out]
        return tuple(out)


class _FirstOrder(torch.autograd.Function):
    """A gradient computed by compiled adjoints, tied to what it depends on, so that
    differentiating it again raises instead of silently dropping its term."""

    @staticmethod
    def forward(ctx, g, *inputs):
        return g.clone()

    @staticmethod
    def backward(ctx, *grads):
        raise autodiff.NotDifferentiableError(
            "second-order gradients through sparsecc kernels are not supported: a gradient computed "
            "with create_graph=True cannot be differentiated again (docs/torch.md)")


class _ApplyPlan(torch.autograd.Function):
    """A planned kernel's call (sparsecc/planned.py): its steps run forward as compiled
    kernels; backward walks them in reverse, each step's gradients by its own compiled
    adjoints (``autodiff.vjp`` of the step kernel), an intermediate's gradient the cotangent
    of the step that made it - never the one nest's adjoints over every index."""

    @staticmethod
    def forward(ctx, steps, operands, *tensors):
        plan, kernels, out_dtype, names, planned = steps
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(*[t for t in tensors if isinstance(t, torch.Tensor)])
        ctx.plan, ctx.kernels, ctx.tensors, ctx.names = plan, kernels, tensors, names
        env = {n: (x if x.dtype == out_dtype else x.astype(out_dtype)) for n, x in zip(ctx.names, operands)}
        for step, k in zip(plan.steps, kernels):
            env[step.output] = k(*[env[n] for n in step.inputs])
        planned._record(plan, kernels, env)     # k.last_plan, k.ir(step=): as an untracked call's
        ctx.env, ctx.operands = env, operands
        return from_sparsecc(env[plan.steps[-1].output])

    @staticmethod
    def backward(ctx, gout):
        ctx.saved_tensors                       # noqa: B018 - raises if an operand changed in place
        if gout is None:
            return (None,) * (2 + len(ctx.tensors))
        plan, env, names = ctx.plan, ctx.env, ctx.names
        need = {n for n, b in zip(names, ctx.needs_input_grad[2:]) if b}
        for step in plan.steps:                 # an intermediate needs a gradient where a leaf below does
            if any(n in need for n in step.inputs):
                need.add(step.output)
        cots = {plan.steps[-1].output: to_sparsecc(gout, "the output gradient")}
        for step, k in zip(reversed(plan.steps), reversed(ctx.kernels)):
            if step.output not in need or step.output not in cots:
                continue
            wrt = {p for p, n in enumerate(step.inputs) if n in need}
            gs = autodiff.vjp(k, cots.pop(step.output), *[env[n] for n in step.inputs], wrt=wrt,
                              result=env[step.output], conjugate=True)
            for p, g in enumerate(gs):
                if p in wrt and g is not None:
                    n = step.inputs[p]
                    cots[n] = g if n not in cots else cots[n] + g
        out = [None, None]
        for n, t, x in zip(names, ctx.tensors, ctx.operands):
            g = cots.get(n)
            if g is None or not isinstance(t, torch.Tensor):
                out.append(None)
                continue
            if np.dtype(g.dtype) != x.dtype:      # the operand was converted to the result's dtype
                g = g.real if np.dtype(x.dtype).kind != "c" and np.dtype(g.dtype).kind == "c" else g
                g = g.astype(x.dtype)
            out.append(_grad_tensor(t, g))
        if torch.is_grad_enabled():             # create_graph=True: the gradients are not differentiable
            inputs = [x for x in (gout, *ctx.tensors) if isinstance(x, torch.Tensor) and x.requires_grad]
            if inputs:
                out = [g if g is None else _FirstOrder.apply(g, *inputs) for g in out]
        return tuple(out)


def _grad_tensor(t: torch.Tensor, g) -> torch.Tensor:
    """Gradient ``g`` (NumPy, or SciPy on t's pattern) as a tensor of t's layout and pattern."""
    if not sp.issparse(g):
        return _tensor(g)
    vals = _tensor(np.asarray(g.data))
    if t.layout == torch.sparse_coo:
        if not t.is_coalesced():        # the gradient is on the coalesced pattern (as torch.sparse.mm's)
            return from_sparsecc(g)
        return torch.sparse_coo_tensor(t._indices(), vals, t.shape, is_coalesced=True, check_invariants=False)
    if t.layout == torch.sparse_csr:
        return torch.sparse_csr_tensor(t.crow_indices(), t.col_indices(), vals, t.shape, check_invariants=False)
    if t.layout == torch.sparse_csc:
        return torch.sparse_csc_tensor(t.ccol_indices(), t.row_indices(), vals, t.shape, check_invariants=False)
    return torch.sparse_bsr_tensor(t.crow_indices(), t.col_indices(), vals, t.shape, check_invariants=False)


_COMPRESSED = (torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr)


def _refuse_repeated(x, what: str) -> None:
    """A SparseccError for a compressed tensor (SciPy ``x`` over its buffers) whose indices
    are not strictly increasing within a row (CSC: a column), which torch's invariants
    require and only ``check_invariants=False`` builds.  The forward pass reads such a
    tensor as torch's own products do (repeated elements summed), but torch's backward of
    the tensor's constructor (SparseCompressedTensorBackward0) fails on repeated indices
    (a shape error) and assigns the gradients of unsorted ones to the wrong elements:
    refused before running, in the user's terms.  O(nnz)."""
    ptr, ind = x.indptr, x.indices
    if ind.size < 2:
        return
    step = np.diff(ind.astype(np.int64))
    starts = ptr[1:-1]
    inner = np.ones(ind.size - 1, bool)
    inner[starts[(starts > 0) & (starts < ind.size)] - 1] = False     # the step into a new row
    if np.all(step[inner] > 0):
        return
    line = "column" if x.format == "csc" else "row"
    how = "twice in one" if np.any(step[inner] == 0) or not _unique_per_line(ptr, ind) else "out of order in a"
    raise SparseccError(f"{what} stores an index {how} {line} (a tensor built with check_invariants=False); "
                        f"torch's backward of such a tensor is wrong or fails, so it cannot take a gradient here: "
                        f"coalesce it first (t.to_sparse_coo().coalesce().to_sparse_csr()), or detach it")


def _unique_per_line(ptr, ind) -> bool:
    outer = np.repeat(np.arange(ptr.size - 1, dtype=np.int64), np.diff(ptr))
    key = outer * (int(ind.max()) + 1) + ind
    return np.unique(key).size == key.size


def _run(kernel, args: list, whats: list):
    """Call ``kernel`` on ``args`` (operand order), through autograd when a tensor needs it."""
    sync_threads()
    grad = torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in args)
    if grad and any(_on_cuda(t) for t in args):
        raise SparseccError("gradients through CUDA tensors are not supported yet (the adjoint kernels run "
                            "on the CPU); call it under torch.no_grad() or detach the operands")
    operands = [to_sparsecc(t, w) for t, w in zip(args, whats)]
    if not grad:
        return from_sparsecc(kernel(*operands))
    for t, x, w in zip(args, operands, whats):
        if isinstance(t, torch.Tensor) and t.requires_grad and t.layout in _COMPRESSED:
            _refuse_repeated(x, w)
    steps = kernel.steps_for(operands) if hasattr(kernel, "steps_for") else None
    if steps is not None:                       # planned: gradients through each step
        return _ApplyPlan.apply((*steps, kernel.stmt.operands, kernel), operands, *args)
    return _Apply.apply(kernel, operands, *args)


# ------------------------------------------------------------------------------ the API
def _eager(fn):
    """Run ``fn`` outside Dynamo: under ``torch.compile`` a sparsecc call is a graph break
    (its kernel runs eagerly, its autograd Function records as usual)."""
    return torch.compiler.disable(fn, recursive=True)


def _needs_grad(operands) -> bool:
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in operands)


def _expand_ellipsis(subscripts: str, operands, grad: bool):
    """``subscripts`` with the ellipsis spelled out in index letters from the operands' ranks
    (``sc.einsum``'s own rule, on zero-byte stand-ins of the tensors' shapes), so that the
    kernel, and its adjoints, name every index.  None when size-1 broadcasting is needed too
    (sc.einsum then reads an operand without a dimension: no gradient for that, an error
    when ``grad``)."""
    from ..api import _expand
    stand = tuple(np.broadcast_to(np.zeros((), np.int8), tuple(t.shape)) if isinstance(t, torch.Tensor) else t
                  for t in operands)
    expr, out, _ = _expand(subscripts, stand, None)
    if any(np.ndim(a) != np.ndim(b) for a, b in zip(stand, out)):
        if grad:
            raise SparseccError(f"'{subscripts}' broadcasts a size-1 dimension: no gradient for size-1 "
                                f"broadcasting yet (expand the operand, e.g. with .expand(...), or name "
                                f"every index)")
        return None
    return expr


def _plain_einsum(subscripts, operands, formats, options, out_format, prune, check, semiring, optimize=True):
    """``sc.einsum`` on the tensors, without autograd (ellipsis and size-1 broadcasting)."""
    sync_threads()
    fm = formats if formats is not None else (None,) * len(operands)
    fm = tuple(_width_format(t, f) for t, f in zip(operands, fm)) if len(fm) == len(operands) else fm
    return from_sparsecc(sc.einsum(subscripts, *[to_sparsecc(t, f"operand {k}") for k, t in enumerate(operands)],
                                   formats=fm if any(f is not None for f in fm) else None, options=options,
                                   out_format=out_format, prune=prune, check=check, semiring=semiring,
                                   optimize=optimize, device="cuda" if any(_on_cuda(t) for t in operands) else None))


class TorchKernel:
    """``sct.compile``'s kernel: called on torch tensors like ``sc.compile``'s on arrays.

    The sparsecc kernel for a call is ``sc.compile`` of the same expression, with the formats
    of sparse tensors given no format (or their own layout's name) fixed to their index
    widths; ``sc.compile`` memoizes it, so one kernel per (formats, widths).  Subscripts with
    an ellipsis get one kernel per operand ranks: each call spells the ellipsis out first
    (so gradients name every index)."""

    def __init__(self, expr, formats, named, options, out_format, prune, check, semiring, optimize=True):
        if not isinstance(expr, str):
            raise SparseccError(f"an expression is a string, got {type(expr).__name__}")
        self.source = expr
        from ..program import is_program
        if is_program(expr):
            # a program's call path (sparsecc/program.py) has no autograd Function over its
            # steps: refused in the user's terms, not "unexpected character ';'"
            raise ParseError("sparsecc.torch runs one statement at a time; a program of several statements "
                             "(separated by ';' or newlines) runs through sc.compile/sc.evaluate on NumPy/SciPy "
                             "operands, or through sc.lazy on torch tensors (values only): for gradients, call "
                             "sct.evaluate once per statement")
        self._notation = looks_like_notation(expr)
        self._formats, self._named = tuple(formats), dict(named)
        self._kw = dict(options=options, out_format=out_format, prune=prune, check=check)
        self._semiring = semiring
        self._optimize = optimize
        self._ellipsis = not self._notation and "." in expr
        self._expanded: dict = {}
        if self._ellipsis:                      # the kernel depends on the operands' ranks
            self.kernel, self.names = None, None
            return
        self.kernel = self._sc_kernel(None)     # checks the expression and formats now
        self.names = self.kernel.stmt.operands

    def _family(self, args):
        """For subscripts with an ellipsis: the TorchKernel of the subscripts spelled out for
        ``args`` (None: size-1 broadcasting without gradients, sc.einsum runs it)."""
        expr = _expand_ellipsis(self.source, args, _needs_grad(args))
        if expr is None:
            return None
        k = self._expanded.get(expr)
        if k is None:
            k = self._expanded[expr] = TorchKernel(expr, self._formats, self._named, self._kw["options"],
                                                   self._kw["out_format"], self._kw["prune"],
                                                   self._kw["check"], self._semiring, self._optimize)
        return k

    def _sc_kernel(self, args):
        kw = dict(self._kw, optimize=self._optimize)
        if args is not None and any(_on_cuda(t) for t in args):
            kw = dict(kw, device="cuda")        # CUDA tensors: the GPU kernel, no copies
        if self._notation:
            names = parse_notation(self.source).operands
            fm = dict(zip(names, self._formats))
            fm.update(self._named)
            if args is not None:
                fm = {n: _width_format(t, fm.get(n)) for n, t in zip(names, args)}
            fm = {n: f for n, f in fm.items() if f is not None}
            if self._semiring is not None:
                raise SparseccError("semiring= is for einsum subscripts")
            return sc.compile(self.source, **kw, **fm)
        fm = list(self._formats)
        if args is not None:
            fm = fm or [None] * len(args)
            if len(fm) == len(args):
                fm = [_width_format(t, f) for t, f in zip(args, fm)]
        if any(f is not None for f in fm) or self._formats:
            return sc.compile(self.source, *fm, semiring=self._semiring, **kw)
        return sc.compile(self.source, semiring=self._semiring, **kw)

    def _bind(self, args, kwargs) -> list:
        return self.kernel.bind(*args, **kwargs)

    @_eager
    def __call__(self, *args, **kwargs):
        if self._ellipsis:
            if kwargs:
                raise OperandError(f"einsum kernels take operands by position, got keyword(s) {', '.join(kwargs)}")
            k = self._family(args)
            if k is None:
                return _plain_einsum(self.source, args, self._formats or None, semiring=self._semiring,
                                     optimize=self._optimize, **self._kw)
            self.last = k
            return k(*args)
        ops = self._bind(args, kwargs)
        k = self._sc_kernel(ops)
        self.last = k
        return _run(k, ops, [_what(n) for n in k.stmt.operands])

    @_eager
    def vjp(self, cotangent, *args, **kwargs) -> tuple:
        """Gradients of each operand for the output gradient ``cotangent`` (torch tensors;
        sparse operands' on their pattern), by compiled kernels - without autograd.  Complex
        values follow torch's convention (the conjugate Wirtinger derivative)."""
        if self._ellipsis:
            k = self._family(args) if not kwargs else None
            if k is None:
                raise SparseccError(f"'{self.source}': vjp takes operands by position and no size-1 "
                                    f"broadcasting")
            return k.vjp(cotangent, *args)
        ops = self._bind(args, kwargs)
        k = self._sc_kernel(ops)
        grads = autodiff.vjp(k, to_sparsecc(cotangent, "the cotangent"),
                             *[to_sparsecc(t, _what(n)) for t, n in zip(ops, k.stmt.operands)], conjugate=True)
        return tuple(None if g is None else (_grad_tensor(t, g) if isinstance(t, torch.Tensor)
                                             else g) for t, g in zip(ops, grads))

    def ir(self, stage: str = "mlir") -> str:
        last = getattr(self, "last", self.kernel)
        if last is None:
            raise SparseccError(f"'{self.source}' has an ellipsis: its kernel depends on the operands' ranks; "
                                f"call it once before asking for its IR")
        return last.ir(stage)

    def __repr__(self):
        return f"<sparsecc.torch.TorchKernel '{self.source}'>"


def _what(name: str) -> str:
    return f"operand {name[1:]}" if name.startswith("#") else f"operand '{name}'"


def compile(expr: str, *formats, options=None, out_format=None, prune: bool = False,  # noqa: A001
            check: bool = True, semiring=None, optimize=True, **named_formats) -> TorchKernel:
    """``sc.compile`` for torch tensors: a :class:`TorchKernel` (``optimize=``: as
    ``sc.compile``'s; a planned call's gradients run through each step)."""
    return TorchKernel(expr, formats, named_formats, options, out_format, prune, check, semiring, optimize)


@_eager
def einsum(subscripts, *operands, formats=None, options=None, out_format=None, prune: bool = False,
           check: bool = True, semiring=None, optimize=True):
    """``sc.einsum`` on torch tensors; differentiable (an ellipsis is spelled out from the
    operands' ranks first; no size-1 broadcasting then)."""
    if not isinstance(subscripts, str):
        from ..api import _from_sublists
        subscripts, operands = _from_sublists(subscripts, operands)
    if looks_like_notation(subscripts):
        raise SparseccError("einsum takes subscripts like 'ij,j->i'; use sct.evaluate for index notation")
    if formats is not None and (isinstance(formats, (str, Format, dict)) or not hasattr(formats, "__iter__")):
        return sc.einsum(subscripts, *operands, formats=formats)     # sc's error for a bad formats=
    formats = None if formats is None else tuple(formats)
    if "." in subscripts:
        # spelled out from the operands' ranks, so the adjoints name every index
        expanded = _expand_ellipsis(subscripts, operands, _needs_grad(operands))
        if expanded is None:            # size-1 broadcasting, no gradient needed
            return _plain_einsum(subscripts, operands, formats, options, out_format, prune, check, semiring,
                                 optimize)
        subscripts = expanded
    if formats is not None and len(formats) != len(operands):
        raise OperandError(f"formats names {len(formats)} format(s) for {len(operands)} operand(s)")
    k = TorchKernel(subscripts, formats or (), {}, options, out_format, prune, check, semiring, optimize)
    return k(*operands)


@_eager
def evaluate(statement: str, *positional, formats=None, options=None, out_format=None, prune: bool = False,
             check: bool = True, optimize=True, **operands):
    """``sc.evaluate`` on torch tensors (differentiable for product statements)."""
    if not (isinstance(statement, str) and looks_like_notation(statement)):
        raise SparseccError(f"evaluate takes a statement like 'y[i] = A[i,j] * x[j]', got {statement!r}")
    if formats is None or isinstance(formats, dict):
        return TorchKernel(statement, (), dict(formats or {}), options, out_format, prune, check,
                           None, optimize)(*positional, **operands)
    if isinstance(formats, (str, Format)) or not hasattr(formats, "__iter__"):
        raise FormatError(f"formats is a dict by operand name or a sequence in operand order, got {formats!r}")
    names = parse_notation(statement).operands
    formats = tuple(formats)
    if len(formats) != len(names):
        raise OperandError(f"formats names {len(formats)} format(s), but '{statement}' has {len(names)} "
                           f"operand(s) ({', '.join(names)}); or pass a dict by name")
    return TorchKernel(statement, formats, {}, options, out_format, prune, check, None,
                       optimize)(*positional, **operands)

