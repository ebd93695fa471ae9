"""Python rewrite between the two pipelines: every ``memref<...xi1>`` becomes ``memref<...xi8>``.

The MLIR wheels abort the process (``MemRefToLLVM.cpp: integralElementType.getWidth() >= 8``)
on any load or store of an ``i1`` memref, and the sparsifier makes one for the ``filled``
bitmap of access-pattern expansion (SpGEMM, SDDMM and every kernel whose sparse output is
filled out of order).  After sparsification the bitmap is a plain memref, so it is widened
here: the memref types become ``i8``, stores get an ``arith.extui`` in front and loads an
``arith.trunci`` behind.  Runs on the module in place (inside the compile worker).
"""

from __future__ import annotations

VERSION = "widen_i1_memrefs 1"


def widen_i1_memrefs(module) -> int:
    """Rewrite ``module`` in place; returns how many values were retyped."""
    from mlir import ir
    from mlir.dialects import arith

    i1 = ir.IntegerType.get_signless(1)
    i8 = ir.IntegerType.get_signless(8)

    def is_i1_memref(t) -> bool:
        return isinstance(t, ir.MemRefType) and t.element_type == i1

    def widened(t):
        return ir.MemRefType.get(t.shape, i8, t.layout, t.memory_space, loc=ir.Location.unknown())

    values = []   # every value whose type must change
    loads, stores = [], []

    def visit(op):
        for region in op.regions:
            for block in region.blocks:
                values.extend(a for a in block.arguments if is_i1_memref(a.type))
        values.extend(r for r in op.results if is_i1_memref(r.type))
        if op.name == "memref.load" and is_i1_memref(op.operands[0].type):
            loads.append(op)
        elif op.name == "memref.store" and is_i1_memref(op.operands[1].type):
            stores.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    for st in stores:
        with ir.InsertionPoint(st), st.location:
            wide = arith.extui(i8, st.operands[0])
        st.operands[0] = wide
    for ld in loads:
        res = ld.results[0]
        res.set_type(i8)
        with ir.InsertionPoint(ld), ld.location:
            narrow = arith.trunci(i1, res)
        narrow.owner.operation.move_after(ld)
        res.replace_all_uses_except(narrow, narrow.owner.operation)
    for v in values:
        v.set_type(widened(v.type))
    return len(values)
