"""The hand-written kernels' shared emission: MLIR text shapes written once.

Every kernel module of this package builds its function bodies with a :class:`Text` (one
line per op, fresh SSA names) and these helpers: the ``scf.if`` that yields a value
(:func:`if_yield`), the row loop (:func:`loop`), a row's bounds in a positions buffer
(:func:`row_bounds`), the out-of-range flag, a CSR operand's parameters and a CSR result's
buffers (allocation with huge pages, the prefix sum of the row counts, the specifier and
the ``return``), arithmetic by value kind, and the module around it all.  What they emit
depends on their arguments alone; the machine's properties arrive as
:class:`sparsecc.kernel_abi.TargetFacts`.
"""

from __future__ import annotations

from typing import Callable

from ... import dtypes as dt
from ...formats import Format
from ...kernel_abi import FLAG_FUNCTION, NUM_THREADS_GLOBAL, TargetFacts


def spec_type(levels: int, buffers: int) -> str:
    """A sparse operand's storage specifier after ``sparse-storage-specifier-to-llvm``."""
    return f"!llvm.struct<(array<{levels} x i64>, array<{buffers} x i64>)>"


#: the specifier of a CSR/CSC operand or result (2 levels; positions, coordinates, values)
SPEC = spec_type(2, 3)


def ity(width: int) -> str:
    return f"i{width}"


class Text:
    """A function body being written: its lines and a counter for fresh SSA names."""

    def __init__(self):
        self.lines: list[str] = []
        self.n = 0

    def fresh(self, stem: str = "v") -> str:
        self.n += 1
        return f"%{stem}{self.n}"

    def __call__(self, line: str) -> None:
        self.lines.append(line)

    def op(self, rhs: str, stem: str = "v") -> str:
        v = self.fresh(stem)
        self.lines.append(f"{v} = {rhs}")
        return v

    def index_constants(self) -> None:
        """``%c0`` and ``%c1``, which every body uses."""
        self("%c0 = arith.constant 0 : index")
        self("%c1 = arith.constant 1 : index")

    def load_index(self, mem: str, at: str, width: int) -> str:
        v = self.op(f"memref.load {mem}[{at}] : memref<?x{ity(width)}>")
        return self.op(f"arith.index_cast {v} : {ity(width)} to index")

    def store_index(self, value: str, mem: str, at: str, width: int) -> None:
        v = self.op(f"arith.index_cast {value} : index to {ity(width)}")
        self(f"memref.store {v}, {mem}[{at}] : memref<?x{ity(width)}>")


def if_yield(t: Text, cond: str, types: str, then: Callable[[], str], otherwise: Callable[[], str], *,
             name: str | None = None, indent: str = "  ") -> str:
    """``name = scf.if cond -> (types) { then; scf.yield } else { otherwise; scf.yield }``:
    ``then`` / ``otherwise`` write their ops and return what their branch yields (``"%a, %b"``
    for several results); ``name``: the result(s) (default a fresh ``%vN``, taken before the
    branches are written)."""
    res = name or t.fresh()
    t(f"{res} = scf.if {cond} -> ({types}) {{")
    t(f"{indent}scf.yield {then()} : {types}")
    t("} else {")
    t(f"{indent}scf.yield {otherwise()} : {types}")
    t("}")
    return res


def loop(parallel: bool, iv: str, lo: str, hi: str) -> tuple[str, str]:
    """The row loop's opening line and its terminator (scf.parallel or a serial scf.for)."""
    if parallel:
        return f"scf.parallel ({iv}) = ({lo}) to ({hi}) step (%c1) {{", "  scf.reduce\n}"
    return f"scf.for {iv} = {lo} to {hi} step %c1 {{", "}"


def row_bounds(t: Text, pos: str, iv: str, width: int) -> tuple[str, str, str]:
    """``(pos[iv], iv + 1, pos[iv + 1])`` as indices (the body of a row loop reading both
    bounds is what ``passes/rewrites.py thread_count`` weighs by its stored entries)."""
    lo = t.load_index(pos, iv, width)
    i1 = t.op(f"arith.addi {iv}, %c1 : index")
    hi = t.load_index(pos, i1, width)
    return lo, i1, hi


# ----------------------------------------------------------------- the out-of-range flag
#: the declaration of this call's flag function (``sparsecc.kernel_abi.FLAG_FUNCTION``)
FLAG_DECL = f"llvm.func @{FLAG_FUNCTION}() -> !llvm.ptr"
#: the call that returns the flag's pointer (once, at the start of the kernel)
FLAG_CALL = f"llvm.call @{FLAG_FUNCTION}() : () -> !llvm.ptr"


def team_size(t: Text) -> str:
    """The team's size, at least 1: the largest of libomp's default, the processors and
    sc.set_num_threads's count (the library's global, which the row loops' num_threads
    reads: passes/rewrites.py thread_count, and which may exceed libomp's default), for
    per-thread workspaces (a thread past them would allocate its own for every row)."""
    a1 = t.op("func.call @omp_get_max_threads() : () -> i32")
    a2 = t.op("func.call @omp_get_num_procs() : () -> i32")
    g = t.op(f"llvm.mlir.addressof @{NUM_THREADS_GLOBAL} : !llvm.ptr")
    a0 = t.op(f"llvm.load {g} : !llvm.ptr -> i32")
    a3 = t.op(f"arith.maxsi {t.op(f'arith.maxsi {a1}, {a2} : i32')}, {a0} : i32")
    a4 = t.op(f"arith.index_cast {a3} : i32 to index")
    return t.op(f"arith.maxsi {a4}, %c1 : index")


def marker_workspaces(t: Text, n: str, T: str, parallel: bool, values: str | None, mark: str = "index") -> str:
    """``%mark`` (``mark``: index or an integer type, every entry -1) and ``%<values>`` (``T``;
    None: none): ``n`` entries a thread, for a whole team when ``parallel`` (:func:`team_size`),
    the dense marker and accumulator of Gustavson-style row loops (SpGEMM, the masked sum and
    product).  Needs ``%cm1``; returns the number of threads they are sized for."""
    nt = team_size(t) if parallel else "%c1"
    size = t.op(f"arith.muli {nt}, {n} : index")
    size1 = t.op(f"arith.maxui {size}, %c1 : index")
    fill = "%cm1" if mark == "index" else t.op(f"arith.constant -1 : {mark}")
    t(f"%mark = memref.alloc({size1}) : memref<?x{mark}>")
    if values is not None:
        t(f"%{values} = memref.alloc({size1}) : memref<?x{T}>")
    t(f"scf.for %x = %c0 to {size} step %c1 {{")
    t(f"  memref.store {fill}, %mark[%x] : memref<?x{mark}>")
    t("}")
    return nt


def set_flag(one32: str, flag: str) -> str:
    """The store that sets the flag (atomic, monotonic: a parallel loop's threads may all
    store it, as ``passes/guards.py`` does)."""
    return f"llvm.store {one32}, {flag} atomic monotonic {{alignment = 4 : i64}} : i32, !llvm.ptr"


# --------------------------------------------------------------------- arithmetic by kind
_ARITH = {"+": {"float": "arith.addf", "int": "arith.addi", "complex": "complex.add"},
          "-": {"float": "arith.subf", "int": "arith.subi", "complex": "complex.sub"},
          "*": {"float": "arith.mulf", "int": "arith.muli", "complex": "complex.mul"}}


def arith(row: dt.DType, op: str, a: str, b: str, ty: str | None = None) -> str:
    """``a op b`` for ``row``'s value kind, of type ``ty`` (default the scalar's)."""
    return f"{_ARITH[op][row.kind]} {a}, {b} : {ty or row.storage}"


def zero(row: dt.DType) -> str:
    if row.kind == "complex":
        part = row.storage[8:-1]
        return f"complex.constant [0.0 : {part}, 0.0 : {part}] : {row.storage}"
    return f"arith.constant {'0.0' if row.kind == 'float' else '0'} : {row.storage}"


def multiply_add(t: Text, fl: bool, x: str, y: str, acc: str, ty: str, fma: str = "math.fma") -> str:
    """``acc + x * y``: one fused multiply-add (``fma``: ``math.fma`` or ``vector.fma``) for
    floats, a multiply then an add for integers."""
    if fl:
        return t.op(f"{fma} {x}, {y}, {acc} : {ty}")
    return t.op(f"arith.addi {acc}, {t.op(f'arith.muli {x}, {y} : {ty}')} : {ty}")


def store_maybe_nontemporal(t: Text, nt: str, value: str, mem: str, at: str, ty: str) -> None:
    """``mem[at] = value``, non-temporally when the i1 ``nt`` holds (run time: one thread)."""
    t(f"scf.if {nt} {{")
    t(f"  memref.store {value}, {mem}[{at}] {{nontemporal = true}} : {ty}")
    t("} else {")
    t(f"  memref.store {value}, {mem}[{at}] : {ty}")
    t("}")


# ------------------------------------------------------------------- huge pages (Linux)
_HUGE = 1 << 21
MADVISE = "func.func private @madvise(!llvm.ptr, i64, i32) -> i32"


def huge_pages(t: Text, mem: str, ty: str, count: str, itemsize: int) -> None:
    """``madvise(MADV_HUGEPAGE)`` on the 2 MiB-aligned part of ``mem`` (``count`` elements):
    a result's fresh pages, faulted in 4 KiB at a time (12k faults for the bench's 48 MB),
    cost more than the merge, on two threads more still.  Only where the target's facts say
    Linux (:attr:`TargetFacts.huge_pages`)."""
    p = t.op(f"memref.extract_aligned_pointer_as_index {mem} : {ty} -> index")
    size = t.op(f"arith.muli {count}, {t.op(f'arith.constant {itemsize} : index')} : index")
    mask = t.op(f"arith.constant {-_HUGE} : index")
    up = t.op(f"arith.addi {p}, {t.op(f'arith.constant {_HUGE - 1} : index')} : index")
    lo = t.op(f"arith.andi {up}, {mask} : index")
    hi = t.op(f"arith.andi {t.op(f'arith.addi {p}, {size} : index')}, {mask} : index")
    ok = t.op(f"arith.cmpi ugt, {hi}, {lo} : index")
    t(f"scf.if {ok} {{")
    n = t.op(f"arith.index_cast {t.op(f'arith.subi {hi}, {lo} : index')} : index to i64")
    ptr = t.op(f"llvm.inttoptr {t.op(f'arith.index_cast {lo} : index to i64')} : i64 to !llvm.ptr")
    t.op(f"func.call @madvise({ptr}, {n}, {t.op('arith.constant 14 : i32')}) : (!llvm.ptr, i64, i32) -> i32")
    t("}")


def huge_page_decls(facts: TargetFacts) -> list[str]:
    """The declarations a kernel calling :func:`huge_pages` needs on this target."""
    return [MADVISE] if facts.huge_pages else []


# ---------------------------------------------------------- CSR operands and CSR results
def csr_params(r: str, f: Format, T: str) -> list[str]:
    """The parameters of a CSR/CSC operand in role ``r``: its buffers and specifier."""
    return [f"%{r}_pos: memref<?x{ity(f.pos_width)}>", f"%{r}_crd: memref<?x{ity(f.crd_width)}>",
            f"%{r}_val: memref<?x{T}>", f"%{r}_spec: {SPEC}"]


def operand_params(plan, formats: dict, T: str) -> list[str]:
    """The kernel's parameters in the sparsifier kernel's order: the sizes (``plan.index_order``),
    then per operand (``formats`` by name, in operand order) a dense 2-D memref ``%<role>`` or a
    CSR operand's :func:`csr_params`."""
    params = [f"%size_{ix}: index" for ix in plan.index_order]
    for op, f in formats.items():
        r = plan.role(op)
        if f.is_dense:
            params.append(f"%{r}: memref<?x?x{T}>")
        else:
            params += csr_params(r, f, T)
    return params


def csr_results(out: Format, T: str) -> str:
    """The types a CSR/CSC result is returned as (its buffers, then its specifier)."""
    return f"memref<?x{ity(out.pos_width)}>, memref<?x{ity(out.crd_width)}>, memref<?x{T}>, {SPEC}"


def alloc_entries(t: Text, cap: str, out: Format, row: dt.DType, facts: TargetFacts) -> None:
    """``%C_crd`` and ``%C_val`` of ``cap`` entries (huge pages where the target has them)."""
    cw = out.crd_width
    t(f"%C_crd = memref.alloc({cap}) : memref<?x{ity(cw)}>")
    t(f"%C_val = memref.alloc({cap}) : memref<?x{row.storage}>")
    if facts.huge_pages:
        huge_pages(t, "%C_crd", f"memref<?x{ity(cw)}>", cap, cw // 8)
        huge_pages(t, "%C_val", f"memref<?x{row.storage}>", cap, row.numpy.itemsize)


def prefix_sum(t: Text, m: str, pw: int) -> str:
    """``%C_pos[i + 1] += %C_pos[i]`` over the ``m`` rows (serial: O(rows)), the row counts
    into positions; returns the stored entries (``%C_pos[m]``)."""
    t(f"scf.for %i = %c0 to {m} step %c1 {{")
    i1 = t.op("arith.addi %i, %c1 : index")
    u = t.load_index("%C_pos", "%i", pw)
    w = t.load_index("%C_pos", i1, pw)
    t.store_index(t.op(f"arith.addi {u}, {w} : index"), "%C_pos", i1, pw)
    t("}")
    return t.load_index("%C_pos", m, pw)


def spec_struct(t: Text, m: str, n: str, m1: str, nnz: str) -> str:
    """A CSR result's specifier: level sizes ``m``, ``n``; buffer sizes ``m1``, ``nnz``, ``nnz``."""
    s = t.op(f"llvm.mlir.undef : {SPEC}")
    for path, v in (("0, 0", m), ("0, 1", n), ("1, 0", m1), ("1, 1", nnz), ("1, 2", nnz)):
        c = t.op(f"arith.index_cast {v} : index to i64")
        s = t.op(f"llvm.insertvalue {c}, {s}[{path}] : {SPEC}")
    return s


def return_csr(t: Text, m: str, n: str, m1: str, nnz: str, out: Format, T: str) -> None:
    """``return`` the result's ``%C_pos``, ``%C_crd``, ``%C_val`` and its specifier."""
    spec = spec_struct(t, m, n, m1, nnz)
    t(f"return %C_pos, %C_crd, %C_val, {spec} : {csr_results(out, T)}")


# ------------------------------------------------------------------- functions, module
#: the OpenMP runtime functions a parallel kernel's per-thread workspaces may ask
OMP_DECLS = ("func.func private @omp_get_thread_num() -> i32",
             "func.func private @omp_get_max_threads() -> i32",
             "func.func private @omp_get_num_threads() -> i32",
             "func.func private @omp_get_num_procs() -> i32")


def kernel_head(params: list[str], results: str | None = None, attrs: str = "") -> str:
    """The opening line of ``@kernel`` (the C interface the runtime calls; ``attrs``: more
    attributes, e.g. ``SELF_CHECKED``)."""
    ret = f" -> ({results})" if results is not None else ""
    more = f", {attrs}" if attrs else ""
    return f"func.func @kernel({', '.join(params)}){ret} attributes {{llvm.emit_c_interface{more}}} {{"


def function(signature: str, body: list[str]) -> list[str]:
    """A private helper function's lines (``signature`` is its opening line)."""
    return [signature] + [f"  {ln}" for ln in body] + ["}"]


def module(decl: list[str], head: str, body: list[str]) -> str:
    """The module: declarations and helper functions, then ``@kernel`` (``head``, ``body``)."""
    out = ["module {"] + [f"  {d}" for d in decl] + [f"  {head}"]
    out += [f"    {line}" for ln in body for line in ln.split("\n")]
    out += ["  }", "}"]
    return "\n".join(out) + "\n"
