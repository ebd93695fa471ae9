"""Kernels sparsecc writes in MLIR itself, for statements whose sparsifier kernels run serially.

MLIR 22's sparsifier never parallelizes a loop that writes a sparse output, walks COO
segments in serial ``scf.while`` loops, and keeps a dense output row in memory while it
reads a sparse one.  For a few statement shapes sparsecc writes the loops itself
(``scf``/``memref``/``arith``/``vector``, ``scf.parallel`` for the rows, which the ordinary
pipeline turns into OpenMP) and compiles them through the same pipeline, cache and call
path as every kernel.  One module per kernel, each with ``match(stmt, formats, dtypes,
out_format) -> plan | None`` and ``emit(plan, formats, out, dtype, parallel, facts) -> str``:

* ``sddmm``: ``C[i,j] = A[i,j] * sum[k](X[i,k] * Y[j,k])``, A CSR, X/Y dense, a CSR result;
* ``spgemm``: ``C[i,j] = sum[k](A[i,k] * B[k,j])``, CSR operands and result;
* ``masked_spgemm``: ``C[i,j] = M[i,j] * sum[k](A[i,k] * B[k,j])``, CSR operands and result;
* ``masked_sum``: ``s[] = sum[i,j,k](A[i,j] * B[j,k] * C[i,k])`` (triangle counting), CSR operands;
* ``spmm``: ``C[i,j] = sum[k](A[i,k] * X[k,j])``, A CSR, X dense, a dense result;
* ``mttkrp``: MTTKRP and TTV over a 3-D COO operand, dense factors and result;
* ``union``: ``A + B``, ``A - B`` and scaled terms with a CSR/CSC result;
* ``gemm``: dense x dense contractions ``C[..., i, j] = sum[k](X[...] * Y[..., j])`` with a
  dense result (the planner's dense steps);

and two shared modules: ``recognize`` (plans, statement shapes, formats) and ``emit`` (the
MLIR text shapes: ``scf.if`` yields, row loops, CSR results, huge pages, the flag).

Each row of a result is computed by one thread in a fixed order, so results do not depend
on the thread count, bit for bit.  Every function has exactly the arguments and results the
sparsifier's kernel for the same statement has after ``sparse-tensor-codegen``
(``docs/architecture.md``: the sizes, then per operand its buffers and specifier struct or a
dense memref; a sparse result's buffers and specifier returned), so the call path packs and
adopts it unchanged.  ``runtime/fast_paths.py`` routes a specialization here.

Emission depends on its arguments alone: what it needs to know about the machine (x86-64's
non-temporal stores, Linux's huge pages) arrives as :class:`sparsecc.kernel_abi.TargetFacts`,
which the compile target resolves (``runtime/targets.py``).  This package imports nothing
from ``sparsecc.passes`` or ``sparsecc.runtime``; the names it shares with them (the flag
function, ``SELF_CHECKED``, ``ROW_WORK``, the thread-count global) are in ``sparsecc/kernel_abi.py``.
"""
