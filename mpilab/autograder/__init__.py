"""The autograder: nbgrader's autograde with the student's code outside the grader.

The machinery every lab shares, which a new lab does not touch (its checks go in
:mod:`mpilab.grading`; see ARCHITECTURE.md and autograder/README.md):

* :mod:`~mpilab.autograder.nbgrader`: the autograde preprocessors (``IsolatedExecute``,
  ``HideHiddenTests``) that ``autograder/nbgrader_config.py`` names;
* :mod:`~mpilab.autograder.student_kernel`: the student's kernel those preprocessors
  start in the sandbox, and waiting for its replies;
* :mod:`~mpilab.autograder.sandbox`: bubblewrap and cgroups, a sandboxed process;
* :mod:`~mpilab.autograder.scratch`: a grading's scratch folder, and the clean-up of
  what gradings that ended left (folders, empty cgroups);
* :mod:`~mpilab.autograder.pool` and :mod:`~mpilab.autograder.worker`: the sandboxed MPI
  ranks that run a student's functions for the grader;
* :mod:`~mpilab.autograder.wire`: the data format between a student's process and the
  grader;
* :mod:`~mpilab.autograder.student`: what the student's kernel runs to hand its objects
  over; :mod:`~mpilab.autograder.isolated`: the grader kernel's view of them;
* :mod:`~mpilab.autograder.failures`: what a failed check raises (``CheckFailed``, which
  :mod:`mpilab.grading` re-exports), and which functions already timed out, known by
  their fingerprint;
* :mod:`~mpilab.autograder.quiet`: the grading lock (measurements hold the cores);
* :mod:`~mpilab.autograder.parallel`: gradings side by side
  (``python -m mpilab.autograder.parallel``);
* :mod:`~mpilab.autograder.course` and :mod:`~mpilab.autograder.bench`: a throw-away
  course with submissions, and what autograding costs (``python -m mpilab.bench
  autograde``).

This package imports nothing: the sandboxed ranks and the student's kernel import modules
of it, and pay only for what those need. No module of it imports :mod:`mpilab.grading`.
"""
