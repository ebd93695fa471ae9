"""The mask rule's candidate (``plan.make_plan``, rule 1): a sparse factor carrying every
output index whose entries are fewer than the product of the others, and that product's
cheapest tree, rated as the product a masked nest reads (never stored: sparse, and no kernel's
result - ``Search.masking``)."""

from __future__ import annotations

from . import path as _path


def mask_candidate(search: _path.Search, prod: _path.Product, greedy):
    """The mask rule (``plan.py``'s docstring): ``(mask factor, the other factors, their best
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
        st = _masked_search(search, rest, keep, greedy, True)
        if st is None:              # a greedy search: its tree gives its statistics
            node = _masked_search(search, rest, keep, greedy, False)
            st = node.stats
        else:
            node = None
        if leaf.nnz < st.nnz:
            found = (z, rest, keep, node)
    if found is None:
        return None
    z, rest, keep, node = found
    return z, rest, node if node is not None else _masked_search(search, rest, keep, greedy, False)


def _masked_search(search: _path.Search, rest, keep, greedy, stats_only: bool):
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
