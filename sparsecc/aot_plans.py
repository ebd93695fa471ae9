"""Plans fixed at build time for ahead-of-time libraries (``sc.aot.Planned``; docs/aot.md
"Planned kernels").

A kernel of three or more factors, or a statement with a nested reduction the JIT splits,
runs through the JIT as its plan's steps (docs/planning.md).  A library serves every call
with no statistics and no planner, so the plan is made here, once, from example operands:
:func:`expand` turns ``sc.aot.Planned(k, operands)`` into its steps' kernels (built as
kernels of their own, named ``<kernel>__<n>``) and a record of the plan that the library
builder (``runtime/aot/plan_c.py``) turns into one C function with the one nest's
signature, running the steps in order.
"""

from __future__ import annotations

import numpy as np

from .errors import SparseccError
from .expr import accesses


class Planned:
    """A kernel for ``sc.aot.build`` whose plan is fixed at build time from example operands
    (``operands``: a tuple in operand order, or a dict by name for index notation; only
    their formats, shapes and statistics are read).  A kernel whose plan for them is its
    one loop nest is built as one nest, as without ``Planned``."""

    def __init__(self, kernel, operands):
        from .runtime.kernel import Kernel
        if not isinstance(kernel, Kernel):
            raise SparseccError(f"sc.aot.Planned takes a kernel from sc.compile, got {type(kernel).__name__}")
        if isinstance(operands, dict):
            ops = kernel.bind(**operands)
        elif isinstance(operands, (tuple, list)):
            ops = kernel.bind(*operands)
        else:
            raise SparseccError(f"sc.aot.Planned: give the example operands as a tuple (operand order) or a "
                                f"dict by name, got {type(operands).__name__}")
        self.kernel, self.operands = kernel, tuple(ops)
        from .planned import PlannedKernel, plan_of
        self.plan = kernel.plan(*ops) if isinstance(kernel, PlannedKernel) else plan_of(kernel, ops, {})

    def __repr__(self):
        return f"<sparsecc.aot.Planned '{self.kernel.source}': {len(self.plan)} step(s)>"


def expand(kname: str, p: Planned, dtype) -> tuple[dict, dict, dict | None]:
    """``(kernels, dtypes, record)`` for planned kernel ``kname``: the kernels to compile
    (the steps as ``<kname>__<n>``, or ``{kname: kernel}`` for a one-nest plan), each one's
    operand dtypes, and the plan's record for the builder (None: one nest)."""
    from .planned import _READ_AS, _step_kernel
    k, plan = p.kernel, p.plan
    stmt = k.stmt
    n_ops = len(stmt.operands)
    dts = dtype.get(kname) if isinstance(dtype, dict) else (dtype,) * n_ops
    if plan.single:
        return {kname: k}, ({kname: dts} if dts is not None else {}), None
    if k.options.device != "cpu":
        raise SparseccError(f"kernel {kname!r}: a planned kernel is built for the CPU only")
    if dts is None or len(dts) != n_ops:
        raise SparseccError(f"kernel {kname!r}: give one dtype per operand ({n_ops})")
    dts = tuple(np.dtype(d).name for d in dts)
    out_dtype = k.result_dtype(dts)
    from .plan import product_form
    if product_form(stmt) is not None and any(np.dtype(d) != out_dtype for d in dts):
        raise SparseccError(f"kernel {kname!r}: a planned kernel takes operands of one dtype (its steps compute "
                            f"in the result's, {out_dtype}); got {', '.join(dts)}")
    index_of = {}           # each operand's (and intermediate's) indices in the statement's names
    for a in accesses(stmt.expr):
        index_of.setdefault(a.tensor, a.indices)
    env_dtype = dict(zip(stmt.operands, dts))
    formats, kernels, dtypes, steps = {}, {}, {}, []
    last = plan.steps[-1]
    for n, step in enumerate(plan.steps, 1):
        root = step is last
        fmts = tuple(k.formats.get(x) if x in stmt.operands else _READ_AS[formats[x]] or formats[x]
                     for x in step.inputs)
        out_format = (k.out_format if k.out_format is not None else step.format) if root else step.format
        sk = _step_kernel(step, fmts, out_format, k.options, k.prune if root else False, k.check)
        sname = f"{kname}__{n}"
        kernels[sname] = sk
        dtypes[sname] = tuple(env_dtype[x] for x in step.inputs)
        env_dtype[step.output] = sk.result_dtype(dtypes[sname]).name
        formats[step.output] = step.format
        sizes: dict[str, str] = {}
        for a in accesses(step.statement.expr):
            j = step.statement.operands.index(a.tensor)
            orig = index_of[step.inputs[j]]
            for letter, name in zip(a.indices, orig):
                if sizes.setdefault(letter, name) != name:
                    raise SparseccError(f"kernel {kname!r}: step {n} ({step.text}) reads index {letter} as both "
                                        f"{sizes[letter]} and {name}; build it as one nest (no sc.aot.Planned)")
        for letter, name in zip(step.statement.indices, step.indices):
            sizes.setdefault(letter, name)
        index_of[step.output] = step.indices
        steps.append({"kernel": sname, "inputs": list(step.inputs), "output": step.output,
                      "format": "dense" if root and out_format is None else str(out_format), "text": step.text,
                      "sizes": sizes})
    record = {"steps": steps, "reason": plan.reason, "from": "example operands"}
    return kernels, dtypes, record


def plain_dtype(dtype, kernels: dict) -> dict:
    """``dtype`` as ``{kernel: dtypes}`` for ``kernels`` (a name -> kernel mapping), so that
    step kernels can be given theirs beside them; a kernel a dict leaves out stays out."""
    if isinstance(dtype, dict):
        return dict(dtype)
    return {name: (dtype,) * len(k.stmt.operands) for name, k in kernels.items()
            if hasattr(k, "stmt")}


def derivative_examples(J, kernel, given: dict) -> dict | None:
    """Example operands of derivative ``J``'s statement (what ``kernel`` reads) from the
    matrices ``given`` by base name (``sc.aot.Derivative``'s example operands): an operand's
    second name (``A__1``) is its base's, the identity ``Id_`` is made from the index sizes,
    and a dense operand not given (a vector, a scalar) is zeros of its shape - a statement
    split at its nested reductions is planned from formats alone.  None where an index size
    is not fixed by what is given."""
    import scipy.sparse as sp
    from .derivatives.symbolic import DELTA
    from .expr import index_sizes
    stmt = J.statement
    named = {n: given[J.aliases.get(n, n)] for n in stmt.operands if J.aliases.get(n, n) in given}
    sizes = dict(index_sizes(stmt, {n: tuple(np.shape(x)) for n, x in named.items()}))
    ops = {}
    for a in accesses(stmt.expr):
        n = a.tensor
        if n in ops or n not in stmt.operands:
            continue
        if n in named:
            ops[n] = named[n]
            continue
        if any(i not in sizes for i in a.indices):
            if n != DELTA:
                return None
            m = J._shape({b: x for b, x in given.items() if b in J.names})[1]
            sizes.update({i: m for i in a.indices})
        if n == DELTA:
            ops[n] = sp.eye_array(sizes[a.indices[0]], format="csr")
        else:
            ops[n] = np.zeros(tuple(sizes[i] for i in a.indices)) if a.indices else 0.0
    return ops if set(ops) == set(stmt.operands) else None
