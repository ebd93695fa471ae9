"""The one dispatch point (sparsecc/dispatch.py): which executor runs a kernel call.

An executor registered there is asked at a call's first operand the in-memory path does not
take (or, with ``every_call``, at every call that leaves the repeated-call path), with the
operands bound in the kernel's order; in-memory calls never ask one.  Dask's front end is
imported on demand by its operands' package name, never by ``import sparsecc``.  Oracles:
``numpy.einsum`` on dense copies; executors here are test doubles that compute nothing.
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc import dispatch

ROOT = Path(__file__).resolve().parent.parent


class Foreign:
    """An operand of a kind no executor but the test's takes."""

    def __init__(self, shape):
        self.shape = shape


class Recorder:
    """Claims calls with a Foreign operand; records what it was asked."""

    def __init__(self, every_call=False, claim_all=False):
        self.every_call = every_call
        self.claim_all = claim_all
        self.asked, self.ran = [], []

    def claims(self, kernel, operands):
        self.asked.append(tuple(type(x).__name__ for x in operands))
        return self.claim_all or any(isinstance(x, Foreign) for x in operands)

    def run(self, kernel, operands):
        self.ran.append((kernel, list(operands)))
        return "ran elsewhere"


@pytest.fixture
def executor(request):
    e = Recorder(**getattr(request, "param", {}))
    dispatch.register(e)
    yield e
    dispatch.unregister(e)


@pytest.fixture
def spmv(rng):
    A = sp.random_array((9, 7), density=0.4, random_state=rng, format="csr")
    return A, rng.random(7)


def test_an_operand_of_another_kind_goes_to_the_executor_that_claims_it(executor, spmv):
    A, x = spmv
    k = sc.compile("ij,j->i")
    np.testing.assert_allclose(k(A, x), np.einsum("ij,j->i", A.toarray(), x))
    f = Foreign((7,))
    assert k(A, f) == "ran elsewhere"
    (kernel, ops), = executor.ran
    assert kernel is k and ops[0] is A and ops[1] is f


def test_in_memory_calls_never_ask_an_executor(executor, spmv):
    A, x = spmv
    k = sc.compile("ij,j->i")
    want = np.einsum("ij,j->i", A.toarray(), x)
    for op in (A, A.tocsc(), A.tocoo(), A.toarray(), sp.csr_matrix(A)):
        for _ in range(3):
            np.testing.assert_allclose(k(op, x), want)
    assert executor.asked == [] and executor.ran == []


def test_index_notation_operands_arrive_bound_in_operand_order(executor, spmv):
    A, x = spmv
    k = sc.compile("y[i] = A[i,j] * x[j]")
    f = Foreign((9, 7))
    assert k(x=x, A=f) == "ran elsewhere"
    _, ops = executor.ran[0]
    assert ops[0] is f and ops[1] is x


def test_an_unclaimed_operand_gets_the_in_memory_error(executor, spmv):
    A, _ = spmv
    k = sc.compile("ij,j->i")
    with pytest.raises(sc.OperandError):
        k(A, object())
    assert executor.asked and executor.ran == []


@pytest.mark.parametrize("executor", [{"every_call": True, "claim_all": True}], indirect=True)
def test_an_every_call_executor_takes_in_memory_operands_too(executor, spmv):
    """The planner's kind of executor: asked before the operands are looked at."""
    from sparsecc.parse import parse_einsum
    from sparsecc.runtime.kernel import Kernel
    A, x = spmv
    k = Kernel(parse_einsum("ij,j->i", 2), {})     # not the memoized one: no repeated-call path yet
    assert k(A, x) == "ran elsewhere"
    assert executor.ran and executor.ran[0][0] is k


def test_every_call_follows_the_registered_executors():
    e = Recorder(every_call=True)
    assert not dispatch._Router.every_call
    dispatch.register(e)
    try:
        assert dispatch._Router.every_call
    finally:
        dispatch.unregister(e)
    assert not dispatch._Router.every_call and e not in dispatch.executors()


def test_dask_is_imported_on_demand_and_registers_itself():
    code = ("import sys, numpy as np, sparsecc as sc\n"
            "assert 'sparsecc.dask' not in sys.modules and 'dask' not in sys.modules\n"
            "k = sc.compile('ij,j->i')\n"
            "import dask.array as da\n"
            "assert 'sparsecc.dask' not in sys.modules\n"
            "A = np.arange(12.0).reshape(3, 4); x = np.ones(4)\n"
            "y = k(da.from_array(A, chunks=(2, 4)), x)\n"
            "assert type(y).__module__.startswith('dask.'), type(y)\n"
            "from sparsecc import dispatch\n"
            "assert 'sparsecc.dask' in sys.modules and not dispatch.ON_DEMAND\n"
            "assert [type(e).__name__ for e in dispatch.executors()] == ['DeviceExecutor', 'DaskExecutor']\n"
            "np.testing.assert_allclose(y.compute(), A @ x)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


def test_a_cpu_kernel_gives_no_call_to_the_device_executor():
    dev = next(e for e in dispatch.executors() if type(e).__name__ == "DeviceExecutor")
    k = sc.compile("ij,j->i")
    assert not dev.claims(k, [Foreign((2, 2)), np.ones(2)])
