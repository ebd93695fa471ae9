"""Command line: ``python -m sparsecc demo | aot | bench | gpucheck``."""

from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m sparsecc", description="sparsecc command line")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="compile SpMV, SpMM, SDDMM, SpGEMM and MTTKRP, check them against SciPy/NumPy, time them")
    d.add_argument("--scale", type=float, default=1.0, help="problem size factor (default 1.0)")
    a = sub.add_parser("aot", help="compile kernels into a shared library, a C header and a manifest")
    a.add_argument("--name", required=True, help="library name: writes lib<name>.so, <name>.h, <name>.json")
    a.add_argument("--kernel", action="append", required=True, metavar="NAME=EXPR:FORMATS[:OUT]",
                   help="e.g. 'spmv=ij,j->i:csr,dense', 'spgemm=ik,kj->ij:csr,csr:csr' or, in index notation, "
                        "'y[i] = A[i,j] * x[j]:A=csr,x=dense' (named y) (repeat)")
    a.add_argument("-o", "--out", required=True, help="output folder")
    a.add_argument("--cpu", default=None, help="LLVM CPU to build for (default: this machine; 'x86-64': any)")
    a.add_argument("--dtype", default="float64", help="dtype of every operand (default float64)")
    a.add_argument("--index-width", type=int, default=32, choices=(32, 64))
    b = sub.add_parser("bench", help="the benchmark suite: sparsecc against SciPy/NumPy/torch, JSON + PNG report")
    from .bench.cli import add_arguments as bench_arguments
    bench_arguments(b)
    g = sub.add_parser("gpucheck", help="probe the CUDA driver; run SpMV, SpMM, SDDMM, MTTKRP on the GPU against "
                                        "SciPy/NumPy with GB/s and cuSPARSE's time (exit 1 without a device)")
    g.add_argument("--scale", type=float, default=1.0,
                   help="problem size factor (default 1: SpMV with 50M stored entries; 0.01 for a quick look)")
    args = p.parse_args(argv)
    if args.cmd == "gpucheck":
        from .gpucheck import main as gpucheck
        return gpucheck(args.scale)
    if args.cmd == "bench":
        from .bench.cli import run as bench
        return bench(args)
    if args.cmd == "demo":
        from .demo import main as demo
        return demo(args.scale)
    if args.cmd == "aot":
        return _aot(args)
    return 2


def _aot(args) -> int:
    """``--kernel NAME=EXPR:FORMATS[:OUT]`` (``NAME=`` may be left out for index notation: the
    kernel is then named after its output), FORMATS by position or, for index notation, by
    operand name (``A=csr,x=dense``).  A bad kernel, expression or format: a message and exit
    code 2, no traceback."""
    import re

    import sparsecc as sc
    kernels = {}
    usage = "expected NAME=EXPR:FORMATS[:OUT_FORMAT] (index notation: [NAME=]OUT[...] = EXPR:FORMATS[:OUT_FORMAT])"
    for item in args.kernel:
        head, sep, rest = item.partition("=")
        if not sep:
            return _fail(f"--kernel {item!r}: {usage}")
        expr_part = rest.split(":")[0]
        if re.fullmatch(r"\s*[A-Za-z_]\w*\s*", head) and ("=" in expr_part or "[" not in expr_part):
            name, text = head.strip(), rest             # NAME=EXPR
        elif re.match(r"\s*[A-Za-z_]\w*\s*[\[=]", item):
            # index notation alone ("y[i] = ...", "s = A[i,j] * B[i,j]"): named after its output
            name, text = re.match(r"\s*([A-Za-z_]\w*)", item).group(1), item
        else:
            return _fail(f"--kernel {item!r}: {usage}; NAME must be an identifier")
        parts = text.split(":")
        if len(parts) not in (2, 3) or not parts[1].strip():
            return _fail(f"--kernel {item!r}: {usage}")
        expr, fmts = parts[0], [f.strip() for f in parts[1].split(",")]
        out = parts[2].strip() if len(parts) == 3 and parts[2].strip() else None
        named = dict(f.split("=", 1) for f in fmts if "=" in f)
        if named and len(named) != len(fmts):
            return _fail(f"--kernel {item!r}: give every format by position or every one by name")
        try:
            if named:
                k = sc.compile(expr, out_format=out, **{n.strip(): f.strip() for n, f in named.items()})
            else:
                k = sc.compile(expr, *fmts, out_format=out)
        except sc.SparseccError as err:
            return _fail(f"--kernel {item!r}: {err}")
        if name in kernels:
            return _fail(f"--kernel {item!r}: a second kernel named {name!r}")
        kernels[name] = k
    try:
        path = sc.aot.build(args.name, kernels, args.out, dtype=args.dtype, index_width=args.index_width,
                            cpu=args.cpu)
    except (sc.CompileError, sc.InternalError):
        raise
    except sc.SparseccError as err:
        return _fail(str(err))
    print(path)
    return 0


def _fail(message: str) -> int:
    print(f"python -m sparsecc aot: error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
