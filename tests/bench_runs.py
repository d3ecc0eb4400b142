"""``python -m mpilab.bench ARGS`` as the tests run it (tests/test_bench.py,
tests/test_bench_halo.py, tests/test_onesided.py): its completed process, output captured.
"""

import subprocess
import sys


def bench(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "mpilab.bench", *args], capture_output=True,
                          text=True, timeout=timeout)
