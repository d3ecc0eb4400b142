"""nbgrader configuration of the mpilab course. Run nbgrader from this directory.

The course directory is ``autograder/``; the labs' source notebooks stay in ``../labs``
(one folder per lab, named like the lab: ``labs/lab00-mpi-basics/lab00-mpi-basics.ipynb``),
so lectures and labs live side by side in the repository. Everything nbgrader writes
(``release/``, ``submitted/``, ``autograded/``, ``feedback/``, ``gradebook.db``) lands
here and is ignored by git. See README.md for the release/collect/autograde/feedback cycle.
"""

import os

from nbconvert.preprocessors import ClearMetadataPreprocessor
from nbgrader.preprocessors import (
    AssignLatePenalties,
    CheckCellMetadata,
    Execute,
    IgnorePattern,
    LimitOutput,
    SaveAutoGrades,
)

HERE = os.path.dirname(os.path.abspath(__file__))

c = get_config()  # noqa: F821 - provided by traitlets when it loads this file

c.CourseDirectory.course_id = "mpilab"
c.CourseDirectory.root = HERE
# nbgrader joins root and source_directory, so a relative step out of the course works:
# sources are read from ../labs/<assignment>/ and nothing is copied there.
c.CourseDirectory.source_directory = os.path.join("..", "labs")
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(HERE, "gradebook.db")
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback",
                            ".*"]

c.IncludeHeaderFooter.header = os.path.join(HERE, "header.ipynb")

# nbgrader's defaults, written out because the labs rely on them: solution regions become
# this stub, hidden-test regions vanish from the release.
c.ClearSolutions.begin_solution_delimeter = "BEGIN SOLUTION"
c.ClearSolutions.end_solution_delimeter = "END SOLUTION"
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearHiddenTests.begin_test_delimeter = "BEGIN HIDDEN TESTS"
c.ClearHiddenTests.end_test_delimeter = "END HIDDEN TESTS"

# Execution. Every MPI check in the labs has its own timeout (5-10 s, then the engines
# restart in ~5 s), so a cell only reaches this limit when the student's code loops in
# the notebook itself. It must also cover a cold cluster start (4-11 s) and compiling the
# Cython exercise (6-15 s on a busy machine). nbgrader interrupts the cell, records a
# CellTimeoutError in it and goes on with the next cell.
c.Execute.timeout = 60
c.Execute.startup_timeout = 60
c.Execute.interrupt_on_timeout = True
c.Execute.execute_retries = 0  # a retry would only repeat a deadlock's timeouts
c.Validator.width = 100


class MPIExecute(Execute):
    """Execute a notebook with its own MPI cluster, and remove whatever it leaves running.

    The kernel gets ``MPILAB_NOTEBOOK`` set to the notebook's path, so
    ``mpilab.cluster.start`` gives each student's notebook its own cluster id, never
    another submission's engines. After the notebook ran (or its kernel died), every
    process of a cluster started from that notebook is killed: the lab's last cell stops
    the cluster, but a submission can fail before it.
    """

    def preprocess(self, nb, resources):
        meta = (resources or {}).get("metadata", {}) or {}
        path = os.path.abspath(os.path.join(meta.get("path") or ".",
                                            f"{meta.get('name') or 'notebook'}.ipynb"))
        saved = {k: os.environ.get(k) for k in ("MPILAB_NOTEBOOK", "JPY_SESSION_NAME")}
        os.environ["MPILAB_NOTEBOOK"] = path
        os.environ.pop("JPY_SESSION_NAME", None)  # it would take precedence in the kernel
        try:
            return super().preprocess(nb, resources)
        finally:
            try:
                _remove_clusters_of(path, self.log)
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v


def _remove_clusters_of(notebook: str, log) -> None:
    """Kill the processes of every mpilab cluster started by the kernel of `notebook`."""
    try:
        from mpilab import cluster
    except ImportError:  # pragma: no cover - nbgrader run outside the course's venv
        log.warning("mpilab is not importable here: MPI clusters are not cleaned up")
        return
    ids = set()
    for p in cluster.cluster_processes():
        try:
            env = p.environ()
        except Exception:  # noqa: BLE001 - gone, or not ours
            continue
        if env.get("MPILAB_NOTEBOOK") == notebook:
            ids.add(env["IPP_CLUSTER_ID"])
    for cid in sorted(ids):
        log.warning("Stopping MPI cluster %s left running by %s", cid, notebook)
        # also removes the cluster's connection files, so a later run starts cold at once
        cluster.MPICluster(1, "shm", cid)._kill_everything()


c.Autograde.autograde_preprocessors = [
    MPIExecute,
    IgnorePattern,
    ClearMetadataPreprocessor,
    LimitOutput,
    SaveAutoGrades,
    AssignLatePenalties,
    CheckCellMetadata,
]
