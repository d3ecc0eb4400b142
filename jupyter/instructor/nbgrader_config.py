"""nbgrader in the instructor's JupyterLab (``make instructor``): the course's own config.

This folder goes on ``JUPYTER_CONFIG_PATH``; nbgrader's server extensions (formgrader,
course list, assignment list) read ``nbgrader_config.py`` from there, so they see the course
directory ``autograder/`` with the grading set-up that ``make lab-autograde`` uses.
nbgrader's exchange (release, fetch, submit, collect through JupyterLab) is nbgrader's
default unless ``make instructor EXCHANGE=/path`` names one (the formgrader says when it
cannot use it).
"""

import os

c = get_config()  # noqa: F821 - provided by traitlets when it loads this file

_course = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "autograder")
load_subconfig(os.path.join(os.path.normpath(_course), "nbgrader_config.py"))  # noqa: F821

if os.environ.get("MPILAB_EXCHANGE"):
    c.Exchange.root = os.path.abspath(os.environ["MPILAB_EXCHANGE"])
