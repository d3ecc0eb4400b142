"""Source lines of code run elsewhere, mapped back where the functions are (mpilab.sources).

The frames come from real runs: functions pickled with cloudpickle, run in another
Python process, their traceback and faulthandler frames mapped back through a
:class:`SourceMap` built in the process that defined them. Both pickler behaviours are
exercised with real releases: the installed cloudpickle (3.1.3 writes
``co_filename = "<dynamic-code>"``) and the other one that ``scripts/setup.sh --test``
puts in ``.venv/alt/`` (3.1.2 keeps the original file name).
"""

from __future__ import annotations

import functools
import json
import linecache
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mpilab.sources import SourceMap, is_library
from mpilab.sources import describe_frame as _describe_frame
from mpilab.sources import parse_stack as _parse_stack

REPO = Path(__file__).resolve().parent.parent
ALT = sorted((REPO / ".venv" / "alt").glob("cloudpickle-*"))


def helper(x):
    return 1 / x  # the line a ZeroDivisionError names


def outer(x):
    def inner(y):
        return helper(y - y)

    return inner(x)


def test_functions_in_a_file_nested_and_called_by_name_are_mapped():
    smap = SourceMap.of(outer)
    names = {e[0] for e in smap.entries}
    assert {"outer", "inner", "helper"} <= names
    line = helper.__code__.co_firstlineno + 1
    assert smap.text("<dynamic-code>", line, "helper") == "return 1 / x  # the line a ZeroDivisionError names"


def test_closures_partials_and_arguments_are_followed():
    def make():
        k = 3

        def add_k(v):
            return v + k

        return add_k

    smap = SourceMap.of(functools.partial(outer, 1), make())
    assert {"outer", "inner", "helper", "add_k"} <= {e[0] for e in smap.entries}


def test_library_code_is_not_mapped_and_counts_as_library():
    import numpy as np

    smap = SourceMap.of(np.sum)
    assert len(smap) == 0
    assert is_library(np.__file__)
    assert not is_library("<dynamic-code>")


def notebook_cell(source: str, name: str = "/tmp/ipykernel_1/123456.py") -> dict:
    """Define functions as ipykernel does for a cell: compiled from a file name that only
    the kernel's linecache knows (IPython caches each cell's lines there)."""
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    ns: dict = {"__name__": "__main__"}
    exec(compile(source, name, "exec"), ns)
    return ns


CELL = textwrap.dedent('''\
    import numpy as np


    def exchange(comm, data):
        received = np.empty_like(data)
        comm.Send(data, dest=1)
        comm.Recv(received, source=1)
        return received
    ''')


def test_a_notebook_cell_is_mapped_from_the_kernels_linecache():
    ns = notebook_cell(CELL)
    smap = SourceMap.of(ns["exchange"])
    assert smap.text("<dynamic-code>", 6, "exchange") == "comm.Send(data, dest=1)"
    # travels as plain data (a student's kernel -> the grader) and still answers
    back = SourceMap.from_plain(json.loads(json.dumps(smap.to_plain())))
    assert back.text("<dynamic-code>", 7, "exchange") == "comm.Recv(received, source=1)"
    assert _describe_frame([("<dynamic-code>", 6, "exchange")], back) == (
        "line 6 of exchange: comm.Send(data, dest=1)")


IPYTHON_CELL = r'''
import json, sys
from IPython.core.interactiveshell import InteractiveShell
from mpilab.sources import SourceMap, describe_frame

shell = InteractiveShell.instance()
shell.run_cell("x = 1", store_history=True)  # an earlier cell: In [1]
cell = "\n\n" + sys.argv[1]  # In [2], with two leading blank lines
assert shell.run_cell(cell, store_history=True).success
func = shell.user_ns["exchange"]
line = func.__code__.co_firstlineno + 2  # comm.Send, as IPython numbers it
smap = SourceMap.of(func)
back = SourceMap(SourceMap.from_plain(json.loads(json.dumps(smap.to_plain()))).entries,
                 files=False)  # as a grader gets it: plain data, no files read
print(json.dumps({"cell": cell, "line": line,
                  "here": describe_frame([("<dynamic-code>", line, "exchange")], smap),
                  "grader": describe_frame([("<dynamic-code>", line, "exchange")], back)}))
'''


def test_a_frame_in_an_ipython_cell_is_named_by_its_cell_and_cell_line():
    """IPython numbers a cell's lines after dropping its leading blank lines; the map
    records the cell's execution count and adds the blank lines back, so the line named
    is the one the notebook's editor shows, in the cell with that prompt. (In a separate
    process: an IPython shell leaves its names in builtins.)"""
    res = subprocess.run([sys.executable, "-c", IPYTHON_CELL, CELL], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout.strip().splitlines()[-1])
    shown = got["line"] + 2
    want = f"line {shown} of cell In [2] (in exchange): comm.Send(data, dest=1)"
    assert got["here"] == want and got["grader"] == want, got
    assert got["cell"].splitlines()[shown - 1].strip() == "comm.Send(data, dest=1)"


def test_junk_in_a_plain_map_is_dropped_not_trusted():
    smap = SourceMap.from_plain([["f", 1, 3, "x", {"2": "ok"}], "junk", [1, 2, 3],
                                 ["g", "1", 2, "y", {}], ["h", 1, 2, "z", {"x": "bad key"}]])
    assert [e[0] for e in smap.entries] == ["f"]
    assert SourceMap.from_plain({"not": "a list"}).entries == []


# A script run by a given cloudpickle: define functions in a file and in a "cell", pickle
# them, run the pickles in a separate process (which has neither the file nor the cell
# in its linecache), and map the frames it reports back with the SourceMap built here.
ROUND_TRIP = r'''
import json, linecache, subprocess, sys, textwrap
import cloudpickle
sys.path.insert(0, sys.argv[1])
from mpilab.sources import SourceMap
from mpilab.sources import describe_frame as _describe_frame
from mpilab.sources import parse_stack as _parse_stack

cell = textwrap.dedent("""\
    def helper(v):
        return 1 / v

    def divide(x):
        def nested(y):
            return helper(y - y)
        return nested(x)

    def spin():
        import faulthandler, sys
        faulthandler.dump_traceback(file=sys.stdout)
        return 0
    """)
name = "/tmp/ipykernel_7/999.py"
linecache.cache[name] = (len(cell), None, cell.splitlines(True), name)
ns = {"__name__": "__main__"}
exec(compile(cell, name, "exec"), ns)
smap = SourceMap.of(ns["divide"], ns["spin"])
child = r"""
import pickle, sys, traceback
f, g = pickle.loads(sys.stdin.buffer.read())
try:
    f(3)
except ZeroDivisionError as exc:
    tb = traceback.extract_tb(exc.__traceback__)[1:]
    print("TB", repr([(t.filename, t.lineno, t.name) for t in tb]))
g()
"""
out = subprocess.run([sys.executable, "-c", child], input=cloudpickle.dumps((ns["divide"], ns["spin"])),
                     capture_output=True, check=True).stdout.decode()
tb = eval(out.split("TB ", 1)[1].splitlines()[0])
stack = _parse_stack(out)
print(json.dumps({"version": cloudpickle.__version__, "filename": tb[-1][0],
                  "raised": _describe_frame(tb, smap), "dumped": _describe_frame(stack, smap)}))
'''


def round_trip(pythonpath: str | None) -> dict:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    res = subprocess.run([sys.executable, "-c", ROUND_TRIP, str(REPO)], env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("pickler", ["installed", "alt"])
def test_frames_of_pickled_code_name_their_source_line_with_either_pickler(pickler):
    if pickler == "alt" and not ALT:
        pytest.skip("no second cloudpickle in .venv/alt (scripts/setup.sh --test installs it)")
    got = round_trip(str(ALT[0]) if pickler == "alt" else None)
    assert got["raised"] == "line 2 of helper: return 1 / v", got
    assert got["dumped"] == "line 11 of spin: faulthandler.dump_traceback(file=sys.stdout)", got
    if got["version"] >= "3.1.3":
        assert got["filename"] == "<dynamic-code>"  # the reason this module exists
    else:
        assert got["filename"] == "/tmp/ipykernel_7/999.py"


def test_the_two_picklers_really_differ():
    if not ALT:
        pytest.skip("no second cloudpickle in .venv/alt (scripts/setup.sh --test installs it)")
    assert round_trip(None)["version"] != round_trip(str(ALT[0]))["version"]


def test_parse_stack_reads_faulthandler():
    text = ('Stack (most recent call first):\n  File "<dynamic-code>", line 7 in exchange\n'
            '  File "/x/mpilab/grading/running.py", line 400 in _engine_call\n')
    assert _parse_stack(text) == [("/x/mpilab/grading/running.py", 400, "_engine_call"),
                                  ("<dynamic-code>", 7, "exchange")]
