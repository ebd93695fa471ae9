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
                   help="e.g. 'spmv=ij,j->i:csr,dense' or 'spgemm=ik,kj->ij:csr,csr:csr' (repeat)")
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
    import sparsecc as sc
    kernels = {}
    for item in args.kernel:
        name, sep, rest = item.partition("=")
        parts = rest.split(":")
        if not sep or len(parts) not in (2, 3):
            print(f"--kernel {item!r}: expected NAME=EXPR:FORMATS[:OUT_FORMAT]", file=sys.stderr)
            return 2
        expr, fmts = parts[0], [f.strip() for f in parts[1].split(",")]
        out = parts[2] if len(parts) == 3 else None
        kernels[name.strip()] = sc.compile(expr, *fmts, out_format=out)
    path = sc.aot.build(args.name, kernels, args.out, dtype=args.dtype, index_width=args.index_width,
                        cpu=args.cpu)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
