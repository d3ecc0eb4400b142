"""The grader's own kernel (the one that runs the hidden checks) talks over Unix sockets in
a folder of the grading's scratch that only the grader may enter, never over tcp ports.

Over tcp, jupyter_client picks free ports, closes them and lets the kernel bind them a
moment later; gradings side by side (mpilab.autograder.parallel) can take each other's
ports meanwhile, and the kernel dies before it replies ("Address already in use": a CI
run lost a hostile submission's grading so, with three gradings at once). Checked from
inside the kernel, on a made-up lab graded for three students side by side.
"""

from __future__ import annotations

import made_up_lab
import nbformat
import pytest

from mpilab.autograder.course import nbgrader, scores, solutions, submit
from mpilab.autograder.parallel import autograde

LAB = "lab98-grader-kernel"
_cell = made_up_lab.cell

PROBE = """
import json, os, stat
from ipykernel.kernelapp import IPKernelApp
app = IPKernelApp.instance()
assert app.transport == "ipc", app.transport
folder = os.path.dirname(app.abs_connection_file)
assert os.path.basename(folder) == "grader-ipc", folder
mode = os.stat(folder)  # jupyter_client adds the sticky bit
assert mode.st_mode & 0o777 == 0o700 and mode.st_uid == os.geteuid(), oct(mode.st_mode)
assert json.load(open(app.abs_connection_file))["transport"] == "ipc"
"""


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    nb = made_up_lab.notebook([
        _cell("markdown", "# A made-up lab", "intro"),
        _cell("code", "def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION",
              "answer", solution=True),
        _cell("code", "assert f() == 1", "test_answer", points=1),
        _cell("code", PROBE, "test_transport", points=1),
    ])
    root, repo = made_up_lab.course(tmp_path_factory, LAB, nb)
    for student in ("ada", "bob", "cy"):
        submit(root, LAB, student, solutions(LAB, repo))
    return root


@pytest.mark.slow
def test_the_graders_kernel_uses_private_unix_sockets_side_by_side(course):
    done = autograde(course / "autograder", LAB, ["ada", "bob", "cy"], jobs=3,
                     args=("--force",), timeout=240)
    assert all(g.ok for g in done), "\n".join(g.log[-3000:] for g in done if not g.ok)
    full = {"test_answer": 1.0, "test_transport": 1.0}
    assert scores(course, LAB, ["ada", "bob", "cy"]) == {s: full for s in ("ada", "bob", "cy")}


VALIDATE_PROBE = """
import json, os
from ipykernel.kernelapp import IPKernelApp
app = IPKernelApp.instance()
folder = os.path.dirname(app.abs_connection_file)
open(OUT, "w").write(json.dumps(
    {"transport": app.transport, "folder": folder,
     "mode": os.stat(folder).st_mode & 0o777, "uid": os.stat(folder).st_uid}))
"""


def test_nbgrader_validate_runs_its_kernel_over_private_unix_sockets(course, tmp_path):
    """``nbgrader validate`` makes its kernel's manager itself: the course's configuration
    names :class:`mpilab.notebooks.PrivateIPCKernelManager`, so its kernel cannot lose a
    port either (a CI run lost lab 01's validation so: "Address already in use"), and
    the folder is gone once validate ends."""
    import json
    import os

    out = tmp_path / "probe.json"
    nb = made_up_lab.notebook([
        _cell("code", "def f():\n    return 1", "answer", solution=True),
        _cell("code", f"OUT = {str(out)!r}" + VALIDATE_PROBE + "assert f() == 1",
              "test_answer", points=1)])
    path = tmp_path / "probe.ipynb"
    path.write_text(nbformat.writes(nb))
    res = nbgrader(course, "validate", str(path))
    assert "Success! Your notebook passes all the tests." in res.stdout, res.stdout + res.stderr
    got = json.loads(out.read_text())
    assert got["transport"] == "ipc", got
    assert os.path.basename(got["folder"]).startswith("mpilab-kernel-"), got
    assert got["mode"] == 0o700 and got["uid"] == os.geteuid(), got
    assert not os.path.exists(got["folder"]), got
