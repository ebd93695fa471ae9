"""Command line: ``python -m sparsecc demo``."""

from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m sparsecc", description="sparsecc command line")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="compile SpMV, SpMM, SDDMM, SpGEMM and MTTKRP, check them against SciPy/NumPy, time them")
    d.add_argument("--scale", type=float, default=1.0, help="problem size factor (default 1.0)")
    args = p.parse_args(argv)
    if args.cmd == "demo":
        from .demo import main as demo
        return demo(args.scale)
    return 2


if __name__ == "__main__":
    sys.exit(main())
