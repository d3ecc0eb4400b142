"""JupyterLab for the instructor (``make instructor``): everything nbgrader offers.

nbgrader's formgrader, course list, create-assignment and assignment list stay enabled as
installed; ``nbgrader_config.py`` next to this file gives them the course directory. The
IPython Parallel sidebar stays too, but its server side no longer copies a stopped
controller's log to the terminal each time a notebook restarts its cluster.
"""

c = get_config()  # noqa: F821 - provided by traitlets when it loads this file

c.BaseLauncher.output_limit = 1  # 0 would mean "all of it"
