"""The manifest of an ahead-of-time library (``<name>.json``): each kernel's statement as
data (exactly as it was compiled), and the digest of each kernel's entry that the library
embeds."""

from __future__ import annotations

import hashlib
import json

from ...errors import SparseccError

MANIFEST_VERSION = 2       # 2: the statement as data, digests in the library

# ------------------------------------------------------------------ the statement as data
# The manifest records the kernel's statement exactly as it was compiled (after a semiring
# rewrite, with every identity and constant), not only the source text: ``load`` rebuilds the
# very Statement, so result dtypes and formats follow from what the native code computes.
def _value_to_json(v):
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, int):
        return {"int": str(v)}
    if isinstance(v, float):
        return {"float": v.hex()}
    if isinstance(v, complex):
        return {"complex": [v.real.hex(), v.imag.hex()]}
    raise SparseccError(f"internal error: cannot record the constant {v!r} in a manifest")


def _value_from_json(v):
    if v is None or isinstance(v, bool):
        return v
    if "int" in v:
        return int(v["int"])
    if "float" in v:
        return float.fromhex(v["float"])
    return complex(float.fromhex(v["complex"][0]), float.fromhex(v["complex"][1]))


def _expr_to_json(e):
    from ... import expr as ex
    t = type(e).__name__
    if isinstance(e, ex.Access):
        return {"t": t, "tensor": e.tensor, "indices": list(e.indices)}
    if isinstance(e, ex.Const):
        return {"t": t, "value": _value_to_json(e.value)}
    if isinstance(e, ex.Unary):
        return {"t": t, "fn": e.fn, "arg": _expr_to_json(e.arg)}
    if isinstance(e, ex.Binary):
        return {"t": t, "op": e.op, "left": _expr_to_json(e.left), "right": _expr_to_json(e.right)}
    if isinstance(e, ex.Reduce):
        return {"t": t, "op": e.op, "indices": list(e.indices), "body": _expr_to_json(e.body),
                "identity": _value_to_json(e.identity)}
    if isinstance(e, ex.Where):
        return {"t": t, "cond": _expr_to_json(e.cond), "left": _expr_to_json(e.left),
                "right": _expr_to_json(e.right)}
    if isinstance(e, ex.Index):
        return {"t": t, "name": e.name}
    if isinstance(e, (ex.Stored, ex.Dense)):
        return {"t": t, "body": _expr_to_json(e.body)}
    raise SparseccError(f"internal error: cannot record {t} in a manifest")


def _expr_from_json(j):
    from ... import expr as ex
    t = j["t"]
    if t == "Access":
        return ex.Access(j["tensor"], tuple(j["indices"]))
    if t == "Const":
        return ex.Const(_value_from_json(j["value"]))
    if t == "Unary":
        return ex.Unary(j["fn"], _expr_from_json(j["arg"]))
    if t == "Binary":
        return ex.Binary(j["op"], _expr_from_json(j["left"]), _expr_from_json(j["right"]))
    if t == "Reduce":
        return ex.Reduce(j["op"], tuple(j["indices"]), _expr_from_json(j["body"]), _value_from_json(j["identity"]))
    if t == "Where":
        return ex.Where(_expr_from_json(j["cond"]), _expr_from_json(j["left"]), _expr_from_json(j["right"]))
    if t == "Index":
        return ex.Index(j["name"])
    if t in ("Stored", "Dense"):
        return getattr(ex, t)(_expr_from_json(j["body"]))
    raise ValueError(f"unknown expression node {t!r}")


def statement_to_json(stmt) -> dict:
    return {"output": stmt.output, "indices": list(stmt.indices), "operands": list(stmt.operands),
            "expr": _expr_to_json(stmt.expr)}


def statement_from_json(j):
    from ...expr import Statement
    return Statement(j["output"], tuple(j["indices"]), _expr_from_json(j["expr"]), tuple(j["operands"]))


def spec_digest(spec: dict) -> str:
    """SHA-256 of one kernel's manifest entry (canonical JSON); the library embeds it."""
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()
