"""The cost of a step: bytes moved and operations, in seconds of one core.

A step reads its operands (a dense one: every element; a sparse one: its values, its
coordinates and its positions), performs one multiply-add per product of stored entries
(the join of its operands), and writes its result (dense: every element, zero-filled
first; sparse: each stored entry inserted - a few operations - plus its buffers).  The
sum of the bytes over :data:`BANDWIDTH` and of the operations over :data:`OPS_PER_S`,
plus :data:`STEP_OVERHEAD_S` for the call itself, is the step's cost; a plan costs the sum
of its steps.

Calibration: :data:`BANDWIDTH` is a single-core streaming rate, the order of magnitude
``python -m sparsecc bench`` measures with ``sparsecc/bench/bandwidth.py``'s probe (its
``read_gbs``).  Only ratios between plans decide anything, so a machine twice as fast in
both changes no plan; set ``sparsecc.plan.cost.BANDWIDTH`` from the probe where a machine's
balance of bandwidth and compute differs much (``stream_probe()["read_gbs"] * 1e9``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .stats import TensorStats

#: bytes per second one core streams (see the module docstring on calibration)
BANDWIDTH = 8e9
#: multiply-adds per second of a sparse loop (index chasing included)
OPS_PER_S = 5e8
#: the fixed cost of one kernel call (argument packing, validation, result wrapping)
STEP_OVERHEAD_S = 5e-6
#: the fixed cost a sparse result adds to a call: its buffers adopted, wrapped as a SciPy
#: array (measured, repeated calls on 10 x 10 operands, 1 thread: a dense result 8-10 us, a
#: CSR result 42-46 us, a COO result 37-62 us)
SPARSE_RESULT_OVERHEAD_S = 35e-6
#: operations to insert one entry of a sparse result (search/sort of its row, the copy)
INSERT_OPS = 4.0
#: operations per point of one loop nest over three or more factors with a sparse result:
#: every point's product goes into the result's row workspace through the sparsifier's
#: expanded access (measured: ``ij,jk,kl->il`` over 20k x 20k CSR, 10/row, one nest, 1 thread:
#: ~90 ns a point, against ~20 ns a product in the two steps)
SPARSE_NEST_POINT_OPS = 16.0
#: how much faster than :data:`OPS_PER_S` a hand-written kernel (``dialect/kernels/``) runs a point
#: of its one loop nest; the caller says whether the one nest is one (``make_plan``'s
#: ``one_nest_handwritten``; plan/ asks no runtime).  Measured: MTTKRP ``ijk,jr,kr->ir``, 150^3 with
#: 500k entries, r = 16, 1 thread: 2.0 ms for 8M points, where this rate gives 17 ms
HANDWRITTEN_SPEEDUP = 8.0
#: how much faster than :data:`OPS_PER_S` a matrix-product-shaped step over dense operands with a
#: dense result runs a multiply-add: it is the hand-written register-blocked contraction
#: (``dialect/kernels/gemm.py``; :func:`dense_rate`).  Measured: ``X @ W``, 25k x 128 x 32
#: float64, 1 thread: 102M multiply-adds in 6-12 ms (on a loaded machine), 17-33x this rate
DENSE_STEP_SPEEDUP = 16.0
#: bytes of one coordinate or position
INDEX_BYTES = 4
#: operations per entry, beyond :data:`INSERT_OPS`, of a sparse result of rank 3 or more (COO)
#: built by a step with a summed index: each fiber's sums go through the sparsifier's expanded
#: workspace, whose coordinates are sorted, then inserted one call an entry, and the result
#: comes back as an N-d COO.  Measured, one thread: ``t[i,j,l] = sum[k](X[i,j,k] * B[k,l])``,
#: 249,398 entries from 25,156 fibers: 24 ms, where the rates above give 3.7; 199,839 from
#: 19,956 fibers: 10 ms (3.0); the same entries with no sum (``ijk,kl->ijkl``): 8 ms
COO_SUM_INSERT_OPS = 24.0


@dataclass(frozen=True)
class Cost:
    """Bytes moved, operations, and their time in seconds (``seconds`` orders plans)."""

    bytes: float
    ops: float

    @property
    def seconds(self) -> float:
        return self.bytes / BANDWIDTH + self.ops / OPS_PER_S

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.bytes + other.bytes, self.ops + other.ops)


ZERO = Cost(0.0, 0.0)


def tensor_bytes(t: TensorStats, dense: bool, itemsize: int) -> float:
    """Bytes of ``t`` stored dense (every element) or sparse (values, coordinates, and the
    positions of its outer level); once per statistics, format and itemsize (a search asks
    for the same ones at every split)."""
    memo = t._bytes
    got = memo.get((dense, itemsize))
    if got is None:
        got = memo[(dense, itemsize)] = _tensor_bytes(t, dense, itemsize)
    return got


def _tensor_bytes(t: TensorStats, dense: bool, itemsize: int) -> float:
    if dense:
        return float(t.volume) * itemsize
    outer = t.sizes[0] + 1 if t.sizes else 1
    return t.nnz * (itemsize + INDEX_BYTES * max(1, len(t.sizes) - 1)) + outer * INDEX_BYTES


def step_cost(inputs: list[tuple[TensorStats, bool]], result: TensorStats, result_dense: bool,
              products: float, itemsize: int) -> Cost:
    """One step: read ``inputs`` (stats, stored dense?), ``products`` multiply-adds, write
    ``result`` (dense or sparse; of rank 3 or more with a summed index:
    :data:`COO_SUM_INSERT_OPS`)."""
    moved = sum(tensor_bytes(t, d, itemsize) for t, d in inputs)
    moved += tensor_bytes(result, result_dense, itemsize) * (1 if result_dense else 2)
    ops = products + (0.0 if result_dense else result.nnz * INSERT_OPS)
    if not result_dense and len(result.indices) >= 3 and any(
            i not in result.indices for t, _ in inputs for i in t.indices):
        ops += result.nnz * COO_SUM_INSERT_OPS
    # the call itself, as operations (so that a step is never free)
    ops += (STEP_OVERHEAD_S + (0.0 if result_dense else SPARSE_RESULT_OVERHEAD_S)) * OPS_PER_S
    return Cost(moved, ops)


def stored(t: TensorStats, dense: bool) -> TensorStats:
    """``t`` as a step reading it visits it: stored dense, every element (the products of
    a step over a dense intermediate count its zeros too), else its entries."""
    if not dense or t.full:
        return t
    return TensorStats(t.indices, t.sizes, float(t.volume), True)


def dense_rate(inputs: list[tuple[TensorStats, bool]], result: tuple[str, ...], result_dense: bool) -> float:
    """The speedup of a step's multiply-adds: :data:`DENSE_STEP_SPEEDUP` for a matrix-product
    shape (two dense operands sharing one summed index, a dense result of rank 2 or more:
    what the hand-written contraction serves), else 1."""
    if not result_dense or len(inputs) != 2 or len(result) < 2 or not all(d for _, d in inputs):
        return 1.0
    (a, _), (b, _) = inputs
    summed = (set(a.indices) & set(b.indices)) - set(result)
    return DENSE_STEP_SPEEDUP if len(summed) == 1 else 1.0


def dense_is_cheaper(t: TensorStats, itemsize: int) -> bool:
    """Whether storing ``t`` dense moves fewer bytes than storing it sparse."""
    if t.full:
        return True
    return tensor_bytes(t, True, itemsize) <= tensor_bytes(t, False, itemsize) and not math.isinf(t.nnz)
