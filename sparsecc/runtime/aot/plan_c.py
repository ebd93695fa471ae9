"""The C function of a planned kernel in an ahead-of-time library (``sc.aot.Planned``;
docs/aot.md "Planned kernels").

The plan was fixed at build time; each step is a kernel of the library (``<lib>_<k>__<n>``).
``<lib>_<k>`` has the signature the one nest's entry point would have (``cwrapper._c_kernel``
of the same record) and calls the steps in order: a dense intermediate is a ``malloc`` of its
shape (known from the index sizes), a sparse one the step's ``<lib>_sparse_result``, handed
to the step that reads it as its level buffers and freed after its last reader; an operand a
step reads in the other order (CSR read as CSC) is transposed in the wrapper on each call.
"""

from __future__ import annotations

from ...errors import SparseccError
from ...formats import Format
from .cwrapper import _C_TYPES, LOCAL, _c_kernel, _field_names, local_problem
from .derivative_c import _transposed, _transposes


def planned_c(lib: str, kname: str, spec: dict, plan: dict, step_specs: dict) -> tuple[str, str]:
    """(declaration with its documentation, definition) of planned kernel ``kname``: ``spec``
    its one-nest record (operands, index order, result), ``plan`` the steps' record
    (``aot_plans.expand``), ``step_specs`` each step kernel's manifest record."""
    fn = f"{lib}_{kname}"
    decl, _ = _c_kernel(lib, kname, spec)
    cut = decl.rindex(f"\nint {fn}(")
    doc, proto = decl[:cut], decl[cut + 1:]
    ptext = proto[len(f"int {fn}("):proto.rindex(");")]
    problem = local_problem(kname, [param.split()[-1].lstrip("*") for param in ptext.split(",")])
    if problem:
        raise SparseccError(problem)
    lines = [f" * Runs its plan, fixed at build time from example operands ({len(plan['steps'])} steps):"]
    lines += [f" *   {n}. {s['text']}  [{s['format']}]" for n, s in enumerate(plan["steps"], 1)]
    first_nl = doc.index("\n")
    doc = doc[:first_nl + 1] + "\n".join(lines) + "\n" + doc[first_nl + 1:]

    operands = {op["key"]: op for op in spec["operands"]}
    last_use = {}
    for n, s in enumerate(plan["steps"]):
        for x in s["inputs"]:
            last_use[x] = n
    decls, setup, teardown, body = [], [], [], []
    transposed = {}
    interm = {}               # intermediate name -> (C variable, dense?)
    for n, s in enumerate(plan["steps"]):
        sspec = step_specs[s["kernel"]]
        root = n == len(plan["steps"]) - 1
        args = [f"n_{s['sizes'][i]}" for i in sspec["index_order"]]
        block, after = [], []       # an intermediate transposed for this step only
        for x, op in zip(s["inputs"], sspec["operands"]):
            if x in operands:
                args += _operand_args(operands[x], op, kname, x, transposed, setup, teardown)
                continue
            var, dense, made = interm[x]
            if dense:
                args.append(var)
            elif made["format"] == op["format"]:
                fields = _field_names(Format.parse(op["format"]), "t")
                args += [a for b in range(len(fields)) for a in (f"{var}.buffers[{b}]", f"{var}.lengths[{b}]")]
            else:
                args += _intermediate_args(var, made, op, kname, x, block, after)
        if root:
            if (sspec["out_format"], sspec["out_dtype"]) != (spec["out_format"], spec["out_dtype"]):
                raise SparseccError(f"kernel {kname!r}: its plan's last step writes {sspec['out_dtype']} "
                                    f"{sspec['out_format'] or 'dense'}, the kernel's result is {spec['out_dtype']} "
                                    f"{spec['out_format'] or 'dense'}; build it as one nest (no sc.aot.Planned)")
            args.append("out")
        else:
            var = f"{LOCAL}t{n}"
            dense = sspec["out_format"] is None
            interm[s["output"]] = (var, dense, {"format": sspec["out_format"], "dtype": sspec["out_dtype"],
                                                "indices": [s["sizes"][i] for i in sspec["out_indices"]]})
            if dense:
                ct = _C_TYPES[sspec["out_dtype"]]
                decls.append(f"    {ct} *{var} = NULL;")
                # the element count checked for overflow (a wrapped product would be a short
                # buffer the step writes past): a size that does not fit is out of memory
                body += ["    {", f"        size_t {LOCAL}count = 1; int {LOCAL}ok = 1;"]
                for i in sspec["out_indices"]:
                    n_ = f"n_{s['sizes'][i]}"
                    body.append(f"        if ({n_} < 0 || ({n_} && {LOCAL}count > SIZE_MAX / (size_t){n_})) {LOCAL}ok = 0; "
                                f"else {LOCAL}count *= (size_t){n_};")
                body += [f"        if ({LOCAL}ok && {LOCAL}count < (SIZE_MAX - 1) / sizeof *{var}) "
                         f"{var} = malloc({LOCAL}count * sizeof *{var} + 1);",
                         "    }", f"    if (!{var}) {{ {LOCAL}rc = 1; goto done; }}"]
                teardown.append(f"    free({var});")
                args.append(var)
            else:
                decls.append(f"    {lib}_sparse_result {var}; memset(&{var}, 0, sizeof {var});")
                teardown.append(f"    {lib}_free_result(&{var});")
                args.append(f"&{var}")
        call = f"{LOCAL}rc = {lib}_{s['kernel']}({', '.join(args)});   /* {s['text']} */"
        if block:
            body += ["    {", *block, "    " + call, *after, "    }"]
        else:
            body.append("    " + call)
        body.append(f"    if ({LOCAL}rc) goto done;")
        for x, m in last_use.items():        # intermediates no later step reads: freed now
            if m == n and x in interm:
                var, dense, _ = interm[x]
                body.append(f"    free({var}); {var} = NULL;" if dense else f"    {lib}_free_result(&{var});")
    # the transposes (setup) allocate before any step runs: one that fails returns at once
    definition = "\n".join([f"int {fn}({ptext}) {{", f"    int {LOCAL}rc = 0;", *decls, *setup, *body, "done:",
                            *teardown, f"    return {LOCAL}rc;", "}", ""])
    return doc + "\n" + proto, definition


def _intermediate_args(var: str, made: dict, op: dict, kname: str, key: str, block: list,
                       after: list) -> list[str]:
    """The arguments of a step that reads sparse intermediate ``var`` (``made``: the format,
    dtype and indices it was written in) in the other order (a CSR read as CSC): transposed
    in a block around the step's call, freed after it."""
    mine, theirs = Format.parse(made["format"]), Format.parse(op["format"])
    if not _transposes(mine, theirs):
        raise SparseccError(f"kernel {kname!r}: a step reads intermediate {key} as {op['format']}, which the C "
                            f"wrapper cannot make from the {made['format']} it was written in; build the kernel "
                            f"as one nest (no sc.aot.Planned)")
    fields = _field_names(mine, var)
    for b, (cname, ctype, _) in enumerate(fields):
        t = ctype or _C_TYPES[made["dtype"]]
        block.append(f"    const {t} *{cname} = {var}.buffers[{b}];")
    user = {"name": var, "format": made["format"], "dtype": made["dtype"], "indices": made["indices"]}
    s, t, args = _transposed(user, dict(op, indices=made["indices"]), f"{var}x_")
    block += [line.replace("return 1;", f"{LOCAL}rc = 1; goto done;") for line in s]
    after += t
    return args


def _operand_args(user: dict, op: dict, kname: str, key: str, transposed: dict, setup: list,
                  teardown: list) -> list[str]:
    """The arguments a step takes for the kernel's operand ``key``: the caller's own
    parameters, or the caller's CSR (CSC) transposed once per call where the step reads it
    in the other order."""
    if user["format"] == op["format"]:
        if op["format"] == "dense":
            return [user["name"]]
        fields = _field_names(Format.parse(op["format"]), user["name"])
        return [a for c, _, _ in fields for a in (c, f"{c}_len")]
    if op["format"] == "dense" or user["format"] == "dense" or \
            not _transposes(Format.parse(user["format"]), Format.parse(op["format"])):
        raise SparseccError(f"kernel {kname!r}: a step reads operand {key!r} as {op['format']}, which the C "
                            f"wrapper cannot make from the {user['format']} it takes; build the kernel as one "
                            f"nest (no sc.aot.Planned)")
    if key not in transposed:
        s, t, args = _transposed(user, dict(op, indices=user["indices"]), f"{LOCAL}p{len(transposed)}_")
        # an allocation that fails returns at once: the operands transposed before it are freed
        # first (the intermediates are allocated after every transpose)
        earlier = " ".join(line.strip() for line in teardown)
        s = [line.replace("return 1;", f"{earlier} return 1;") if earlier else line for line in s]
        setup.extend(s)
        teardown.extend(t)
        transposed[key] = args
    return transposed[key]
