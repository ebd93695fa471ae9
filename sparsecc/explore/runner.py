"""The timing runner: :func:`explore` compiles every candidate, runs it once, checks it
against an independent reference (:mod:`.reference`), then times the candidates in rounds."""

from __future__ import annotations

import gc
import itertools
import math
import time
import warnings
from dataclasses import replace

import numpy as np
import scipy.sparse as sp

from .. import _progress
from .. import dtypes as dt
from ..errors import OperandError, ShapeError, SparseccError
from ..expr import accesses, describe, index_sizes
from ..formats import Format, resolve
from ..options import Options
from ..parse import looks_like_notation, parse_einsum, parse_notation
from ..make import make_kernel
from ..runtime.plans import bind_named
from ..runtime.threads import get_num_threads, set_num_threads
from .candidates import (MAX_CANDIDATES, _format_candidates, _option_candidates, _own_name,
                         _thread_candidates)
from .reference import Majority, sampled_reference
from .report import ExploreReport, Row, _spec_name

#: each timing sample loops the kernel for at least this long (tiny kernels: clock resolution)
MIN_SAMPLE_S = 1e-3


def _compile(expression: str, formats: tuple, options: Options, out_format, prune=False, check=True):
    return make_kernel(expression, tuple(formats), {}, options, out_format, prune, check)


def _prepared(x, spec, rank: int):
    """``x`` in SciPy's own layout of format ``spec``, where SciPy has one (so the kernel reads
    it without building buffers each call, as a user storing data that way would); else ``x``."""
    if not isinstance(spec, str):
        return x
    name = spec.strip().lower()
    try:
        if name == "dense":
            return x.toarray() if sp.issparse(x) else x
        if rank == 2 and name in ("csr", "csc"):
            y = sp.csr_array(x) if name == "csr" else sp.csc_array(x)
            if y is x or not y.has_canonical_format:
                y = y.copy()
                y.sum_duplicates()
            return y
        if name == "coo" and rank >= 2:
            y = sp.coo_array(x)
            if y is x:
                return x            # the kernel coalesces a non-canonical COO operand itself
            y.sum_duplicates()
            return y
        if rank == 2 and name.startswith("bsr") and "x" in name:
            r, c = (int(v) for v in name[3:].split("x"))
            y = sp.bsr_array(x, blocksize=(r, c))
            if y is x:
                return x
            y.sum_duplicates()
            return y
    except (ValueError, TypeError, MemoryError):
        return x
    return x


def _convert_estimate(names, values, specs, ranks) -> float | None:
    """Median seconds of building the operands' buffers for ``specs`` (what each call does
    before native code runs); ``None`` if it cannot be measured."""
    from ..runtime.operands import build, default_format
    try:
        fmts = []
        for n, x, spec, r in zip(names, values, specs, ranks):
            if spec is None:
                spec, _ = default_format(x)
            block = tuple(x.blocksize) if sp.issparse(x) and x.format == "bsr" else None
            fmts.append(resolve(spec, r, describe(n), block))
        ts = []
        for _ in range(3):
            t = time.perf_counter()
            for n, x, f in zip(names, values, fmts):
                if not f.is_dense:
                    build(x, f, describe(n))
            ts.append(time.perf_counter() - t)
        return float(np.median(ts))
    except Exception:          # noqa: BLE001 - an estimate only; the kernel reports real errors
        return None


def _same_layout(a: Format, b: Format) -> bool:
    return a.levels == b.levels and a.order == b.order and a.block == b.block


def _ran_as(specs, used, values, ranks) -> tuple | None:
    """The formats a kernel actually stored its operands in, if any differs from the
    candidate's (BSR co-iterated with another sparse operand runs as CSR; a sparse result
    stores contraction operands in Gustavson's order), else ``None``."""
    if not used or len(used) != len(specs):
        return None
    try:
        out, differs = [], False
        for spec, u, x, r in zip(specs, used, values, ranks):
            block = tuple(x.blocksize) if sp.issparse(x) and x.format == "bsr" else None
            want = resolve(spec if spec is not None else _own_name(x), r, "operand", block)
            if _same_layout(want, u):
                out.append(spec)
                continue
            differs = True
            named = [n for n in ("csr", "csc", "dcsr", "dcsc", "coo", "dense")
                     if _safe_same(n, u, r)]
            out.append(named[0] if named else replace(u, pos_width=None, crd_width=None))
        return tuple(out) if differs else None
    except SparseccError:
        return None


def _safe_same(name: str, f: Format, rank: int) -> bool:
    try:
        return _same_layout(resolve(name, rank), f)
    except SparseccError:
        return False


def _sample(kern, args, inner: int) -> float:
    """Seconds per call of ``kern(*args)``, over ``inner`` back-to-back calls (tiny kernels loop
    for at least MIN_SAMPLE_S, to rise above the clock's resolution); no garbage collection
    inside the sample."""
    was = gc.isenabled()
    gc.disable()
    try:
        t = time.perf_counter()
        for _ in range(inner):
            kern(*args)
        return (time.perf_counter() - t) / inner
    finally:
        if was:
            gc.enable()


def _failure(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"failed: {type(err).__name__}: {text[0] if text else ''}".rstrip(": ")


def _bind(expression: str, operands: tuple, named: dict):
    """(statement, operand names, operand values) - errors in the user's terms."""
    if not isinstance(expression, str):
        raise SparseccError(f"an expression is a string, got {type(expression).__name__}")
    if looks_like_notation(expression):
        stmt = parse_notation(expression)
        names = stmt.operands
        return stmt, names, bind_named(expression, names, operands, named)
    if named:
        raise OperandError(f"einsum expressions take operands by position, got keyword(s) {', '.join(named)}")
    stmt = parse_einsum(expression, len(operands))
    return stmt, stmt.operands, list(operands)


def _validated(stmt, names, values):
    """Operands accepted the way a kernel accepts them; shapes and dtypes checked (ShapeError,
    DTypeError, OperandError) before anything compiles."""
    from ..runtime.operands import as_operand
    from ..runtime.validate import validate
    vals = [as_operand(v, describe(n)) for n, v in zip(names, values)]
    for n, v in zip(names, vals):
        validate(v, describe(n))       # malformed buffers: one clear error, not a failed row each
    ranks = {a.tensor: len(a.indices) for a in accesses(stmt.expr)}
    for n, v in zip(names, vals):
        dt.lookup(v.dtype, describe(n))
        if v.ndim != ranks[n]:
            raise ShapeError(f"{describe(n)} has {v.ndim} dimension(s), but the expression indexes it "
                             f"with {ranks[n]}")
    index_sizes(stmt, {n: tuple(v.shape) for n, v in zip(names, vals)})
    return vals, [ranks[n] for n in names]


def _result_is_sparse(stmt, names, specs, ranks, out_format) -> bool:
    if out_format is not None:
        return not (isinstance(out_format, str) and out_format.strip().lower() == "dense") and \
            not (isinstance(out_format, Format) and out_format.is_dense)
    from ..patterns import default_result_format
    sparse = frozenset(n for n, s, r in zip(names, specs, ranks) if not resolve(s, r).is_dense)
    try:
        return default_result_format(stmt, sparse) != "dense"
    except SparseccError:
        return False


def explore(expression: str, *operands, formats=None, options=None, threads=None, index_widths=None,
            vector_lengths=None, out_format=None, repeat: int = 7, budget_s: float | None = None,
            max_candidates: int = MAX_CANDIDATES, convert: bool = True, progress=True,
            **named_operands) -> ExploreReport:
    """Try candidate formats (and options, thread counts) for an expression on your operands.

    Compiles the expression for every candidate, runs each, checks its result against an
    independent reference, times it and ranks the candidates, fastest first.
    ``sc.explore("ij,j->i", A, x)`` (einsum: operands by position) or
    ``sc.explore("y[i] = A[i,j] * x[j]", A=A, x=x)`` (index notation: by name).

    Args:
        expression: Einsum subscripts or an index-notation statement.
        *operands (numpy.ndarray | scipy.sparse array | scalar):
            The operands by position (einsum, or index notation in the order operands
            first appear).
        formats (list | dict | None): ``None``: default candidates for every sparse operand by its rank (matrices:
            csr, csc, coo, dcsr, dcsc and BSR block sizes that divide the shape; rank 3+: coo
            and CSF level orders); dense operands stay dense. Or a dict
            ``{operand: format or [formats]}`` (by name, or by position for einsum), or a
            list with one entry per operand (a format, a list of formats, or ``None`` for
            the defaults).
        options (Options | list[Options] | None): The base ``sc.Options``, or a list of them (each a candidate).
        threads (list[int] | None): Thread counts to try (``sc.set_num_threads``; the count is restored after).
        index_widths (list[int | None] | None): Values of ``Options.index_width`` to try (``None``, 32, 64).
        vector_lengths (list[int] | None): Values of ``Options.vector_length`` to try.
        out_format (str | Format | None): The result's format, as in ``sc.einsum``.
        repeat: Timing samples per candidate (the median is reported).
        budget_s: No new candidate starts after this many seconds (the first always runs);
            ``None``: no limit.
        max_candidates: The product of all axes is cut to this many (the candidates closest
            to the first are kept, with a ``UserWarning``).
        convert: Time operands stored in each candidate's SciPy layout where SciPy has one
            (converted once, up front); ``False`` times calls on the operands as given.
        progress (bool | str): A progress bar on stderr when it is a terminal; ``"always"``: always;
            ``False``: never.
        **named_operands (numpy.ndarray | scipy.sparse array | scalar):
            The operands by name (index notation).

    Returns:
        An ``ExploreReport``: ``print(report)`` shows the ranking, ``report.best`` is a ready
        kernel with the winning formats, ``report.plot(path)`` draws a chart.

    Raises:
        SparseccError: A bad argument (``repeat``, ``budget_s``, ``max_candidates``, an
            operand or format that does not fit the expression), or no candidate ran.
    """
    t_start = time.monotonic()
    if isinstance(repeat, bool) or not isinstance(repeat, (int, np.integer)) or repeat < 1:
        raise SparseccError(f"repeat must be a positive integer, got {repeat!r}")
    if budget_s is not None and (isinstance(budget_s, bool) or not isinstance(budget_s, (int, float))
                                 or not budget_s > 0):
        raise SparseccError(f"budget_s must be a positive number of seconds or None, got {budget_s!r}")
    if isinstance(max_candidates, bool) or not isinstance(max_candidates, (int, np.integer)) or max_candidates < 1:
        raise SparseccError(f"max_candidates must be a positive integer, got {max_candidates!r}")
    if progress not in (True, False, None, "always"):
        raise SparseccError(f"progress is True, False or 'always', got {progress!r}")
    stmt, names, values = _bind(expression, operands, named_operands)
    values, ranks = _validated(stmt, names, values)
    shapes = [tuple(int(s) for s in v.shape) for v in values]
    if out_format is not None:
        resolve(out_format, len(stmt.indices), "the result")
    n_sparse = sum(sp.issparse(v) for v in values)
    allow_blocks = n_sparse < 2 and not _result_is_sparse(
        stmt, names, [_own_name(v) for v in values], ranks, out_format)
    fcands = _format_candidates(formats, names, values, ranks, shapes, allow_blocks)
    ocands = _option_candidates(options, index_widths, vector_lengths)
    tcands = _thread_candidates(threads)
    notes = []
    axes = fcands + [ocands, tcands]
    total = math.prod(len(a) for a in axes)
    combos = itertools.product(*[range(len(a)) for a in axes])
    if total > max_candidates:
        # keep the candidates closest to the first one (fewest axes changed), in order
        picked = sorted(combos, key=lambda c: sum(i > 0 for i in c))[:max_candidates]
        picked.sort()
        msg = (f"{total} candidates capped to max_candidates={max_candidates} (those closest to the first "
               f"were kept); pass formats=/max_candidates= to choose")
        notes.append(msg)
        warnings.warn(f"sc.explore: {msg}", UserWarning, stacklevel=2)
    else:
        picked = list(combos)
    cands = [(tuple(axes[k][i] for k, i in enumerate(c[:-2])), ocands[c[-2]], tcands[c[-1]]) for c in picked]

    from ..runtime.loader import STATS      # sc.cache_info()'s counters
    prepared: dict = {}
    rows: list[Row] = []
    timed: list[tuple[Row, object, list, int, list]] = []   # (row, kernel, args, inner loops, samples)
    # the independent reference: the statement at sampled entries, else a majority vote
    sizes = index_sizes(stmt, {n: tuple(v.shape) for n, v in zip(names, values)})
    reference = sampled_reference(stmt, names, values, sizes)
    majority = Majority() if reference is None else None
    notes.append(f"results checked against {reference.describe()}" if reference is not None else
                 "results checked against the majority of the candidates (the statement is beyond the "
                 "entry sampler)")
    before = get_num_threads()
    skipped = 0
    bar = _progress.Progress(len(cands) + repeat, _progress.wanted(progress))
    try:
        # phase 1: compile, run once, check against the reference, calibrate
        for idx, (fmts, opts, nthr) in enumerate(cands):
            label = ", ".join(_spec_name(s) for s in fmts)
            row = Row(fmts, opts, nthr, index=idx)
            rows.append(row)
            if idx and budget_s is not None and time.monotonic() - t_start > budget_s:
                row.error = f"skipped: budget_s={budget_s:g} spent"
                skipped += 1
                bar.step("skipped")
                continue
            bar.show(label)
            if nthr is not None:
                set_num_threads(nthr)
            if convert:
                args = []
                for k, (x, spec) in enumerate(zip(values, fmts)):
                    key = (k, _spec_name(spec))
                    if key not in prepared:
                        prepared[key] = _prepared(x, spec, ranks[k])
                    args.append(prepared[key])
            else:
                args = values
            try:
                kern = _compile(expression, fmts, opts, out_format)
                misses = STATS.misses
                t = time.perf_counter()
                result = kern(*args)
                first = time.perf_counter() - t
                row.cached = STATS.misses == misses
                if majority is None:
                    why = reference.check(result)
                    if why is not None:
                        row.error = f"wrong result: {why}"
                        bar.step(label)
                        continue
                t = time.perf_counter()
                kern(*args)                                       # warm
                one = time.perf_counter() - t
                if majority is not None:
                    majority.add(row, result)                     # a vote once it ran twice
                del result
            except Exception as err:  # noqa: BLE001 - a candidate that breaks is a row, not a crash
                row.error = _failure(err)
                bar.step(label)
                continue
            row.compile_s = max(0.0, first - one)
            last = getattr(kern, "last_formats", None)     # a wrapped kernel may lack it
            used = last() if callable(last) else None      # widths resolved
            row.ran_as = _ran_as(fmts, used, values, ranks)
            row.convert_s = _convert_estimate(names, args, row.ran_as or fmts, ranks)
            inner = max(1, min(100_000, math.ceil(MIN_SAMPLE_S / max(one, 1e-8))))
            timed.append((row, kern, args, inner, []))
            bar.step(label)
        if majority is not None:
            verdicts = majority.verdicts()
            majority = None                                       # the kept results
            for row, *_ in timed:
                row.error = verdicts.get(id(row))
            timed = [t for t in timed if t[0].error is None]
        # phase 2: timing rounds, every candidate once per round (load that drifts while
        # exploring - other processes, frequency changes - hits every candidate alike)
        rounds = 0
        for rnd in range(repeat):
            if rnd and budget_s is not None and time.monotonic() - t_start > budget_s:
                notes.append(f"budget_s={budget_s:g} spent: timed with {rnd} of {repeat} samples")
                break
            bar.show(f"timing, sample {rnd + 1} of {repeat}")
            for row, kern, args, inner, samples in timed:
                if row.error is not None:
                    continue
                if row.threads is not None:
                    set_num_threads(row.threads)
                try:
                    samples.append(_sample(kern, args, inner))
                except Exception as err:  # noqa: BLE001
                    row.error = _failure(err)
            rounds += 1
            bar.step(f"timing, sample {rnd + 1} of {repeat}")
        for row, kern, args, inner, samples in timed:
            if row.error is None and samples:
                row.median_s = float(np.median(samples))
                row.runs = len(samples) * inner + 2
                row.ok = True
    finally:
        bar.close()
        if tcands != [None]:
            set_num_threads(before)
    if skipped:
        msg = f"budget_s={budget_s:g} spent: {skipped} of {len(rows)} candidates skipped"
        notes.append(msg)
        warnings.warn(f"sc.explore: {msg}", UserWarning, stacklevel=2)
    return ExploreReport(expression, names, rows, out_format, notes, time.monotonic() - t_start, rounds)

