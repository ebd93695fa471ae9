"""``python -m sparsecc bench``: the benchmark suite.

Times sparsecc kernels against SciPy, NumPy and (when installed) torch.sparse and
python-graphblas on the CPU, in one process, on seeded generated inputs (also as users build
them: int64 indices) and a few real matrices that installed pip packages ship; each row also
names its best peer (the fastest of SciPy, torch and GraphBLAS).  For every kernel it checks
the result against the baseline *before* timing, then reports median times, the ratio to
each baseline, GFLOP/s, achieved GB/s and the fraction of a STREAM-like read bandwidth
measured in the same run, the compile time (cold: the run uses a fresh kernel cache), and
the speedup from 1 thread to all cores.

    python -m sparsecc bench                    # full scale (a few minutes)
    python -m sparsecc bench --small            # seconds
    python -m sparsecc bench --kernels spmv,spgemm --json out.json --png out.png

A wrong result is printed as FAILED and the run exits with status 1.  The guide to reading
the report is docs/performance.md.  This is a benchmark, not a test: nothing here asserts a
time.

One job per module: ``generators`` (seeded inputs), ``real`` (real matrices from installed
packages), ``bandwidth`` (the STREAM-like probe), ``timing`` (``measure``), ``check`` (the
result check), ``baselines`` (SciPy/NumPy/torch/GraphBLAS), ``cases`` (the case table), ``runner``
(one case: compile, check, time), ``report`` (table, Markdown, chart) and ``cli`` (flags,
the suite run, the files).
"""

from .bandwidth import stream_probe
from .cases import IB, VB, Case, cases, select
from .check import check_result
from .cli import SCHEMA, add_arguments, machine_info, main, run
from .generators import coo3, poisson2d, poisson3d, rmat, uniform_rows, user_built
from .real import REAL_MATRICES, real_matrices
from .report import chart, markdown, table
from .runner import all_cores, run_case
from .timing import measure

__all__ = ["stream_probe", "Case", "cases", "select", "check_result", "SCHEMA", "add_arguments", "machine_info",
           "main", "run", "coo3", "poisson2d", "poisson3d", "rmat", "uniform_rows", "user_built", "REAL_MATRICES",
           "real_matrices",
           "chart", "markdown", "table", "all_cores", "run_case", "measure", "VB", "IB"]
