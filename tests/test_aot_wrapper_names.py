"""Operand names the planned and derivative C wrappers' own locals would clash with: the
planned wrapper declared ``rc`` and ``t0`` (a dense operand of either name failed in gcc;
tests/test_aot_plans.py builds one now); the wrappers' locals start with ``sc_``, and an
operand whose C name does is refused before anything compiles."""

import numpy as np
import pytest

import sparsecc as sc
from sparsecc.runtime.aot.cwrapper import local_problem


def test_local_names_are_refused_with_a_clear_message():
    assert local_problem("k", ["n_i", "A_pos1", "rc", "t0"]) is None
    assert "sc_x" in local_problem("k", ["n_i", "sc_x"])
    assert "values" in local_problem("k", ["values"], ("values", "nvalues"))


def test_operand_with_the_local_prefix_is_refused_before_compiling(tmp_path):
    k = sc.compile("y[i] = sum[j](A[i,j] * sc_x[j])", A="csr", sc_x="dense")
    with pytest.raises(sc.SparseccError, match="sc_"):
        sc.aot.build("names", {"spmv": k}, str(tmp_path))
    assert not list(tmp_path.iterdir())
