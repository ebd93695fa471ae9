"""sparsecc.einsum against numpy.einsum on dense copies: expressions x formats x dtypes."""

import numpy as np
import pytest

import sparsecc as sc
from conftest import assert_matches, dense_of, random_dense, random_sparse

SIZES = dict(i=6, j=4, k=8, l=2, m=4, r=3, b=2)

# (subscripts, which operands are sparse: indices into the operand list)
EXPRESSIONS = [
    ("ij,j->i", (0,)),                 # SpMV
    ("ji,j->i", (0,)),                 # transposed SpMV
    ("ij,i->j", (0,)),                 # vector-matrix
    ("ij,jk->ik", (0,)),               # SpMM
    ("ij,jk", (0, 1)),                 # implicit output, sparse x sparse
    ("ij,kj->ik", (0,)),               # A B^T
    ("ji,jk->ik", (0,)),               # A^T B
    ("ij,jk->ki", (0,)),               # transposed result
    ("ij,ij->ij", (0,)),               # sampled elementwise
    ("ij,ij->ij", (0, 1)),             # sparse * sparse
    ("ij,ij->", (0,)),                 # inner product
    ("ij,ij,ij->i", (0, 1)),           # three-way product
    ("ij->ji", (0,)),                  # transpose
    ("ij->", (0,)),                    # total sum
    ("ij->i", (0,)),                   # row sums
    ("ij->j", (0,)),                   # column sums
    ("ij,ik,jk->ij", (0,)),            # SDDMM, dense result
    ("ij,ik,jk->", (0,)),
    ("ij,j->ij", (0,)),                # column scaling
    ("i,ij->ij", (1,)),                # row scaling
    ("ij,j,i->i", (0,)),
    (",ij->ij", (1,)),                 # scalar operand
    ("ii->i", (0,)),                   # diagonal
    ("ii->", (0,)),                    # trace
    ("ij,jk,kl->il", (0,)),            # chain of three
    ("ij,jk,kl,lm->im", (0, 2)),       # chain of four
    ("ij,jk,kl,li->", (0,)),           # closed chain of four
    ("i,i->", (0,)),                   # dot
    ("i->", (0,)),                     # vector sum
    ("i,j->ij", (0,)),                 # outer product
    ("ijk,jr,kr->ir", (0,)),           # MTTKRP
    ("ijk,k->ij", (0,)),               # TTV
    ("ijk,kl->ijl", (0,)),             # TTM
    ("ijk->kji", (0,)),                # 3-d permutation
    ("ijk->", (0,)),
    ("ijk,ijk->", (0,)),
    ("ijk,ijk->ijk", (0, 1)),
    ("ijk,i->jk", (0,)),
    ("ijk,jk->i", (0,)),
    ("bij,bjk->bik", (0,)),            # batched matrix product
    ("ijkl,jl->ik", (0,)),             # 4-d
    ("iij->j", (0,)),                  # partial trace
]

# A format family names the format of each sparse operand by its rank.
FAMILIES = {
    "dense": {},
    "csr": {2: "csr", 3: "csf", 4: "csf"},
    "csc": {2: "csc", 3: "coo"},
    "coo": {1: "coo", 2: "coo", 3: "coo", 4: "coo"},
    "dcsr": {1: "csf", 2: "dcsr"},
    "dcsc": {2: "dcsc", 3: "csf"},
    "csf": {1: "csf", 2: "csf", 3: "csf", 4: "csf"},
    "bsr": {2: "bsr2x2"},
    "hybrid": {2: "(i, j) -> (i : compressed, j : dense)",
               3: "(i, j, k) -> (i : compressed(nonunique), j : singleton, k : dense)"},
}


def _operands(subscripts, sparse, dtype, seed):
    rng = np.random.default_rng(seed)
    terms = subscripts.split("->")[0].split(",")
    ops = []
    for k, t in enumerate(terms):
        shape = tuple(SIZES[c] for c in t)
        if k in sparse and t:
            ops.append(random_sparse(shape, 0.35, dtype, rng))
        else:
            ops.append(random_dense(shape, dtype, rng))
    return ops


def _formats(subscripts, sparse, family):
    terms = subscripts.split("->")[0].split(",")
    return tuple(FAMILIES[family].get(len(t), "dense") if k in sparse else "dense"
                 for k, t in enumerate(terms))


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("subscripts,sparse", EXPRESSIONS, ids=[e[0] for e in EXPRESSIONS])
def test_formats_float64(subscripts, sparse, family):
    ops = _operands(subscripts, sparse, np.float64, seed=len(subscripts))
    formats = _formats(subscripts, sparse, family)
    want = np.einsum(subscripts, *[dense_of(o) for o in ops])
    got = sc.einsum(subscripts, *ops, formats=formats)
    assert_matches(got, want)


DTYPE_EXPRESSIONS = ["ij,j->i", "ij,jk->ik", "ij,ik,jk->ij", "ijk,jr,kr->ir", "ij->", "ii->i", "ij,ij->ij"]
DTYPES = ["float32", "float64", "int32", "int64", "complex64", "complex128", "bool"]


@pytest.mark.parametrize("family", ["csr", "coo"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("subscripts", DTYPE_EXPRESSIONS)
def test_dtypes(subscripts, dtype, family):
    sparse = (0,)
    ops = _operands(subscripts, sparse, dtype, seed=7)
    want = np.einsum(subscripts, *[dense_of(o) for o in ops])
    got = sc.einsum(subscripts, *ops, formats=_formats(subscripts, sparse, family))
    assert_matches(got, want)


@pytest.mark.parametrize("dtypes", [("int32", "float32"), ("float32", "float64"), ("int64", "complex128"),
                                    ("bool", "int32"), ("complex64", "float64")])
def test_mixed_dtypes_promote_like_numpy(dtypes):
    rng = np.random.default_rng(3)
    A = random_sparse((6, 4), 0.4, dtypes[0], rng, fmt="csr")
    x = random_dense((4,), dtypes[1], rng)
    assert_matches(sc.einsum("ij,j->i", A, x), np.einsum("ij,j->i", A.toarray(), x))
