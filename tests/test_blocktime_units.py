"""libomp's blocktime unit as sparsecc reads it back (runtime/threads.py). No timing assertions."""

import os
import subprocess
import sys


def test_blocktime_reads_back_in_the_users_unit():
    """``threads.blocktime()`` counts in the unit of the user's ``KMP_BLOCKTIME`` (libomp 21
    takes ``us``), the user's setting still wins over sparsecc's 0, and without one it is 0."""
    code = "from sparsecc.runtime import threads; print(threads.blocktime())"
    env = {k: v for k, v in os.environ.items() if k != "KMP_BLOCKTIME"}
    got = []
    for value in (None, "200us", "3ms", "7"):
        e = dict(env) if value is None else dict(env, KMP_BLOCKTIME=value)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=120)
        assert r.returncode == 0, r.stderr
        got.append(r.stdout.strip())
    assert got == ["0", "200", "3", "7"]
