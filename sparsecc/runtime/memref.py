"""ctypes views of MLIR memref descriptors and the sparse storage specifier.

Descriptor classes are made once per rank and reused: building a new ctypes class per call
(as ``mlir.runtime`` does) leaks memory, since ctypes caches pointer types per class forever.

The call path does not build descriptor objects at all: :class:`ArgPacker` lays out every
argument of a kernel (descriptors, specifiers, sizes and the argument vector pointing at
them) in one int64 block, filled with one ``struct.pack_into`` per call.  Every field of a
descriptor, a specifier and a size is 8 bytes wide, so the block has exactly the C layout.
"""

from __future__ import annotations

import ctypes
import struct
import sys
import threading
from array import array
from functools import lru_cache

import numpy as np


@lru_cache(maxsize=None)
def descriptor_class(rank: int) -> type:
    fields = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p), ("offset", ctypes.c_int64)]
    if rank:
        fields += [("sizes", ctypes.c_int64 * rank), ("strides", ctypes.c_int64 * rank)]
    return type(f"MemRef{rank}D", (ctypes.Structure,), {"_fields_": fields})


@lru_cache(maxsize=None)
def specifier_class(levels: int, fields: int) -> type:
    return type(f"Specifier{levels}x{fields}", (ctypes.Structure,),
                {"_fields_": [("lvl_sizes", ctypes.c_int64 * levels), ("mem_sizes", ctypes.c_int64 * fields)]})


def describe(a: np.ndarray):
    """A descriptor for a C-contiguous array; the array must outlive the call."""
    d = descriptor_class(a.ndim)()
    p = a.ctypes.data
    d.allocated = p
    d.aligned = p
    d.offset = 0
    if a.ndim:
        d.sizes[:] = a.shape
        stride, strides = 1, []
        for n in reversed(a.shape):
            strides.append(stride)
            stride *= n
        d.strides[:] = strides[::-1]
    return d


def specifier(lvl_sizes, mem_sizes):
    s = specifier_class(len(lvl_sizes), len(mem_sizes))()
    s.lvl_sizes[:] = lvl_sizes
    s.mem_sizes[:] = mem_sizes
    return s


# ---------------------------------------------------------------- the call path
def _address_from_header(a: np.ndarray) -> int:
    """The data pointer of ``a``, read from its object (``PyArrayObject.data`` follows the
    object header: NumPy's ABI).  About 4x cheaper than ``a.ctypes.data``."""
    return _word(id(a) + _HEADER).value or 0


def _address_from_ctypes(a: np.ndarray) -> int:
    return a.ctypes.data


_HEADER = object.__basicsize__
_word = ctypes.c_void_p.from_address


def _header_layout_holds() -> bool:
    if sys.implementation.name != "cpython":      # id() is an address only in CPython
        return False
    probes = [np.arange(3.0), np.zeros((2, 3), np.int32)[1], np.empty(0, np.int64)]
    return all(_address_from_header(p) == p.ctypes.data for p in probes)


#: the data pointer of an ndarray (checked once against ``ndarray.ctypes``; never guessed)
address = _address_from_header if _header_layout_holds() else _address_from_ctypes


def memref_words(rank: int) -> int:
    return 3 + 2 * rank


class ArgPacker:
    """The argument block of one kernel signature.

    ``nscalars`` index sizes (each passed by pointer); ``operands``: per operand ``rank``
    (an int: a dense array) or ``(nbuffers, nlevels)`` (sparse storage: one 1-D memref per
    buffer, then the specifier); ``out``: the same for the result (a dense result is the last
    argument; a sparse result is returned through the first, a struct the kernel fills).

    Layout of the block (int64 words): the argument vector (one pointer per argument), then
    the arguments in order, then the sparse result's struct.  Each thread has its own block,
    made once, so the argument vector is written once.  ``pack`` is straight-line code made
    for the layout (see :func:`_packer_source`): it reads each buffer's address and size
    and writes every argument with one ``struct.pack_into``; buffers or shapes that do not
    fit the layout raise ``ValueError`` (or ``struct.error``) before native code runs.
    """

    __slots__ = ("offsets", "struct", "result_at", "words", "args_at", "_mine", "_pack")

    def __init__(self, nscalars: int, operands: list, out):
        sizes = []                                  # words of each argument, in argv order
        result_words = 0
        if isinstance(out, tuple):
            nbuf, nlvl = out
            result_words = 5 * nbuf + nlvl + nbuf
        sizes += [1] * nscalars
        for op in operands:
            if isinstance(op, tuple):
                nbuf, nlvl = op
                sizes += [5] * nbuf + [nlvl + nbuf]
            else:
                sizes.append(memref_words(op))
        if not isinstance(out, tuple):
            sizes.append(memref_words(out))
        nargs = len(sizes) + (1 if result_words else 0)
        offsets, at = [], nargs
        for n in sizes:
            offsets.append(8 * at)
            at += n
        if result_words:
            offsets.insert(0, 8 * at)               # the result struct is the first argument
        self.result_at = 8 * at if result_words else None
        self.offsets = offsets
        self.struct = struct.Struct(f"={at - nargs}q")
        self.words = at + result_words
        self.args_at = 8 * nargs
        self._mine = threading.local()
        self._pack = _make_packer(nscalars, operands, out, nargs, self.struct)

    def block(self):
        """This thread's block and its address (what the kernel's entry point takes)."""
        try:
            return self._mine.block
        except AttributeError:
            block = array("q", bytes(8 * self.words))
            base = block.buffer_info()[0]
            block[:len(self.offsets)] = array("q", [base + o for o in self.offsets])
            got = self._mine.block = (block, base)
            return got

    def pack(self, scalars, operands, out: np.ndarray | None):
        """This thread's block, filled, and its address.  ``scalars``: the sizes;
        ``operands``: per operand ``(buffers, lvl_sizes)`` (sparse) or ``(array, None)``
        (dense, C-contiguous); ``out``: the dense result or None.  Every array must outlive
        the call; the block is overwritten by the thread's next call with this signature."""
        return self._pack(self.block, scalars, operands, out)


def fill_source(scalars: list[str], operands: list, out, at: int) -> tuple[list[str], str]:
    """The code that writes one call's arguments into a block (see :class:`ArgPacker`):
    ``(lines, call)``.  ``scalars``: an expression per size; ``operands``: per operand
    ``(buffers, levels)`` (sparse: a variable name per buffer, an expression per level size)
    or ``(name, rank)`` (a dense array held in variable ``name``; instead of its rank, a list
    of expressions for its dimensions where they are read already); ``out``: the same for a
    dense result, or None.  The lines read each array's address and size (and a dense
    array's shape, unpacked to its rank: a shape that does not fit raises ``ValueError``);
    ``call`` is one ``_pack_into(block, ...)`` (``_word``, ``_HEADER``, ``_address`` and
    ``_pack_into`` are names of the namespace the code runs in)."""
    addr = "_word(id({0}) + _HEADER).value" if address is _address_from_header else "_address({0})"
    body, words = [], list(scalars)

    def dense(name: str, rank):
        body.append(f"p_{name} = {addr.format(name)}")
        words.extend([f"p_{name}", f"p_{name}", "0"])
        if not isinstance(rank, int):       # the dimensions' expressions, already read
            dims, rank = list(rank), len(rank)
        elif rank:
            dims = [f"d_{name}_{k}" for k in range(rank)]
            body.append(f"{', '.join(dims)}, = {name}.shape")
        if rank == 0:                       # a 0-d operand may arrive as shape (1,): not read
            return
        words.extend(dims)
        words.extend("*".join(dims[k + 1:]) or "1" for k in range(rank))

    for first, second in operands:
        if isinstance(first, str):
            dense(first, second)
            continue
        for b in first:
            body.append(f"n_{b} = {b}.size")
            body.append(f"p_{b} = {addr.format(b)}")
            words.extend([f"p_{b}", f"p_{b}", "0", f"n_{b}", "1"])
        words.extend(second)
        words.extend(f"n_{b}" for b in first)
    if out is not None:
        dense(*out)
    return body, f"_pack_into(block, {8 * at}, {', '.join(words)})"


def _packer_source(nscalars: int, operands: list, out, at: int) -> str:
    """Straight-line Python for one layout: unpack, read addresses, one ``pack_into``.
    Every unpacking names its count, so a buffer list or a shape that does not fit the
    layout raises ``ValueError`` instead of reaching native code."""
    body = []

    def one(names: str) -> str:             # a tuple target, even of one name
        return names + ","

    sc = [f"s{k}" for k in range(nscalars)]
    if sc:
        body.append(f"{one(', '.join(sc))} = scalars")
    ops = [f"o{k}" for k in range(len(operands))]
    lv = [f"l{k}" for k in range(len(operands))]
    if ops:
        body.append(f"{one(', '.join(f'({o}, {v})' for o, v in zip(ops, lv)))} = operands")
    layout = []
    for k, op in enumerate(operands):
        if isinstance(op, tuple):
            nbuf, nlvl = op
            bufs = [f"b{k}_{j}" for j in range(nbuf)]
            body.append(f"{one(', '.join(bufs))} = o{k}")
            lvls = [f"v{k}_{j}" for j in range(nlvl)]
            body.append(f"{one(', '.join(lvls))} = l{k}")
            layout.append((bufs, lvls))
        else:
            layout.append((f"o{k}", op))
    fill, call = fill_source(sc, layout, None if isinstance(out, tuple) else ("out", out), at)
    lines = ["def pack(block_of, scalars, operands, out):", "    block, base = block_of()"]
    lines += [f"    {b}" for b in body + fill]
    lines.append(f"    {call}")
    lines.append("    return block, base")
    return "\n".join(lines) + "\n"


def _make_packer(nscalars: int, operands: list, out, at: int, st: struct.Struct):
    namespace = {"_word": _word, "_HEADER": _HEADER, "_address": address, "_pack_into": st.pack_into}
    exec(_packer_source(nscalars, operands, out, at), namespace)   # noqa: S102 - our own source
    return namespace["pack"]
