"""The manifest of an ahead-of-time library (``<name>.json``): each kernel's statement as
data (exactly as it was compiled), and the digest of each kernel's entry that the library
embeds."""

from __future__ import annotations

import ctypes
import hashlib
import json

from ...errors import LibraryError, SparseccError

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


# ------------------------------------------------------------------ the manifest's shape
# A manifest is data from a file anyone may have edited: its shape is checked before any of
# it is used, so a wrong one is a clear error, never an AttributeError from deep inside.
_STR, _OPT_STR, _BOOL, _INT = (str,), (str, type(None)), (bool,), (int,)
_OPERAND = {"name": _STR, "key": _STR, "format": _STR, "format_name": _OPT_STR, "dtype": _STR,
            "indices": "names"}
_KERNEL = {"source": _STR, "statement": _STR, "stmt": (dict,), "operands": "operands", "index_order": "names",
           "out_indices": "names", "out_dtype": _STR, "out_format": _OPT_STR, "entry": _STR}
_KERNEL_OPTIONAL = {"prune": _BOOL, "kernel": _STR, "fills_output": _BOOL, "guarded": "ints",
                    "huge_dimensions": _STR, "device": _STR, "gpu_arch": _STR,
                    "derivative": (dict,), "plan": (dict,), "step_of": _STR}
_DIGEST = {"size": _INT, "sha256": _STR}


def _shape_problem(value, want, field: str, owner: str) -> str | None:
    where = f"{field!r} of {owner}"
    if want == "names":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return None if ok else f"{where} is not a list of names"
    if want == "ints":
        ok = isinstance(value, list) and all(type(v) is int for v in value)
        return None if ok else f"{where} is not a list of integers"
    if want == "operands":
        if not isinstance(value, list):
            return f"{where} is {_describe(value)}, not a list"
        for k, op in enumerate(value):
            got = _fields_problem(op, _OPERAND, {}, f"operand {k} of {owner}")
            if got:
                return got
        return None
    if type(value) is bool and bool not in want:      # a bool is an int to isinstance
        return f"{where} is a boolean, not {_kinds(want)}"
    return None if isinstance(value, want) else f"{where} is {_describe(value)}, not {_kinds(want)}"


def _fields_problem(obj, required: dict, optional: dict, owner: str) -> str | None:
    if not isinstance(obj, dict):
        return f"{owner} is {_describe(obj)}, not an object"
    for key, want in required.items():
        if key not in obj:
            return f"{owner} has no {key!r}"
        got = _shape_problem(obj[key], want, key, owner)
        if got:
            return got
    for key, want in optional.items():
        if key in obj:
            got = _shape_problem(obj[key], want, key, owner)
            if got:
                return got
    return None


def _describe(v) -> str:
    return {dict: "an object", list: "a list", str: "a string", type(None): "null", bool: "a boolean",
            int: "a number", float: "a number"}.get(type(v), type(v).__name__)


def _kinds(want) -> str:
    names = {str: "a string", type(None): "null", bool: "a boolean", int: "an integer", dict: "an object"}
    return " or ".join(names[t] for t in want)


def shape_problem(manifest, name: str, c_name) -> str | None:
    """What is wrong with the shape of library ``name``'s manifest (a list at the top,
    ``kernels`` not an object, a field of the wrong type, another library's name, a kernel
    name that is not a C identifier: ``c_name`` matches one), or None.  The statement inside
    each kernel's ``stmt`` is checked when it is rebuilt."""
    got = _fields_problem(manifest, {"version": _INT, "name": _STR, "kernels": (dict,)},
                          {"device": _STR, "library": (dict,), "ir": (dict,)}, "the manifest")
    if got:
        return got
    if manifest["name"] != name:
        return f"it names the library {manifest['name']!r}, not {name!r}"
    for part in ("library", "ir"):
        if part in manifest:
            got = _fields_problem(manifest[part], _DIGEST, {}, f"the manifest's {part!r}")
            if got:
                return got
            d = manifest[part]
            if d["size"] < 0 or len(d["sha256"]) != 64 or d["sha256"].strip("0123456789abcdef"):
                return f"the manifest's {part!r} holds no size and SHA-256"
    for kname, spec in manifest["kernels"].items():
        if not c_name.match(kname):
            return f"kernel name {kname!r} is not a C identifier"
        got = _fields_problem(spec, _KERNEL, _KERNEL_OPTIONAL, f"kernel {kname!r}")
        if got:
            return got
    return None


def checked_digest(name: str, kname: str, spec: dict, lib, manifest_of: str):
    """Check kernel ``kname``'s manifest record against the digest library ``lib`` embeds for
    it (a LibraryError where it holds none or another); returns ``bad(why)``, the error for
    the record's other faults."""
    def bad(why):
        return LibraryError(f"library {name!r}: kernel {kname!r} does not match {manifest_of}: {why}; "
                            f"rebuild the library with sc.aot.build", manifest_of)
    try:
        embedded = (ctypes.c_char * 65).in_dll(lib, f"{name}_{kname}_spec_sha256").value.decode("ascii", "replace")
    except (ValueError, AttributeError):
        raise bad("the library holds no such kernel") from None
    if embedded != spec_digest(spec):
        raise bad("the manifest entry was changed after the library was built")
    return bad
