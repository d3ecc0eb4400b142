"""The students' JupyterLab on a class server: ``jupyter/student`` plus nbgrader's
Assignment List (fetch, submit, fetch feedback through the class's exchange).

This folder comes before ``jupyter/student`` on ``JUPYTER_CONFIG_PATH`` (the hub's
``classroom/jupyterhub_config.py``); ``labconfig/page_config.json`` turns the Assignment
List and nbgrader's menu back on in the interface. Formgrader, course list and
create-assignment stay off: they are the instructor's. The exchange and the course id
come from the class's ``nbgrader_config.py`` (``classroom/nbgrader_config.py``, in the
class's environment).
"""

c = get_config()  # noqa: F821 - provided by traitlets when it loads this file

c.ServerApp.jpserver_extensions.update({"nbgrader.server_extensions.assignment_list": True})
