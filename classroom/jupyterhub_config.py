"""JupyterHub for a class on one server (``make classroom``, ``scripts/classroom.sh``).

The hub runs as root and starts each user's JupyterLab as that user (JupyterHub's
LocalProcessSpawner; no systemd needed). Logins are the class's Unix accounts, checked
by PAM: members of ``mpilab-students`` get the students' JupyterLab (``jupyter/student``,
with nbgrader's Assignment List on for the class's exchange), members of
``mpilab-instructors`` the instructor's (``jupyter/instructor``: formgrader) on their
own copy of the course. Everything the hub keeps (its database, cookie secret, pid
files, log) is under ``$MPILAB_CLASSROOM_DIR/hub``; scripts/classroom.sh writes the
rest of the state folder and starts the hub with this file.

Each user's server runs in a cgroup of its own with the class's limits and a /dev/shm of
its own (``mpilab.autograder.limits``; ``$MPILAB_CLASSROOM_CPUS``, ``_MEM``, ``_PIDS``,
``_SHM``): everything it starts stays in that cgroup, and the whole group is killed when
the server stops, is culled or dies. While an instructor's grading measures, the
servers are frozen (``$MPILAB_CLASSROOM_GRADER``: ``freeze``, ``weight`` or ``off``;
``mpilab.autograder.reserve``): each group's ``cgroup.freeze`` is writable by the
instructors' group.

Ports: the proxy serves the class on ``$MPILAB_CLASSROOM_PORT`` (8000), its API on the
next port, the hub's own API on the one after (all three on this host).
"""

import asyncio
import grp
import inspect
import os
import pwd

from jupyterhub.spawner import LocalProcessSpawner

from mpilab.autograder import reserve
from mpilab.autograder.limits import Group, Limits, preexec

c = get_config()  # noqa: F821 - provided by traitlets when it loads this file

STATE = os.environ.get("MPILAB_CLASSROOM_DIR", "/srv/mpilab")
PORT = int(os.environ.get("MPILAB_CLASSROOM_PORT", "8000"))
HUB = os.path.join(STATE, "hub")
VENV = os.environ.get("MPILAB_CLASSROOM_VENV", os.path.join(STATE, "venv"))
JUPYTER = os.path.join(STATE, "jupyter")
GROUPS = os.environ.get("MPILAB_CLASSROOM_GROUPS", "mpilab")  # classroom.sh's prefix
STUDENTS, INSTRUCTORS = f"{GROUPS}-students", f"{GROUPS}-instructors"
KLASS = os.path.basename(STATE.rstrip("/"))  # the class's cgroups: <mount>/<KLASS>/<user>
LIMITS = Limits.from_env()  # a malformed MPILAB_CLASSROOM_* stops the hub here, named
GRADER = reserve.mode()  # freeze, weight or off: what the instructors' measurements do

# --- where it listens, what it keeps ---------------------------------------------------------
c.JupyterHub.ip = os.environ.get("MPILAB_CLASSROOM_IP", "")  # "" = every interface
c.JupyterHub.port = PORT
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{PORT + 1}"
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = PORT + 2
c.ConfigurableHTTPProxy.command = ["configurable-http-proxy"]  # Debian's package
c.ConfigurableHTTPProxy.pid_file = os.path.join(HUB, "proxy.pid")
c.JupyterHub.pid_file = os.path.join(HUB, "jupyterhub.pid")
c.JupyterHub.db_url = "sqlite:///" + os.path.join(HUB, "jupyterhub.sqlite")
c.JupyterHub.cookie_secret_file = os.path.join(HUB, "jupyterhub_cookie_secret")
# on shutdown the hub stops every user's server and the proxy it started
c.JupyterHub.cleanup_servers = True
c.JupyterHub.cleanup_proxy = True

# --- who logs in ------------------------------------------------------------------------------
c.JupyterHub.authenticator_class = "pam"
c.PAMAuthenticator.allowed_groups = {STUDENTS, INSTRUCTORS}  # `classroom.sh add` needs no restart
c.PAMAuthenticator.admin_groups = {INSTRUCTORS}


def _accounts() -> set[str]:
    """The class's accounts at start (listed in the hub's admin page from the start)."""
    try:
        with open(os.path.join(STATE, "accounts")) as fh:
            return {line.split()[0] for line in fh if line.strip()}
    except FileNotFoundError:
        return set()


c.Authenticator.allowed_users = _accounts()

# --- each user's JupyterLab -----------------------------------------------------------------
class ClassroomSpawner(LocalProcessSpawner):
    """LocalProcessSpawner with each server in the user's cgroup, on a /dev/shm of its own.

    The group is made (a stale one ended first) before the server starts; the server's
    process joins it and gets its mount namespace and /dev/shm in ``preexec_fn``, as root,
    before it becomes the user. After every stop (a stop from the hub or the user, the
    culler, the hub's shutdown, or a server that died: JupyterHub runs the post-stop step
    in all of these) the group is ended: its processes killed, its folders removed.
    """

    def _group(self) -> Group:
        return Group(KLASS, self.user.name)

    async def start(self):
        await asyncio.to_thread(self._group().create, LIMITS, graders_gid())
        return await super().start()

    def make_preexec_fn(self, name):
        return preexec(self._group(), LIMITS, then=super().make_preexec_fn(name))

    async def run_post_stop_hook(self):
        try:
            if not await asyncio.to_thread(self._group().end):
                self.log.error("%s: processes left in the cgroup", self._log_name)
        finally:
            done = super().run_post_stop_hook()
            if inspect.isawaitable(done):
                await done


c.JupyterHub.spawner_class = ClassroomSpawner
c.Spawner.cmd = [os.path.join(VENV, "bin", "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.env_keep = ["LANG", "LC_ALL"]  # nothing of the hub's own environment else
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120


def graders_gid() -> int | None:
    """The instructors' group: they may freeze the servers while a grading measures."""
    try:
        return grp.getgrnam(INSTRUCTORS).gr_gid
    except KeyError:
        return None


def is_instructor(name: str) -> bool:
    try:
        group = grp.getgrnam(INSTRUCTORS)
    except KeyError:
        return False
    return name in group.gr_mem or pwd.getpwnam(name).pw_gid == group.gr_gid


def pre_spawn_hook(spawner):
    """The students' or the instructor's JupyterLab, on the class's environment."""
    name = spawner.user.name
    home = pwd.getpwnam(name).pw_dir
    env = {
        "PATH": f"{VENV}/bin:/usr/local/bin:/usr/bin:/bin",
        "MPILAB_EXCHANGE": os.path.join(STATE, "exchange"),
    }
    if is_instructor(name):
        course = os.path.join(home, "mpilab")
        env["JUPYTER_CONFIG_PATH"] = os.path.join(course, "jupyter", "instructor")
        # their gradings find the class's cgroups and hold them back while they measure
        # (mpilab.autograder.reserve; the instructors' group may write cgroup.freeze)
        env["MPILAB_CLASSROOM_DIR"] = STATE
        env["MPILAB_CLASSROOM_GRADER"] = GRADER
        if "MPILAB_CLASSROOM_FREEZE_MAX" in os.environ:
            env["MPILAB_CLASSROOM_FREEZE_MAX"] = os.environ["MPILAB_CLASSROOM_FREEZE_MAX"]
        spawner.notebook_dir = course
    else:
        env["JUPYTER_CONFIG_PATH"] = ":".join([os.path.join(JUPYTER, "classroom-student"),
                                               os.path.join(JUPYTER, "student")])
        spawner.notebook_dir = home
    spawner.environment.update(env)


c.Spawner.pre_spawn_hook = pre_spawn_hook
