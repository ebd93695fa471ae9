"""Build libmykernels.so + mykernels.h with sparsecc, then compile and run main.c against it.

    python examples/aot/build.py
"""

import os
import subprocess
import sys

import sparsecc as sc

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "build")

sc.aot.build("mykernels", {
    "spmv": sc.compile("ij,j->i", "csr", "dense"),
    "spgemm": sc.compile("ik,kj->ij", "csr", "csr", out_format="csr"),
}, OUT)
exe = os.path.join(OUT, "main")
subprocess.run(["cc", "-std=c99", os.path.join(HERE, "main.c"), "-I", OUT, "-L", OUT, "-lmykernels",
                f"-Wl,-rpath,{OUT}", "-o", exe], check=True)
out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
print(out, end="")
assert "spmv: 3 3 9" in out and "C[2,2] = 33" in out, out
sys.exit(0)
