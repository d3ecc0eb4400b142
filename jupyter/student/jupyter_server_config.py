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
- language_info: opening a lecture or a lab does not mark it modified, and saving it
  writes back the course's file (:class:`CourseContentsManager`).
- the file browser: at the top of a course checkout a student sees what the course is
  for them (README, lectures, labs, reference data, the kernels' and the package's
  sources, docs), not its machinery (the autograder with its gradebook, the build, the
  tests, the set-up files): :data:`MACHINERY`. Only the listing of the top folder leaves
  them out; a path typed by hand still opens (this is a student's view of their own
  checkout, not a lock: the students' edition leaves the instructor's files out).
"""

import atexit
import copy
import shutil
import tempfile

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
from jupytext.async_contentsmanager import build_async_jupytext_contents_manager_class

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


# Once its kernel has answered, JupyterLab writes the kernel's language_info into the
# notebook (name, version, mimetype, ...) and, as it differs from the file's, marks the
# notebook modified. The course's files cannot hold it: the labs keep only its name
# (nbstripout), the lectures none (jupytext leaves it out), and its version is the
# student's Python. So the server hands a notebook out with the language_info of the
# kernel that will run it, here ipykernel in this Python (jupyter_client runs the
# `python3` kernel with this server's own interpreter), and saves a notebook with the
# language's name alone, as the course's sources hold it. The kernelspec the course's
# files name is the installed one's, so JupyterLab leaves that as it is.
def _python_language_info() -> dict:
    try:
        from ipykernel.ipkernel import IPythonKernel
    except ImportError:  # no ipykernel here: no python3 kernel to match
        return {}
    return copy.deepcopy(IPythonKernel.language_info)


#: What the top folder of a course checkout holds that is not for a student to browse.
MACHINERY = frozenset({
    "ARCHITECTURE.md", "Makefile", "autograder", "binder", "build", "classroom",
    "constraints.txt", "environment.yml", "jupyter", "jupytext.toml", "pyproject.toml",
    "scripts", "setup.py", "tests", "mpilab.egg-info",
})


def _course_root(root_dir) -> bool:
    from pathlib import Path

    return all((Path(root_dir) / part).is_dir() for part in ("lectures", "labs", "mpilab"))


class CourseContentsManager(build_async_jupytext_contents_manager_class(AsyncLargeFileManager)):
    """jupytext's contents manager (as its server extension would make it), with the
    kernel's language_info filled in on reading a notebook and left out on saving it, and
    the course's machinery left out of its top folder's listing."""

    async def get(self, path, *args, **kwargs):
        model = await super().get(path, *args, **kwargs)
        if (model.get("type") == "directory" and path.strip("/") == ""
                and isinstance(model.get("content"), list) and _course_root(self.root_dir)):
            model["content"] = [m for m in model["content"] if m["name"] not in MACHINERY]
        if model.get("type") == "notebook" and model.get("content"):
            meta = model["content"]["metadata"]
            info = _python_language_info()
            have = meta.get("language_info") or {}
            if (info and meta.get("kernelspec", {}).get("name") == "python3"
                    and all(info.get(key) == value for key, value in have.items())):
                meta["language_info"] = info
        return model

    async def save(self, model, path=""):
        if model.get("type") == "notebook" and model.get("content"):
            meta = model["content"].get("metadata", {})
            info = meta.get("language_info")
            if isinstance(info, dict) and "name" in info:
                meta["language_info"] = {"name": info["name"]}
        return await super().save(model, path)


c.ServerApp.contents_manager_class = CourseContentsManager
