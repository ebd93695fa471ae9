"""Storage formats: level types, dimension order, block sizes and index widths.

A :class:`Format` describes how one operand is stored, in MLIR's terms: each *level* has a
level type (``dense``, ``compressed``, ``singleton`` ... with properties such as
``nonunique``), levels store dimensions in ``order``, and block formats (BSR) split every
dimension into a block coordinate and an offset inside the block.  Preset names
(``"csr"``, ``"coo"`` ...) resolve to a Format once the operand's rank is known.
"""

from __future__ import annotations

import re
from functools import lru_cache
from dataclasses import dataclass, field, replace

import numpy as np

from .errors import FormatError

LEVEL_BASES = ("dense", "compressed", "loose_compressed", "singleton")
LEVEL_PROPS = ("nonunique", "nonordered", "soa")
PRESETS = ("dense", "csr", "csc", "coo", "dcsr", "dcsc", "csf", "bsr")


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _check_rank(rank, what: str = "rank") -> None:
    if not _is_int(rank) or rank < 0:
        raise FormatError(f"{what} must be an integer >= 0, got {rank!r}")


@lru_cache(maxsize=None)
def _split_level(level: str) -> tuple[str, tuple[str, ...]]:
    m = re.fullmatch(r"\s*(\w+)\s*(?:\(([^)]*)\))?\s*", level)
    if not m:
        raise FormatError(f"malformed level type {level!r}")
    props = tuple(p.strip() for p in (m.group(2) or "").split(",") if p.strip())
    return m.group(1), props


@dataclass(frozen=True, slots=True)
class Format:
    """How one operand is stored: MLIR's level types, a dimension order, block sizes and
    index widths. The presets (``Format.csr()``, ``Format.csf(3, (2, 0, 1))``,
    ``Format.bsr((4, 4))`` ...) and ``Format.parse("csr")`` build the usual ones; ``str()``
    prints the preset name (with a CSF level order and fixed widths) or the MLIR encoding.

    Args:
        levels: One MLIR level type per level, e.g. ``("dense", "compressed")`` for CSR;
            properties in parentheses (``"compressed(nonunique)"``, ``"singleton(soa)"``).
        order: Level ``l`` stores dimension ``order[l]``; ``None``: dimension order. For
            block formats, the block coordinate levels come first in this order, then the
            in-block offsets.
        block: The block size per dimension for block-sparse formats (BSR), else ``None``.
        pos_width: 32 or 64-bit positions, or ``None`` to follow the operand (32 bits where
            the stored count fits).
        crd_width: 32 or 64-bit coordinates, or ``None`` likewise.
        name: The preset's name, shown by ``str()``; empty for a custom format.

    Raises:
        FormatError: Unknown level types or properties, an order that is not a permutation,
            levels that do not fit together (a singleton level after a unique one).
    """

    levels: tuple[str, ...]
    order: tuple[int, ...] | None = None
    block: tuple[int, ...] | None = None
    pos_width: int | None = None
    crd_width: int | None = None
    name: str = field(default="", compare=False)

    def __post_init__(self):
        if isinstance(self.levels, str) or not hasattr(self.levels, "__iter__"):
            raise FormatError(f"levels is a sequence of level types, e.g. ('dense', 'compressed'), "
                              f"got {self.levels!r}")
        object.__setattr__(self, "levels", tuple(self.levels))
        for k, lv in enumerate(self.levels):
            if not isinstance(lv, str):
                raise FormatError(f"level {k} is {lv!r}; a level type is a string such as 'dense' or "
                                  f"'compressed(nonunique)'")
        if not isinstance(self.name, str):
            raise FormatError(f"name must be a string, got {self.name!r}")
        nlev = len(self.levels)
        if self.block is not None:
            if isinstance(self.block, (str, bytes)) or not hasattr(self.block, "__iter__") or not all(
                    _is_int(b) for b in self.block):
                raise FormatError(f"block is a tuple of integer block sizes, one per dimension, got {self.block!r}")
            block = tuple(int(b) for b in self.block)
            object.__setattr__(self, "block", block)
            if any(b < 1 for b in block):
                raise FormatError(f"block sizes must be >= 1, got {block}")
            if 1 in block:
                # MLIR 22 folds 'i floordiv 1' to 'i' and then fails to infer lvlToDim
                raise FormatError(f"block size {'x'.join(map(str, block))}: MLIR 22 cannot compile a block "
                                  f"size of 1; use 'csr' or 'csc' (or blocks of at least 2)")
            if nlev != 2 * len(block):
                raise FormatError(f"block sizes {block} need {2 * len(block)} levels (block coordinates, then "
                                  f"offsets), got {nlev} levels")
        rank = nlev // 2 if self.block else nlev
        if self.order is not None and (isinstance(self.order, (str, bytes)) or not hasattr(self.order, "__iter__")
                                       or not all(_is_int(d) for d in self.order)):
            raise FormatError(f"order is a tuple of dimension numbers, got {self.order!r}")
        order = tuple(range(rank)) if self.order is None else tuple(int(d) for d in self.order)
        object.__setattr__(self, "order", order)
        if sorted(order) != list(range(rank)):
            raise FormatError(f"order {order} is not a permutation of {rank} dimensions")
        for w in (self.pos_width, self.crd_width):
            if w is not None and (not _is_int(w) or w not in (32, 64)):
                raise FormatError(f"index width must be 32, 64 or None, got {w!r}")
        for k, lv in enumerate(self.levels):
            base, props = _split_level(lv)
            if base not in LEVEL_BASES:
                raise FormatError(f"level {k} has unknown level type {base!r}; known: {', '.join(LEVEL_BASES)}")
            for p in props:
                if p not in LEVEL_PROPS:
                    raise FormatError(f"level {k} has unknown property {p!r}; known: {', '.join(LEVEL_PROPS)}")
            if base == "singleton" and (k == 0 or "nonunique" not in _split_level(self.levels[k - 1])[1]):
                raise FormatError(f"level {k} is singleton, so level {k - 1} must be nonunique "
                                  f"(as in COO: compressed(nonunique), singleton)" if k else
                                  "level 0 is singleton; a singleton level follows a nonunique one "
                                  "(as in COO: compressed(nonunique), singleton)")
            # what MLIR 22 rejects or crashes on (an assertion aborts the compile worker)
            if base == "dense" and props:
                raise FormatError(f"level {k} is {lv!r}: a dense level takes no properties")
            if "soa" in props and base != "singleton":
                raise FormatError(f"level {k} is {lv!r}: 'soa' is a property of singleton levels only")
            if "nonunique" in props and k + 1 < nlev and _split_level(self.levels[k + 1])[0] != "singleton":
                raise FormatError(f"level {k} is nonunique, so level {k + 1} must be singleton "
                                  f"(as in COO: compressed(nonunique), singleton), got {self.levels[k + 1]!r}")

    # -------------------------------------------------------------------- queries
    @property
    def rank(self) -> int:
        return len(self.order)

    @property
    def is_dense(self) -> bool:
        return _is_dense(self)

    def level_base(self, l: int) -> str:
        return _split_level(self.levels[l])[0]

    def level_props(self, l: int) -> tuple[str, ...]:
        return _split_level(self.levels[l])[1]

    def level_dims(self) -> list[tuple[int, str, int]]:
        """For every level: (dimension, "" | "floordiv" | "mod", block size)."""
        if self.block is None:
            return [(d, "", 1) for d in self.order]
        return [(d, "floordiv", self.block[d]) for d in self.order] + \
               [(d, "mod", self.block[d]) for d in self.order]

    def aos_coo_start(self) -> int | None:
        """First level of an array-of-structs COO segment (its coordinates share one buffer).

        A segment is a nonunique (loose_)compressed level followed by singleton levels
        without the ``soa`` property, as MLIR's ``getAoSCOOStart`` defines it.
        """
        for s in range(len(self.levels) - 1):
            if self.level_base(s) in ("compressed", "loose_compressed") and "nonunique" in self.level_props(s) \
                    and self.level_base(s + 1) == "singleton" and "soa" not in self.level_props(s + 1):
                return s
        return None

    def aos_coo_end(self, start: int) -> int:
        end = start + 1
        while end < len(self.levels) and self.level_base(end) == "singleton":
            end += 1
        return end

    def fields(self) -> list[tuple[str, int]]:
        return _fields(self)

    def _fields(self) -> list[tuple[str, int]]:
        """The storage buffers in MLIR's order: ("pos" | "crd", level) ..., then ("val", -1).

        For an AoS COO segment, one ("crd", start) buffer holds the segment's coordinates
        interleaved.  (MLIR's ``foreachFieldInSparseTensor``.)
        """
        if self.is_dense:
            return [("val", -1)]
        aos = self.aos_coo_start()
        out: list[tuple[str, int]] = []
        for l in range(len(self.levels)):
            if aos is not None and aos < l < self.aos_coo_end(aos):
                continue
            base = self.level_base(l)
            if base in ("compressed", "loose_compressed"):
                out.append(("pos", l))
            if base in ("compressed", "loose_compressed", "singleton"):
                out.append(("crd", l))
        return out + [("val", -1)]

    def with_widths(self, pos: int, crd: int) -> "Format":
        return _with_widths(self, self.name, self.pos_width or pos, self.crd_width or crd)

    # --------------------------------------------------------------------- MLIR
    def encoding(self) -> str:
        """The ``#sparse_tensor.encoding`` attribute (widths must be resolved)."""
        dims = ", ".join(f"d{d}" for d in range(self.rank))
        lv = []
        for (d, op, b), t in zip(self.level_dims(), self.levels):
            expr = f"d{d}" if not op else f"d{d} {op} {b}"
            lv.append(f"{expr} : {t}")
        widths = "".join(f", {k} = {w}" for k, w in (("posWidth", self.pos_width), ("crdWidth", self.crd_width)) if w)
        return f"#sparse_tensor.encoding<{{ map = ({dims}) -> ({', '.join(lv)}){widths} }}>"

    def __str__(self) -> str:
        """The preset name, with what the name alone does not say: a CSF level order other than
        the identity (``csf(2,0,1)``, as ``sc.explore`` labels its candidates) and fixed index
        widths (``csr[posWidth=32,crdWidth=32]``); a format without a name prints its MLIR
        encoding."""
        text = self.name or _preset_name(self)
        if not text:
            return self.encoding()
        if text == "csf" and tuple(self.order) != tuple(range(self.rank)):
            text += "(" + ",".join(map(str, self.order)) + ")"
        widths = [f"{k}={w}" for k, w in (("posWidth", self.pos_width), ("crdWidth", self.crd_width)) if w]
        return text + (f"[{','.join(widths)}]" if widths else "")

    # ------------------------------------------------------------------ presets
    @staticmethod
    def dense(rank: int) -> "Format":
        _check_rank(rank)
        return Format(("dense",) * rank, name="dense")

    @staticmethod
    def csr() -> "Format":
        return Format(("dense", "compressed"), name="csr")

    @staticmethod
    def csc() -> "Format":
        return Format(("dense", "compressed"), (1, 0), name="csc")

    @staticmethod
    def dcsr() -> "Format":
        return Format(("compressed", "compressed"), name="dcsr")

    @staticmethod
    def dcsc() -> "Format":
        return Format(("compressed", "compressed"), (1, 0), name="dcsc")

    @staticmethod
    def csf(rank: int, order: tuple[int, ...] | None = None) -> "Format":
        _check_rank(rank)
        return Format(("compressed",) * rank, order, name="csf")

    @staticmethod
    def coo(rank: int, dense_trailing: int = 0) -> "Format":
        """COO over the leading ``rank - dense_trailing`` dims; the rest dense (torch's hybrid COO)."""
        _check_rank(rank)
        _check_rank(dense_trailing, "dense_trailing")
        ns = rank - dense_trailing
        if ns < 1:
            raise FormatError("COO needs at least one sparse dimension")
        if ns == 1:
            sparse = ["compressed"]
        else:
            sparse = ["compressed(nonunique)"] + ["singleton(nonunique, soa)"] * (ns - 2) + ["singleton(soa)"]
        return Format(tuple(sparse) + ("dense",) * dense_trailing, name="coo" if not dense_trailing else "")

    @staticmethod
    def bsr(block: tuple[int, int]) -> "Format":
        if isinstance(block, (str, bytes)) or not hasattr(block, "__len__") or len(block) != 2:
            raise FormatError(f"Format.bsr takes a block size (R, C), got {block!r}")
        return Format(("dense", "compressed", "dense", "dense"), block=tuple(block),
                      name=f"bsr{block[0]}x{block[1]}")

    @staticmethod
    def parse(text: str) -> "Format":
        """A Format from an MLIR map, e.g. ``"(i, j) -> (i : dense, j : compressed)"``.

        The full ``#sparse_tensor.encoding<{ map = ..., posWidth = 32 }>`` form is accepted too.
        """
        if not isinstance(text, str):
            raise FormatError(f"Format.parse takes an MLIR level map string, got {text!r}")
        src = text
        pw = re.search(r"posWidth\s*=\s*(\d+)", text)
        cw = re.search(r"crdWidth\s*=\s*(\d+)", text)
        m = re.search(r"map\s*=\s*(\(.*?\)\s*->\s*\(.*\))", text)
        if m:
            text = m.group(1)
            text = text[: text.rfind(")") + 1]
        m = re.fullmatch(r"\s*\(([^)]*)\)\s*->\s*\((.*)\)\s*", text, re.S)
        if not m:
            raise FormatError(f"not a format name or an MLIR level map: {src!r} "
                              f"(format names: {', '.join(PRESETS)})")
        dims = [d.strip() for d in m.group(1).split(",") if d.strip()]
        if len(set(dims)) != len(dims):
            raise FormatError(f"{src!r}: dimension names repeat")
        level = r"\s*(\w+)(?:\s+(floordiv|mod)\s+(\d+))?\s*:\s*(\w+(?:\s*\([^)]*\))?)\s*"
        if not re.fullmatch(rf"{level}(?:,{level})*", m.group(2)):
            raise FormatError(f"{src!r}: levels are 'd : type' or 'd floordiv b : type' / 'd mod b : type', "
                              f"separated by commas")
        lv = re.findall(level, m.group(2))
        order, fl, mods, block = [], [], [], {}
        types = []
        for d, op, b, t in lv:
            if d not in dims:
                raise FormatError(f"{src!r}: level uses unknown dimension {d!r}")
            types.append(re.sub(r"\s+", " ", t))
            if op == "floordiv":
                fl.append(dims.index(d)); block[dims.index(d)] = int(b)
            elif op == "mod":
                mods.append(dims.index(d))
                if block.get(dims.index(d), int(b)) != int(b):
                    raise FormatError(f"{src!r}: dimension {d!r} has 'floordiv {block[dims.index(d)]}' but "
                                      f"'mod {b}'; a block format uses one block size per dimension")
            else:
                order.append(dims.index(d))
        if block:
            if order or fl != mods or len(fl) != len(dims):
                raise FormatError(f"{src!r}: block formats need 'd floordiv b' for every dimension, "
                                  f"then 'd mod b' in the same order")
            return Format(tuple(types), tuple(fl), tuple(block[d] for d in range(len(dims))),
                          int(pw.group(1)) if pw else None, int(cw.group(1)) if cw else None)
        if sorted(order) != list(range(len(dims))):
            raise FormatError(f"{src!r}: every dimension must appear in exactly one level")
        return Format(tuple(types), tuple(order), None,
                      int(pw.group(1)) if pw else None, int(cw.group(1)) if cw else None)


@lru_cache(maxsize=4096)
def _is_dense(fmt: Format) -> bool:
    return fmt.block is None and all(_split_level(l)[0] == "dense" for l in fmt.levels)


@lru_cache(maxsize=4096)
def _with_widths(fmt: Format, name: str, pos: int, crd: int) -> Format:
    # ``name`` is part of the key: formats compare without their names (dcsr == a rank-2
    # csf), so a cache keyed by the format alone returned whichever was asked first
    return replace(fmt, pos_width=pos, crd_width=crd)


@lru_cache(maxsize=4096)
def _fields(fmt: Format) -> list[tuple[str, int]]:
    return fmt._fields()


def _preset_name(fmt: Format) -> str:
    """The preset a nameless format has the structure of ("" if none): a format rebuilt from
    its MLIR encoding (an AOT manifest) prints as ``csr`` again, not as its encoding."""
    if fmt.block:
        return ""
    rank = len(fmt.levels)
    for name in PRESETS:
        if name == "bsr" or (rank != 2 and name in ("csr", "csc", "dcsr", "dcsc")):
            continue
        try:
            preset = resolve(name, rank)
        except FormatError:
            continue
        if replace(preset, pos_width=fmt.pos_width, crd_width=fmt.crd_width) == fmt:
            return preset.name
    return ""


def resolve(spec, rank: int, what: str = "operand", block=None) -> Format:
    """A :class:`Format` for ``spec`` (a name, an MLIR map string or a Format) at ``rank``.

    ``block``: block size taken from a BSR operand when ``spec`` is ``"bsr"``.
    """
    if isinstance(spec, Format):
        fmt = spec
    elif not isinstance(spec, str):
        raise FormatError(f"{what}: a format is a name, an MLIR level map or sc.Format, got {spec!r}")
    else:
        name = spec.strip().lower()
        two_d = {"csr": Format.csr, "csc": Format.csc, "dcsr": Format.dcsr, "dcsc": Format.dcsc}
        if name in two_d:
            if rank != 2:
                raise FormatError(f"{what} has rank {rank}, but format {name!r} is for matrices (rank 2); "
                                  f"use 'coo', 'csf' or 'dense'")
            return two_d[name]()
        if name == "dense":
            return Format.dense(rank)
        if name == "coo":
            return Format.coo(rank) if rank else Format.dense(0)
        if name == "csf":
            return Format.csf(rank) if rank else Format.dense(0)
        m = re.fullmatch(r"bsr(?:(\d+)x(\d+))?", name)
        if m:
            if rank != 2:
                raise FormatError(f"{what} has rank {rank}, but 'bsr' is for matrices")
            if m.group(1):
                return Format.bsr((int(m.group(1)), int(m.group(2))))
            if block is None:
                raise FormatError(f"{what}: plain 'bsr' takes its block size from the operand when a kernel "
                                  f"is called (a bsr_array's own, else SciPy's choice); here name it "
                                  f"('bsr2x2') or use sc.Format.bsr((2, 2))")
            if 1 in tuple(block):
                # a block size of 1 fails to compile in MLIR 22 (docs/dsl.md): the same entries as CSR
                return Format.csr()
            return Format.bsr(tuple(block))
        if "->" not in name:
            raise FormatError(f"{what}: unknown format {spec!r}; known: {', '.join(PRESETS)}, "
                              f"an MLIR level map or sc.Format")
        fmt = Format.parse(spec)
    if fmt.rank != rank:
        raise FormatError(f"{what} has rank {rank}, but its format {fmt} has rank {fmt.rank}")
    return fmt
