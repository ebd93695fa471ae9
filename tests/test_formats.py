"""Format objects, MLIR map strings, index widths, block sizes."""

import numpy as np
import pytest
import scipy.sparse as sp

import sparsecc as sc
from sparsecc.formats import Format, resolve
from conftest import assert_matches, random_sparse

rng = np.random.default_rng(11)
A = random_sparse((8, 6), 0.4, np.float64, rng, fmt="csr")
x = rng.random(6)


@pytest.mark.parametrize("fmt", [
    sc.Format(("dense", "compressed"), pos_width=64, crd_width=64),
    sc.Format(("dense", "compressed"), (1, 0), pos_width=32, crd_width=64),
    sc.Format(("compressed(nonunique)", "singleton")),               # AoS COO
    sc.Format(("loose_compressed", "compressed")),
    sc.Format.bsr((4, 3)),
    sc.Format.bsr((2, 2)).__class__(("dense", "compressed", "dense", "dense"), (1, 0), (2, 3)),   # BSC-like
    "(i, j) -> (j : compressed, i : compressed)",
    "#sparse_tensor.encoding<{ map = (i, j) -> (i : compressed, j : dense), posWidth = 64, crdWidth = 64 }>",
    "bsr2x3",
])
def test_format_objects_and_maps(fmt):
    assert_matches(sc.einsum("ij,j->i", A, x, formats=(fmt, "dense")), A.toarray() @ x)


def test_hybrid_coo_any_rank():
    T = random_sparse((4, 3, 5, 2), 0.3, np.float64, rng)
    hybrid = sc.Format.coo(4, dense_trailing=2)
    v = rng.random(2)
    want = np.einsum("ijkl,l->ijk", T.toarray(), v)
    assert_matches(sc.einsum("ijkl,l->ijk", T, v, formats=(hybrid, "dense")), want)
    assert_matches(sc.einsum("ijkl,l->ijk", T, v, formats=("csf", "dense")), want)


def test_csf_with_dimension_order():
    T = random_sparse((4, 3, 5), 0.3, np.float64, rng)
    f = sc.Format.csf(3, order=(2, 0, 1))
    M = rng.random((3, 2))
    assert_matches(sc.einsum("ijk,jr->ikr", T, M, formats=(f, "dense")), np.einsum("ijk,jr->ikr", T.toarray(), M))


def test_encodings_are_what_the_docs_say():
    assert resolve("csr", 2).with_widths(32, 32).encoding() == (
        "#sparse_tensor.encoding<{ map = (d0, d1) -> (d0 : dense, d1 : compressed), posWidth = 32, crdWidth = 32 }>")
    assert resolve("csc", 2).encoding() == "#sparse_tensor.encoding<{ map = (d0, d1) -> (d1 : dense, d0 : compressed) }>"
    assert "d0 floordiv 2 : dense, d1 floordiv 2 : compressed, d0 mod 2 : dense, d1 mod 2 : dense" in \
        resolve("bsr2x2", 2).encoding()


def test_index_width_is_chosen_per_call():
    from sparsecc.runtime.operands import build
    A32 = sp.csr_array((A.data, A.indices.astype(np.int32), A.indptr.astype(np.int32)), shape=A.shape)
    s = build(A32, resolve("csr", 2), "A")
    assert s.fmt.pos_width == 32 and s.buffers[0].dtype == np.int32
    for mine, theirs in zip(s.buffers, (A32.indptr, A32.indices, A32.data)):   # zero copy
        assert np.shares_memory(mine, theirs)
    big = sp.csr_array((np.ones(1), np.array([2**31 + 5]), np.array([0, 1])), shape=(1, 2**31 + 10))
    s = build(big, resolve("csr", 2), "big")
    assert s.fmt.crd_width == 64 and s.buffers[1].dtype == np.int64
    y = sc.einsum("ij->i", big)
    assert_matches(y, np.array([1.0]))


def test_bsr_coiterated_with_another_sparse_operand():
    """Found by the property tests: MLIR mixed up coordinates of demapped BSR blocks
    co-iterated with a CSF/COO operand; such BSR operands now run as CSR."""
    A = sp.csr_array(np.array([[1.0, 0.0], [0.0, 0.0]]))
    T = np.zeros((2, 2, 2)); T[0, 0, 0] = T[0, 1, 1] = 1.0
    for other in ("csf", "coo"):
        got = sc.einsum("jl,lij->i", A, sp.coo_array(T), formats=["bsr2x2", other])
        np.testing.assert_array_equal(got, np.einsum("jl,lij->i", A.toarray(), T))
    B = sp.csr_array(np.arange(36.0).reshape(6, 6))
    got = sc.einsum("ij,ij->", B, B, formats=["bsr2x2", "bsr3x2"])     # block sizes differ
    assert np.isclose(got, (B.toarray() ** 2).sum())


@pytest.mark.parametrize("name,rank", [("csr", 2), ("csc", 2), ("dcsr", 2), ("dcsc", 2), ("coo", 2), ("coo", 3),
                                       ("csf", 3), ("dense", 2)])
def test_a_nameless_format_prints_as_the_preset_it_is(name, rank):
    """A format rebuilt from its levels (an AOT manifest's) printed its MLIR encoding in
    errors next to the user's 'csr[...]'; it prints the preset's name now."""
    f = resolve(name, rank).with_widths(32, 32) if name != "dense" else resolve(name, rank)
    rebuilt = Format(f.levels, f.order, f.block, f.pos_width, f.crd_width)
    assert rebuilt.name == "" and str(rebuilt) == str(f)


@pytest.mark.parametrize("first,then,rank", [("csf", "dcsr", 2), ("dcsr", "csf", 2), ("coo", "csf", 1),
                                             ("csf", "coo", 1)])
def test_formats_of_one_structure_keep_their_own_names_through_caches(first, then, rank):
    """dcsr and a rank-2 csf are the same levels: a cache keyed by structure returned the
    first one's object for the second (the user's dcsr printed as 'csf[...]' in errors, as
    a 1-D coo could print as 'csf' or 'dense'), depending on what the process had resolved
    before."""
    for w in (32, 64):
        resolve(first, rank).with_widths(w, w)
        got = resolve(then, rank).with_widths(w, w)
        assert got.name == then and str(got).startswith(then + "[")


def test_a_custom_format_still_prints_its_encoding():
    f = Format(("dense", "compressed(nonordered)"))
    assert str(f).startswith("#sparse_tensor.encoding<")
