"""The kernel's signature and ABI: the argument order of ``@kernel`` (one ``index`` per index
variable, in order of first appearance; one tensor per operand, in operand order; for a dense
result the output memref last), the tensor types (all dimensions dynamic, sparse operands with
their ``#sparse_tensor.encoding``), and :class:`KernelSignature`, what the runtime calls it with.
``docs/architecture.md`` (Calling convention) describes the ABI after the passes."""

from __future__ import annotations

from dataclasses import dataclass

from .. import dtypes as dt
from ..expr import Statement, accesses
from ..formats import Format


@dataclass(frozen=True)
class KernelSignature:
    """What the runtime needs to call the function: the argument order."""

    index_order: tuple[str, ...]          # one index argument per name, in order
    operands: tuple[str, ...]             # operand names, in order
    out_rank: int
    out_dtype: str
    out_format: Format | None = None      # None: dense output written in place


def tensor_type(rank: int, row: dt.DType, enc: str | None) -> str:
    shape = "x".join(["?"] * rank)
    t = f"{shape}x{row.storage}" if rank else row.storage
    return f"tensor<{t}, {enc}>" if enc else f"tensor<{t}>"


def arguments(stmt: Statement, formats: dict[str, Format], dtypes: dict[str, str]):
    """The operands' encodings and types and the function's parameters: (index_order,
    encodings {operand: alias}, alias definitions, ranks, types, SSA names, parameters)."""
    encs: dict[str, str] = {}
    aliases: list[str] = []
    for k, opname in enumerate(stmt.operands):
        f = formats[opname]
        if not f.is_dense:
            alias = f"#enc{k}"
            aliases.append(f"{alias} = {f.encoding()}")
            encs[opname] = alias
    ranks = {a.tensor: len(a.indices) for a in accesses(stmt.expr)}
    index_order = tuple(dict.fromkeys(i for a in accesses(stmt.expr) for i in a.indices))

    types = {opname: tensor_type(ranks[opname], dt.lookup(dtypes[opname]), encs.get(opname))
             for opname in stmt.operands}
    ssa = {opname: f"%arg{k}" for k, opname in enumerate(stmt.operands)}
    params = [f"%size_{i}: index" for i in index_order]
    params += [f"{ssa[o]}: {types[o]}" for o in stmt.operands]
    return index_order, encs, aliases, ranks, types, ssa, params
