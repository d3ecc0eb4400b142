"""nbgrader configuration of the mpilab course. Run nbgrader from this directory.

The course directory is ``autograder/``; the labs' source notebooks stay in ``../labs``
(one folder per lab, named like the lab: ``labs/lab00-mpi-basics/lab00-mpi-basics.ipynb``),
so lectures and labs live side by side in the repository. Everything nbgrader writes
(``release/``, ``submitted/``, ``autograded/``, ``feedback/``, ``gradebook.db``) lands
here and is ignored by git. See README.md for the release/collect/autograde/feedback cycle.
"""

import os

from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import (
    AssignLatePenalties,
    CheckCellMetadata,
    GetGrades,
    IgnorePattern,
    LimitOutput,
)

from mpilab.autograder.nbgrader import HideHiddenTests, IsolatedExecute
from mpilab.autograder.ungradable import SaveGrades

HERE = os.path.dirname(os.path.abspath(__file__))

c = get_config()  # noqa: F821 - provided by traitlets when it loads this file

c.CourseDirectory.course_id = "mpilab"
c.CourseDirectory.root = HERE
# nbgrader joins root and source_directory, so a relative step out of the course works:
# sources are read from ../labs/<assignment>/ and nothing is copied there.
c.CourseDirectory.source_directory = os.path.join("..", "labs")
# gradings side by side (python -m mpilab.autograder.parallel) share the gradebook: one that
# finds another writing waits up to 120 s for it instead of failing "database is locked"
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(HERE, "gradebook.db") + "?timeout=120"
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
# nbgrader validate's kernel over Unix sockets in a private folder: over tcp, a port picked
# free can be taken before the kernel binds it ("Address already in use", seen in CI)
c.Execute.kernel_manager_class = "mpilab.notebooks.PrivateIPCKernelManager"
c.Validator.width = 100


# Autograde: the student's cells run in a sandboxed kernel (bubblewrap, as nobody, with
# memory and process limits), the test cells in a grader kernel that never runs student
# code (mpilab/autograder/nbgrader.py). The sandbox hides the course directory and the lab
# sources from student code; everything a submission starts is killed when it is graded.
c.IsolatedExecute.hide = [HERE, os.path.normpath(os.path.join(HERE, "..", "labs"))]
# The student's cells only define functions once the checks run elsewhere (the notebook's
# own engines start only if a cell uses them; "try it" helpers are skipped): 30 s is
# ample, and bounds what an endless loop in a cell costs. Test cells get test_timeout.
c.IsolatedExecute.timeout = 30
c.IsolatedExecute.test_timeout = 300
c.Autograde.autograde_preprocessors = [
    IsolatedExecute,
    IgnorePattern,
    ClearMetadataPreprocessor,
    LimitOutput,
    SaveGrades,  # SaveAutoGrades, but a part the grader failed gets no score, not 0
    AssignLatePenalties,
    CheckCellMetadata,
]

# Feedback shows each test's outcome and message, not the hidden tests (nbgrader issue 1363).
c.GenerateFeedback.preprocessors = [GetGrades, HideHiddenTests, CSSHTMLHeaderPreprocessor]
