"""The compiled kernels: message integrity, sizes, argument errors, at 2, 3 and 4 ranks."""

import pytest
from conftest import mpirun, needs_mpi

from mpilab import runtime

pytestmark = needs_mpi


@pytest.mark.parametrize("ranks", [2, 3, 4])  # 3 and 4 oversubscribe 2 cores
def test_kernels_under_mpiexec(ranks):
    res = mpirun("check_kernels.py", ranks)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    assert out.count("OK rank") == ranks, out[-4000:]


def test_kernels_over_tcp():
    res = mpirun("check_kernels.py", 2, transport="tcp")
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]


def test_missing_kernel_is_a_clear_error():
    import mpilab.kernels as k

    with pytest.raises(AttributeError):
        k.no_such_kernel  # noqa: B018
    with pytest.raises(FileNotFoundError, match="make kernels"):
        k.program("no-such-program")


SIGNATURES = """
import inspect, json, sys, importlib
mod = importlib.import_module("mpilab.kernels." + sys.argv[1])
out = {}
for n, f in vars(mod).items():
    if callable(f) and not n.startswith("_") and not inspect.isclass(f) \\
            and getattr(f, "__module__", None) == mod.__name__:
        ps = inspect.signature(f).parameters.values()
        out[n] = [[p.name for p in ps if p.kind is p.POSITIONAL_OR_KEYWORD],
                  [p.name for p in ps if p.kind is p.KEYWORD_ONLY],
                  [repr(p.default) for p in ps if p.default is not p.empty]]
print(json.dumps(out))
"""


@pytest.mark.parametrize("name", ["pingpong", "memcopy", "stencil", "wave", "collectives",
                                  "onesided", "matching"])
def test_the_type_stub_matches_the_compiled_module(name):
    """mpilab/kernels/<name>.pyi declares exactly the module's functions and parameters.

    The module is inspected in a child process: importing it starts MPI (mpi4py), which
    this test process must not.
    """
    import ast
    import json
    import subprocess
    import sys
    from pathlib import Path

    import mpilab.kernels

    assert name in mpilab.kernels.NAMES
    res = subprocess.run([sys.executable, "-c", SIGNATURES, name], capture_output=True,
                         text=True, timeout=120, env=runtime.clean_env())
    assert res.returncode == 0, res.stderr
    real = json.loads(res.stdout)
    stub = ast.parse((Path(mpilab.kernels.__file__).parent / f"{name}.pyi").read_text())
    declared = {}
    for f in stub.body:
        if isinstance(f, ast.FunctionDef):
            a = f.args
            declared[f.name] = [[x.arg for x in a.args], [x.arg for x in a.kwonlyargs],
                                [repr(ast.literal_eval(d)) for d in a.defaults]
                                + [repr(ast.literal_eval(d)) for d in a.kw_defaults
                                   if d is not None]]
    assert declared == real


def test_line_bounce_measures_two_cores_and_refuses_bad_cpus():
    """A cache line bounced between two pinned threads: a positive round trip, short of a
    millisecond; one CPU, the same CPU twice or a CPU this process may not use is a
    ValueError, never a hang. Run in a child process (importing a kernel starts MPI)."""
    import os
    import subprocess
    import sys

    code = """
import os, json
from mpilab.kernels import memcopy
cpus = sorted(os.sched_getaffinity(0))
out = {"ns": memcopy.line_bounce_ns(cpus[0], cpus[1], 20000) if len(cpus) > 1 else None}
for a, b in ((cpus[0], cpus[0]), (cpus[0], 4096), (-1, cpus[0])):
    try:
        memcopy.line_bounce_ns(a, b, 10)
        out[f"{a},{b}"] = "no error"
    except ValueError as exc:
        out[f"{a},{b}"] = str(exc)
print(json.dumps(out))
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=runtime.clean_env())
    assert res.returncode == 0, res.stderr
    import json

    out = json.loads(res.stdout)
    if len(os.sched_getaffinity(0)) > 1:
        assert 0 < out.pop("ns") < 1e6, out
    else:
        assert out.pop("ns") is None
    for said in out.values():
        assert "two different CPUs" in said, out
