"""The repeated-call path's source: straight-line Python for the calls of one plan's kind.

``runtime/call.py`` executes the source :func:`_fast_source` writes (``_fast_call``, with
the names it reads) and runs a kernel's repeated calls through it; any operand not of the
plan's kind makes it return ``_MISS``, and the general path runs.
"""

from __future__ import annotations

import numpy as np

from . import memref as _memref
from .operands import _INDEX, INT32_MAX, load_compressed, load_csr1d, load_dense
from .plans import _SPARSE_TYPES, _CallInfo, _Plan
from .specialization import HUGE_FACTOR, HUGE_SLACK

_FAST_LOADERS = (load_dense, load_compressed, load_csr1d)


def _fast_source(kernel, info: _CallInfo, plan: _Plan, keys, wide, huge, shape_keyed):
    """Straight-line Python for calls of ``plan``'s kind: ``(source, constants)``, or None.

    The function it defines returns ``_MISS`` (and the general path runs) unless every
    operand is exactly of the plan's kind - the same types, value and index dtypes (by
    identity), ranks, C-contiguous buffers, canonical (sorted, duplicate-free) CSR/CSC, the
    same index-width and huge-dimension classes, shapes that agree - and the plan's kernel
    is still the loaded one.  Then it does what the general path does, without its lists:
    validates each sparse operand (``check``), allocates a dense result, writes the argument
    block, calls ``sparsecc_entry`` and wraps the result.  It covers plans whose operands
    pass to the kernel as they are (NumPy arrays; CSR/CSC and 1-D CSR arrays in their own
    layout and index widths); the rest (COO, BSR, other formats or widths, value
    conversions, 64-bit or huge-dimension calls, AOT kernels) always take the general path."""
    if (wide is not None or huge or shape_keyed or kernel._auto_bsr or plan.converts is not None
            or plan.library is not None or plan.key is None
            or (plan.out_fmt is not None and plan.out_fmt.block is not None)):
        return None
    consts = {"_COMP": plan.comp, "_KEY": plan.key, "_ENTRY": plan.comp.entry, "_ODT": plan.out_dtype,
              "_SOURCE": kernel.source, "_OUTF": plan.out_fmt, "_RAT": plan.packer.result_at}
    n = info.n
    names = [f"a{k}" for k in range(n)]
    lines = [f"if len(args) != {n}:", "    return _MISS"]
    if n:
        lines.append(f"{', '.join(names)}, = args")
    dims: list[list[str]] = []
    counts: list[str] = []
    layout = []             # fill_source's operands
    checks = []             # the validation lines (when kernel.check)
    after = []              # after validation: what reads beyond the structure
    for k, (key, load, fmt) in enumerate(zip(keys, plan.loaders, plan.formats)):
        if load not in _FAST_LOADERS:
            return None
        a = names[k]
        consts[f"_T{k}"] = key[0]
        consts[f"_DT{k}"] = key[1]
        consts[f"_W{k}"] = info.whats[k]
        if load is load_dense:
            if key[0] is not np.ndarray:
                return None
            r = key[2]
            lines += [f"if type({a}) is not _ndarray or {a}.dtype is not _DT{k} or not {a}.flags.c_contiguous:",
                      "    return _MISS",
                      f"sh{k} = {a}.shape"]
            counts.append(f"{a}.size")
            dk = [f"x{k}_{d}" for d in range(r)]
            lines += [f"if len(sh{k}) != {r}:", "    return _MISS"]
            if r:
                lines.append(f"{', '.join(dk)}, = sh{k}")
            layout.append((a, dk))
            dims.append(dk)
            continue
        if key[0] not in _SPARSE_TYPES:
            return None     # a subclass (its key is _key_of's general form): the general path
        t, _, r, idx = key
        if len(idx) != 2 or _INDEX[fmt.pos_width] != idx[0] or _INDEX[fmt.crd_width] != idx[1] or \
                fmt.block is not None:
            return None     # another width than the operand's own: copied by the general path
        consts[f"_PT{k}"], consts[f"_IT{k}"] = idx
        v, p, i = f"v{k}", f"p{k}", f"i{k}"
        lines += [f"if type({a}) is not _T{k}:", "    return _MISS",
                  # known non-canonical (SciPy's cached flag): decline before validating twice
                  f"if {a}.__dict__.get('_has_canonical_format', True) is False:", "    return _MISS",
                  f"{v} = {a}.data", f"{p} = {a}.indptr", f"{i} = {a}.indices",
                  f"if type({v}) is not _ndarray or type({p}) is not _ndarray or type({i}) is not _ndarray:",
                  "    return _MISS",
                  f"if {v}.dtype is not _DT{k} or {p}.dtype is not _PT{k} or {i}.dtype is not _IT{k}:",
                  "    return _MISS",
                  f"sh{k} = {a}.shape",
                  f"if len(sh{k}) != {r}:", "    return _MISS"]
        dk = [f"x{k}_{d}" for d in range(r)]
        lines.append(f"{', '.join(dk)}, = sh{k}")
        counts.append(f"{v}.size")
        if load is load_compressed and r == 2:
            outer, inner = (dk[fmt.order[0]], dk[fmt.order[1]])
            # (validate's own check over Python lists where it takes them, else validate)
            if k in plan.guarded:       # the kernel range-checks the indices: the structure only
                checks += [f"if not _structure_ok({p}, {i}, {v}, {outer}):",
                           f"    _validate({a}, _W{k}, defer, {k})"]
            else:                       # (validate's own check over Python lists where it takes them)
                checks += [f"if {i}.size > _SMALL or not _small_ok({p}, {i}, {v}, {outer}, {inner}, False):",
                           f"    _validate({a}, _W{k}, defer, {k})"]
        else:
            checks.append(f"_validate({a}, _W{k})")
        after += [f"if not {a}.has_canonical_format:", "    return _MISS",
                  f"if not ({p}.flags.c_contiguous and {i}.flags.c_contiguous and {v}.flags.c_contiguous):",
                  "    return _MISS"]
        layout.append(([p, i, v], [dk[d] for d in fmt.order]))
        dims.append(dk)
    # every index's size, and the shapes that must agree
    size = []
    for j, at in enumerate(info.src):
        if at is None:
            return None
        size.append(dims[at[0]][at[1]])
    for k, d, j in info.same:
        lines += [f"if {dims[k][d]} != {size[j]}:", "    return _MISS"]
    # the index-width and huge-dimension classes: both "no" (specialization.huge_dimension)
    if counts:
        lines += [f"if {' or '.join(f'{c} > {INT32_MAX}' for c in counts)}:", "    return _MISS"]
    if size:
        lines.append(f"m = max({', '.join(size)})" if len(size) > 1 else f"m = {size[0]}")
        stored = " + ".join(counts)
        lines += [f"if m > {HUGE_SLACK} and (m > {INT32_MAX} or m > {HUGE_FACTOR} * ({stored}) + {HUGE_SLACK}):",
                  "    return _MISS"]
    out_dims = [size[j] for j in info.out_slots]
    if out_dims:            # the result's entries: the same class as the plan's (kernel.py)
        lines += [f"if {' * '.join(out_dims)} > _kmod.POS32_MAX and kernel._entries_wide(({''.join(f'{a}, ' for a in names)}), "
                  f"({''.join(f'{c}, ' for c in counts)}), ({''.join(f'{d}, ' for d in out_dims)})):",
                  "    return _MISS"]
    lines += ["if _spec._loaded.get(_KEY) is not _COMP or kernel._library is not None:", "    return _MISS"]
    lines.append("defer = [] if kernel.check else None")
    if checks:
        lines.append("if kernel.check:")
        lines += [f"    {c}" for c in checks]
        # indices range checks the kernel does itself (passes/guards.py), the rest now
        lines += ["    if defer:", "        _check_deferred(defer, _GUARDED)"]
    lines += after
    lines += ["_STATS.hits += 1", "kernel._last = _COMP"]
    out_shape = f"({', '.join(out_dims)}{',' if len(out_dims) == 1 else ''})"
    dense_out = plan.out_fmt is None
    if dense_out:
        lines.append(f"out = _zeros({out_shape}, _ODT)")
    lines += ["try:", "    block, base = _MINE.block", "except AttributeError:", "    block, base = _BLOCK()"]
    fill, pack = _memref.fill_source([size[j] for j in plan.size_slots], layout,
                                     ("out", out_dims) if dense_out else None, plan.packer.args_at // 8)
    lines += fill + [pack, "rc = _ENTRY(base)", "if rc:"]
    if not dense_out:       # rc 2: the kernel returned its result normally: freed, not leaked
        lines += ["    if rc == 2: _release(_result_view(_OUTF, block, _RAT))"]
    # a kernel that found an index out of range: the deferred checks (large operands), then
    # the full check of small ones, name the operand and the index
    lines += ["    if rc == 2 and defer:", "        _check_deferred(defer)"]
    lines += [f"    if rc == 2 and defer is not None: _validate({names[k]}, _W{k})" for k in sorted(plan.guarded)]
    lines += ["    _failed(_SOURCE, rc, defer)"]
    if dense_out:
        lines.append("return out" if out_dims else "return out[()]")
    else:
        got = f"_wrap(_OUTF, {out_shape}, _ODT, _result_view(_OUTF, block, _RAT), kernel.prune)"
        lines.append(f"return _as_csc({got})" if plan.transposed else f"return {got}")
    return "def fast(kernel, args):\n" + "".join(f"    {ln}\n" for ln in lines), consts
