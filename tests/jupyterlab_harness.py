"""The machinery of the JupyterLab tests (tests/test_jupyterlab.py: the instructor's
server; tests/test_student_lab.py: the student's): a real server per role, its HTTP
answers, and Debian's Chromium driven by Playwright for the browser checks.

Each role is a Jupyter config folder on ``JUPYTER_CONFIG_PATH`` (``jupyter/instructor``,
``jupyter/student``). A server runs for a whole module, in its own process group, with its
own (temporary) user config, settings, workspaces, runtime and IPython directories, so
neither a developer's state nor another test's clusters leak in. It reads
binder/overrides.json exactly as binder/postBuild and the set-up install it. The browser
fixtures (``browser``, ``page``: tests/conftest.py) skip when Chromium or Playwright is
missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
CHROMIUM = os.environ.get("MPILAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless=new",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
START_TIMEOUT = 90  # seconds for the server to answer; it usually takes 2-5
LAB_EXTENSIONS = ("ipyparallel-labextension", "@jupyter/nbgrader", "jupyterlab-jupytext")
NBGRADER_SERVER_EXTENSIONS = (
    "nbgrader.server_extensions.formgrader",
    "nbgrader.server_extensions.assignment_list",
    "nbgrader.server_extensions.course_list",
    "nbgrader.server_extensions.validate_assignment",
)


# --- the server -------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 10) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def _stop_tree(proc: subprocess.Popen, extra: list[psutil.Process]) -> None:
    """SIGTERM the process group, then SIGKILL what is left of it and of ``extra``."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)
    # Kernels run in sessions of their own (jupyter_client starts them so), outside the
    # group: end any the server did not shut down itself.
    _gone, alive = psutil.wait_procs([p for p in extra if p.is_running()], timeout=5)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)


class Lab:
    def __init__(self, url: str, proc: subprocess.Popen, log: Path, root: Path,
                 workspaces: Path):
        self.url, self.proc, self.log = url, proc, log
        self.root, self.workspaces = root, workspaces

    def log_tail(self, n: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def get(self, path: str, timeout: float = 60) -> tuple[int, str]:
        """GET a server API. 60 s: a first formgrader call builds the gradebook and scans
        every lab, and with the suite keeping both cores busy one took over 10 s in CI."""
        return _get(self.url + path, timeout)

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []


# A workspace saved by an earlier session: an editor on a text file (no kernel) in results/
# (git-ignored). The instructor gets it back; a student starts afresh.
SAVED_FILE = "results/saved-layout.txt"
SAVED_WORKSPACE = {
    "data": {
        "layout-restorer:data": {
            "main": {"dock": {"type": "tab-area", "currentIndex": 0,
                              "widgets": [f"editor:{SAVED_FILE}"]},
                     "current": f"editor:{SAVED_FILE}"},
        },
        f"editor:{SAVED_FILE}": {"data": {"path": SAVED_FILE, "factory": "Editor"}},
    },
    "metadata": {"id": "default"},
}


@contextlib.contextmanager
def running_lab(tmp: Path, role: str, root: Path = ROOT):
    """``jupyter lab`` on `root` with ``jupyter/<role>`` on JUPYTER_CONFIG_PATH."""
    from jupyterlab_server.workspaces_handler import WorkspacesManager

    # JupyterLab reads overrides.json from its app settings dir: give it the one binder/
    # installs, next to whatever the environment already has there.
    app_settings = tmp / "app-settings"
    installed = Path(sys.prefix, "share", "jupyter", "lab", "settings")
    if installed.is_dir():
        shutil.copytree(installed, app_settings)
    app_settings.mkdir(exist_ok=True)
    shutil.copy(ROOT / "binder" / "overrides.json", app_settings / "overrides.json")
    ipython_dir = tmp / "ipython"
    (ipython_dir / "profile_default").mkdir(parents=True)
    workspaces = tmp / "workspaces"  # where JupyterLab keeps a user's layouts
    saved = root / SAVED_FILE
    saved.parent.mkdir(exist_ok=True)
    saved.write_text("a file an earlier session had open\n")
    WorkspacesManager(str(workspaces)).save("default", json.dumps(SAVED_WORKSPACE))

    env = dict(os.environ)
    env.pop("JUPYTER_CONFIG_PATH", None)
    env.update(
        JUPYTER_CONFIG_DIR=str(tmp / "user-config"),  # empty: no developer's ~/.jupyter
        JUPYTER_CONFIG_PATH=str(root / "jupyter" / role),
        JUPYTERLAB_SETTINGS_DIR=str(tmp / "user-settings"),  # fresh: nothing changed yet
        JUPYTERLAB_WORKSPACES_DIR=str(workspaces),
        JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
        IPYTHONDIR=str(ipython_dir),
        # as `make` runs it: nbgrader's gradebook runs the environment's `alembic`
        PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    )
    port = _free_port()
    cmd = [
        sys.executable, "-m", "jupyter", "lab",
        "--no-browser", "--ip", "127.0.0.1", f"--port={port}", "--ServerApp.port_retries=0",
        "--ServerApp.token=", "--ServerApp.password=",
        f"--ServerApp.root_dir={root}", f"--LabApp.app_settings_dir={app_settings}",
    ]  # fmt: skip
    if os.getuid() == 0:
        cmd.append("--allow-root")
    log = tmp / "jupyterlab.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    server = Lab(f"http://127.0.0.1:{port}", proc, log, root, workspaces)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if proc.poll() is not None:
                pytest.fail(f"jupyter lab exited with {proc.returncode}:\n{server.log_tail()}")
            try:
                if server.get("/api/status")[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(
                    f"jupyter lab did not answer in {START_TIMEOUT} s:\n{server.log_tail()}"
                )
            time.sleep(0.25)
        yield server
    finally:
        _stop_tree(proc, server.descendants())
        saved.unlink(missing_ok=True)
        checkpoint = saved.parent / ".ipynb_checkpoints" / f"{saved.stem}-checkpoint{saved.suffix}"
        checkpoint.unlink(missing_ok=True)


def copy_course(dest: Path) -> Path:
    """The instructor's part of the repository, without anything nbgrader wrote there."""
    skip = shutil.ignore_patterns("gradebook.db", "release", "submitted", "autograded",
                                  "feedback", ".ipynb_checkpoints", "__pycache__")
    for part in ("autograder", "labs", "jupyter/instructor"):
        shutil.copytree(ROOT / part, dest / part, ignore=skip)
    return dest


def jupyter_list(*args: str) -> str:
    """Output of `jupyter <args>`, colour codes removed."""
    out = subprocess.run(
        [sys.executable, "-m", "jupyter", *args], capture_output=True, text=True, timeout=120
    )
    return re.sub(r"\x1b\[[0-9;]*m", "", out.stdout + out.stderr)


def page_config(lab: Lab) -> dict:
    """The page config /lab hands the browser (extensions, disabled plugins, paths)."""
    status, html = lab.get("/lab")
    assert status == 200, lab.log_tail()
    match = re.search(
        r'<script id="jupyter-config-data" type="application/json">(.*?)</script>', html, re.S
    )
    assert match, "no jupyter-config-data in /lab"
    return json.loads(match.group(1))


def setting_default(lab: Lab, plugin: str, key: str):
    """The default a setting has on this server (schema default + overrides.json)."""
    status, body = lab.get(f"/lab/api/settings/{plugin}")
    assert status == 200, body
    return json.loads(body)["schema"]["properties"][key]["default"]


# --- in a browser -----------------------------------------------------------------------------
def chromium():
    """Debian's Chromium driven by Playwright (skips the test when either is missing)."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def new_page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        yield context.new_page()
    finally:
        context.close()


@contextlib.contextmanager
def screenshot_on_failure(page, name: str):
    """Keep what the browser showed when a check fails, next to the test results."""
    try:
        yield
    except BaseException:
        RESULTS.mkdir(exist_ok=True)
        page.screenshot(path=str(RESULTS / f"{name}-failed.png"))
        raise


def open_lab(page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
    page.wait_for_selector("#jp-main-dock-panel", state="visible", timeout=30_000)


def main_tab(page, label: str):
    """A tab of the main area, by its exact label."""
    return page.locator(
        "#jp-main-dock-panel .lm-TabBar-tab",
        has=page.locator(".lm-TabBar-tabLabel", has_text=re.compile(f"^{re.escape(label)}$")),
    )


def nbgrader_menu_item(page, label: str):
    return page.locator("#jp-mainmenu-nbgrader .lm-Menu-itemLabel",
                        has_text=re.compile(f"^{label}$"))
