"""Build libmykernels.so + mykernels.h with sparsecc, then compile and run main.c against it.

    python examples/aot/build.py [OUTDIR]

Everything is written to OUTDIR (default: a new temporary folder), never into the source
tree.  The program is linked with the run path ``$ORIGIN`` (the folder the program is in,
where the library is too), so it runs from any working directory.  The C compiler is
``$CC``, else ``cc``.
"""

import os
import shlex
import subprocess
import sys
import tempfile

import sparsecc as sc

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="sparsecc-aot-example-")

sc.aot.build("mykernels", {
    "spmv": sc.compile("ij,j->i", "csr", "dense"),
    "spgemm": sc.compile("ik,kj->ij", "csr", "csr", out_format="csr"),
}, OUT)
cc = shlex.split(os.environ.get("CC", "").strip() or "cc")
exe = os.path.join(OUT, "main")
cmd = [*cc, "-std=c99", os.path.join(HERE, "main.c"), "-I", OUT, "-L", OUT, "-lmykernels",
       "-Wl,-rpath,$ORIGIN", "-o", exe]
print("$", shlex.join(cmd))
subprocess.run(cmd, check=True)
out = subprocess.run([exe], check=True, capture_output=True, text=True, cwd="/").stdout   # from anywhere
print(out, end="")
assert "spmv: 3 3 9" in out and "C[2,2] = 33" in out, out
print(f"built in {OUT}")
sys.exit(0)
