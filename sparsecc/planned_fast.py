"""The repeated planned call: straight-line Python for the calls of one statistics class.

A planned kernel (``planned.py``) keeps, per statistics class of its operands
(``planned._class_key``), a function ``fast(kernel, args)`` that :func:`build` writes once
the class has been planned and run.  It returns ``MISS`` (and the planned kernel's general
call runs: bind, class key, plan lookup or planning) unless the call's operands, given by
position, fall in exactly that class: the same types (NumPy arrays, CSR/CSC/COO), the same
value dtypes (by identity), ranks, the bit length of every dimension and, for a sparse
operand, of its elements per stored entry - the tests ``_class_key`` makes, written out as
comparisons against the class's bounds.  Then it runs the plan's steps with no lists or
dicts: operands converted to the result's dtype where the class says so, each step kernel
through its own repeated-call path (``runtime/fast_call.py``: it validates its operands
before its native code runs, as every call does; anything that path declines takes the step
kernel's general path), each intermediate a local, and records the plan and each step's
stored entries as the general call does (``k.last_plan``).

A one-step plan's function calls the kernel's own repeated-call path (its one nest).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .expr import accesses
from .runtime import call as _callmod

MISS = _callmod.MISS

_COMPRESSED = frozenset({sp.csr_array, sp.csr_matrix, sp.csc_array, sp.csc_matrix})
_COO = frozenset({sp.coo_array, sp.coo_matrix})
#: a compiled kernel's sparse results: their value buffers are exactly their entries
#: (``results.adopt_buffers`` keeps each buffer's used size)
_RESULT_TYPES = _COMPRESSED | _COO


def _shape_attr() -> bool:
    """Whether SciPy's sparse arrays keep their shape in ``_shape`` (what their ``shape``
    property returns: read directly, it costs a third of the property; checked, not assumed)."""
    try:
        return all(t((np.zeros(2), (np.array([0, 1]), np.array([1, 2]))), shape=(2, 3))._shape == (2, 3)
                   for t in _COMPRESSED | _COO)
    except Exception:       # noqa: BLE001 - another SciPy: the property
        return False


_SHAPE_ATTR = _shape_attr()


def _bits_test(value: str, bits: int) -> str:
    """A test true exactly when ``value.bit_length() == bits`` (``value >= 0``), as two
    comparisons (specialised for ints; a shift is not)."""
    lo, hi = (1 << bits) >> 1, 1 << bits
    return f"{lo} <= {value} < {hi}"


def _class_checks(key, names, consts, covered=frozenset()) -> tuple[list[str], list[str]] | None:
    """The lines that return ``_MISS`` unless operands ``names`` are of class ``key``
    (``planned._class_key``), or None where a class is not one this path covers; and, for
    the operands in ``covered`` (read as they are by the first step, whose repeated-call
    path tests each one's type and value dtype against exactly the class's), those two tests
    apart (``build`` runs them only where that path is not the one it was built with): their
    lines here read only what the class's bounds need, guarded by the caller's catch-all."""
    lines, deferred = [], []
    for k, (a, entry) in enumerate(zip(names, key)):
        t, dtype, dim_bits = entry[0], entry[1], entry[2]
        consts[f"_T{k}"], consts[f"_DT{k}"] = t, dtype
        r = len(dim_bits)
        dims = [f"d{k}_{d}" for d in range(r)]
        if t is np.ndarray:
            kind = f"type({a}) is not _ndarray or {a}.dtype is not _DT{k}"
        elif t in _COMPRESSED or t in _COO:
            kind = f"type({a}) is not _T{k} or {a}.data.dtype is not _DT{k}"
            if k not in covered:
                kind = f"type({a}) is not _T{k} or (v{k} := {a}.data).dtype is not _DT{k}"
        else:
            return None
        if k in covered:
            deferred.append(kind)
        else:
            lines += [f"if {kind}:", "    return _MISS"]
        shape = "shape" if t is np.ndarray or not _SHAPE_ATTR else "_shape"
        if r:               # (another rank: the unpacking's ValueError; no buffer: AttributeError; a miss)
            lines.append(f"{', '.join(dims)}, = {a}.{shape}")
        else:
            lines += [f"if {a}.{shape}:", "    return _MISS"]
        tests = [_bits_test(d, bits) for d, bits in zip(dims, dim_bits)]
        if t is not np.ndarray:
            data = f"{a}.data" if k in covered else f"v{k}"
            count = f"{data}.size" if t in _COMPRESSED else f"{a}.nnz"
            prod = " * ".join(dims) if dims else "1"
            tests.append(_bits_test(f"({prod}) // ({count} or 1)", entry[3]))
        if tests:
            lines += [f"if not ({' and '.join(tests)}):", "    return _MISS"]
    return lines, deferred


def _size(out: str, dense: bool) -> str:
    """The expression for the entries step result ``out`` (``dense``: of a dense format)
    stores, as :func:`stored` counts them."""
    if dense:
        return f"({out}.size if type({out}) is _ndarray else _stored({out}))"
    return f"({out}.data.size if type({out}) in _RESULT_TYPES else _stored({out}))"


def stored(x) -> int:
    """The entries ``x`` stores (a dense array: every element; a scalar: 1)."""
    return int(x.nnz) if sp.issparse(x) else int(np.size(x))


def _step_call(k: int, out: str, args: list[str], kernel: str | None = None, trusted: bool = False) -> list[str]:
    """Step ``k``'s call: its kernel's repeated-call path, else its kernel's general call
    (``kernel``: the name of the kernel it is called on, default ``_K{k}``).  ``trusted``:
    the first step, whose path ``f`` was read with the class checks: where it is the path
    the class's checks left to it (``_F0``), a miss may be an operand of another type or
    dtype - the general call then (MISS)."""
    call = kernel or f"_K{k}"
    tup = "args" if kernel else f"({', '.join(args)}{',' if len(args) == 1 else ''})"
    lines = [] if trusted else [f"f = _I{k}.fast"]
    lines += [f"{out} = f({call}, {tup}) if f is not None else _MISS",
              f"if {out} is _MISS:"]
    if trusted:
        lines += ["    if f is _F0:", "        return _MISS"]
    again = "_general(kernel, *args)" if kernel else f"_K{k}({', '.join(args)})"
    return lines + [f"    {out} = {again}"]


def build(kernel, key, plan, kernels=(), out_dtype=None, cast=False):
    """``fast(kernel, args)`` for calls of class ``key`` that run ``plan`` (its step
    ``kernels``, result dtype and whether operands are converted to it first, as
    ``PlannedKernel._prepare_run`` gives them; a one-step plan: none), or None where the
    class or a step kernel is not one this path covers."""
    n = len(kernel.stmt.operands)
    names = [f"a{k}" for k in range(n)]
    consts = {"_MISS": MISS, "_ndarray": np.ndarray, "_callmod": _callmod, "_PLAN": plan,
              "_RESULT_TYPES": _RESULT_TYPES, "_stored": stored}
    if len(key) != n or kernel.from_library:
        return None         # (an AOT kernel's library is set when it is loaded, before any call)
    # the first step's kernel and the operands it reads as they are (not converted first)
    first = kernel.repeated_call() if plan.single else (kernels[0].repeated_call() if kernels else None)
    ops = dict(zip(kernel.stmt.operands, range(n)))
    reads = list(range(n)) if plan.single else [ops.get(i) for i in plan.steps[0].inputs]
    f0 = first.fast if first is not None else None
    kinds = _kinds_of(first, f0)
    covered = set()
    if kinds is not None and len(kinds) == len(reads):
        covered = {k for k in reads if k is not None and not (cast and key[k][1] != out_dtype)}
        # (that path was made for this class's types and dtypes: the call that installs this
        # closure ran it; else - a router served that call - its tests stay here)
        if any(k in covered and (kind[0] is not key[k][0] or kind[1] != key[k][1]) for k, kind in zip(reads, kinds)):
            covered = set()
    got = _class_checks(key, names, consts, frozenset(covered))
    if got is None:
        return None
    checks, deferred = got
    if covered:             # the first step's path tests these operands' types and dtypes itself
        consts["_F0"] = f0
        checks += [f"f = _I0.fast", "if f is not _F0 and (" + " or ".join(f"({d})" for d in deferred) + "):",
                   "    return _MISS"]
    # with the repeated-call paths off (tests spying on the general path), the general call
    # (another number of operands: the unpacking's ValueError, a miss; an operand of another
    # kind whose type the first step's path tests: whatever reading it raised, a miss)
    lines = ["if not _callmod.FAST:", "    return _MISS",
             "try:", f"    {', '.join(names)}, = args" if n else "    if args: return _MISS"] + [
             f"    {c}" for c in checks] + [
             f"except {'Exception' if covered else '(ValueError, AttributeError)'}:", "    return _MISS"]
    # each index's size: a dimension of an operand carrying it (the class checks unpack them;
    # the steps check that operands agree before their native code runs)
    dim = {}
    for a in accesses(kernel.stmt.expr):
        for d, i in enumerate(a.indices):
            dim.setdefault(i, f"d{kernel.stmt.operands.index(a.tensor)}_{d}")
    if plan.single:
        consts["_I0"], consts["_general"] = first, _callmod.call
        body = _step_call(0, "out", names, "kernel", bool(covered))
        out_idx = kernel.stmt.indices
        if kernel.out_format is None and len(out_idx) < 2 and all(i in dim for i in out_idx):
            size = " * ".join(dim[i] for i in out_idx) or "1"     # (a dense result: patterns.default_result_format)
        else:
            size = _size("out", kernel.out_format is None)
        return _compile(lines + _guarded(body) + [
            f"kernel._last_run = (_PLAN, kernel._last_run[1], False, {size})",
            "return out"], consts)
    env = dict(zip(kernel.stmt.operands, names))
    if cast:
        consts["_ODT"] = out_dtype
        for k, a in enumerate(names):
            if key[k][1] != out_dtype:
                lines.append(f"{a} = {a}.astype(_ODT)")
    body, sizes = [], []
    for s, (step, k_) in enumerate(zip(plan.steps, kernels)):
        consts[f"_K{s}"], consts[f"_I{s}"] = k_, k_.repeated_call()
        out = f"t{s}"
        body += _step_call(s, out, [env[i] for i in step.inputs], trusted=s == 0 and bool(covered))
        env[step.output] = out
        if step.format == "dense" and all(i in dim for i in step.indices):
            # a dense step result (its kernel's out_format: PlannedKernel._prepare_run) stores
            # every element: its size, from the operands' dimensions
            sizes.append(" * ".join(dim[i] for i in step.indices) or "1")
        else:
            sizes.append(_size(out, step.format == "dense"))
    consts["_STEPS"] = tuple(kernels)
    lines += _guarded(body) + [
              f"kernel._last_run = (_PLAN, _STEPS, True, {', '.join(sizes)})",
              f"return {env[plan.steps[-1].output]}"]
    return _compile(lines, consts)


def _kinds_of(info, fast) -> tuple | None:
    """The operands' kind keys (``runtime/plans._key_of``: type, value dtype, ...) of the call
    plan of ``info`` (a kernel's ``repeated_call()``) whose repeated-call path is ``fast``."""
    if info is None or fast is None:
        return None
    for pkey, p in info.plans.items():
        if p.fast is fast:
            return pkey[0]
    return None


def _guarded(body: list[str]) -> list[str]:
    """``body`` such that a step that fails leaves what the general call leaves: no last plan."""
    return (["try:"] + [f"    {ln}" for ln in body]
            + ["except BaseException:", "    kernel._last_run = (None, kernel._last_run[1], False)", "    raise"])


def _compile(lines, consts):
    source = "def fast(kernel, args):\n" + "".join(f"    {ln}\n" for ln in lines)
    namespace = dict(consts)
    exec(source, namespace)     # noqa: S102 - our own source, made from the plan
    fast = namespace["fast"]
    fast.source = source
    return fast
