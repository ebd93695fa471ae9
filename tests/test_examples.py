"""The examples and the demo run and check their own results."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


import pytest


@pytest.mark.parametrize("name", ["quickstart.py", "sparse_results.py", "derivatives/bratu_newton.py",
                                  "derivatives/least_squares.py", "derivatives/trust_constr.py"])
def test_example(name):
    subprocess.run([sys.executable, os.path.join(ROOT, "examples", name)], check=True, capture_output=True)


def test_ipopt_example():
    """IPOPT through cyipopt (the `ipopt` extra; it builds against a system Ipopt)."""
    pytest.importorskip("cyipopt")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "derivatives", "ipopt_least_squares.py")],
                         check=True, capture_output=True, text=True)
    assert "triplets match SciPy's" in out.stdout


def test_demo_small():
    out = subprocess.run([sys.executable, "-m", "sparsecc", "demo", "--scale", "0.1"], check=True,
                         capture_output=True, text=True, cwd=ROOT)
    assert "results match: yes" in out.stdout
