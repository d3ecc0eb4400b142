"""JupyterLab for a student: the course, without what belongs to the instructor.

This folder goes on ``JUPYTER_CONFIG_PATH`` (``make lab``, ``binder/start``), so it takes
precedence over the environment's own configuration; ``labconfig/page_config.json`` next
to it hides the matching parts of JupyterLab's interface.

- nbgrader: formgrader, course list and create-assignment are the instructor's; the
  assignment list needs nbgrader's exchange, which a laptop or Binder does not have (it
  only says "Error fetching courses!"). Labs are handed out as folders, and each lab
  checks itself in its own cells. The Validate button is hidden too: it appears on every
  notebook, and on a lecture (a MyST .md file) it can only fail.
- ipyparallel: the course starts its own cluster from each notebook (``mpilab.cluster``).
  The IPython Parallel sidebar would offer START on an unrelated ``default`` profile, and
  its server side watches the course's clusters and copies the last 100 lines of the
  controller's log to this terminal whenever a notebook restarts its cluster.
- workspaces: a fresh one at every start, so the layout saved by an earlier session does
  not reopen other lectures (and start a kernel for each). It lasts as long as this
  server: reloading the page keeps the open tabs.
"""

import atexit
import shutil
import tempfile

c = get_config()  # noqa: F821 - provided by traitlets when it loads this file

c.ServerApp.jpserver_extensions.update({
    "nbgrader.server_extensions.formgrader": False,
    "nbgrader.server_extensions.course_list": False,
    "nbgrader.server_extensions.assignment_list": False,
    "nbgrader.server_extensions.validate_assignment": False,
    "ipyparallel": False,
})

_workspaces = tempfile.mkdtemp(prefix="mpilab-workspaces-")
atexit.register(shutil.rmtree, _workspaces, ignore_errors=True)
c.LabApp.workspaces_dir = _workspaces
