"""The mask rule (``plan.py``'s rule 1): a sparse factor carrying every output index bounds
the result's pattern, and the product of the other factors is needed only at its entries.
:func:`candidate` finds the mask the rule takes, if any, and the best tree of what it masks,
rated as the product a masked nest reads (never stored: sparse, and no kernel's result -
``Search.masking``)."""

from __future__ import annotations

import math

from . import path as _path


def candidate(search: _path.Search, prod: _path.Product, greedy):
    """The mask rule (module docstring): ``(mask factor, the other factors, their best
    tree)`` where it applies, else None.  The sparsest such mask is taken.  Each candidate's
    product is first estimated alone (the statistics its search would give, no split rated:
    ``best_tree(stats_only=True)``); only the mask taken is searched in full."""
    out = set(prod.indices)
    found = None
    for z, leaf in enumerate(search.leaves):
        if search.leaf_dense[z] or leaf.full or not out <= set(leaf.indices):
            continue
        rest = [k for k in range(search.n) if k != z]
        # what the others' product keeps: their indices the mask or the output carries
        keep = tuple(dict.fromkeys(i for k in rest for i in search.leaves[k].indices
                                   if i in leaf.indices or i in out))
        if found is not None and not leaf.nnz < search.leaves[found[0]].nnz:
            continue
        # an estimate never exceeds its volume: a mask storing as many entries bounds nothing
        # (the search would give what the full search estimates again: its subsets' keys agree)
        sizes = {i: n for k in rest for i, n in zip(search.leaves[k].indices, search.leaves[k].sizes)}
        if leaf.nnz >= math.prod(sizes[i] for i in keep):
            continue
        st = masked_search(search, rest, keep, greedy, True)
        if st is None:              # a greedy search: its tree gives its statistics
            node = masked_search(search, rest, keep, greedy, False)
            st = node.stats
        else:
            node = None
        if leaf.nnz < st.nnz:
            found = (z, rest, keep, node)
    if found is None:
        return None
    z, rest, keep, node = found
    return z, rest, node if node is not None else masked_search(search, rest, keep, greedy, False)


def masked_search(search: _path.Search, rest, keep, greedy, stats_only: bool):
    """``best_tree`` over ``rest`` producing ``keep``, as the product a mask reads: never
    stored, so rated sparse."""
    saved = (search.result_dense, search.dense_allowed, search.masking)
    search.result_dense = False
    search.dense_allowed = lambda st: st.full
    search.masking = True
    try:
        return _path.best_tree(search, rest, keep, greedy, stats_only)
    finally:
        search.result_dense, search.dense_allowed, search.masking = saved
