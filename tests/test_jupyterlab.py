"""A real JupyterLab on the course: the extensions the course relies on are there and work.

One ``jupyter lab`` serves the repository for the whole module, in its own process group,
with its own (temporary) user settings, workspaces, runtime and IPython directories, so
neither a developer's state nor another test's clusters leak in. It reads
binder/overrides.json exactly as binder/postBuild and the set-up install it. The browser
tests drive Debian's Chromium through Playwright; they skip when it is not installed.
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
    def __init__(self, url: str, proc: subprocess.Popen, log: Path):
        self.url, self.proc, self.log = url, proc, log

    def log_tail(self, n: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def get(self, path: str) -> tuple[int, str]:
        return _get(self.url + path)

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("jupyterlab")
    # JupyterLab reads overrides.json from its app settings dir: give it the one binder/
    # installs, next to whatever the environment already has there.
    app_settings = tmp / "app-settings"
    installed = Path(sys.prefix, "share", "jupyter", "lab", "settings")
    if installed.is_dir():
        shutil.copytree(installed, app_settings)
    app_settings.mkdir(exist_ok=True)
    shutil.copy(ROOT / "binder" / "overrides.json", app_settings / "overrides.json")
    # Fresh user settings: no news / update pop-up over what the screenshot shows.
    user_settings = tmp / "user-settings"
    notification = user_settings / "@jupyterlab" / "apputils-extension"
    notification.mkdir(parents=True)
    (notification / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    ipython_dir = tmp / "ipython"
    (ipython_dir / "profile_default").mkdir(parents=True)

    env = dict(os.environ)
    env.update(
        JUPYTERLAB_SETTINGS_DIR=str(user_settings),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"),
        JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
        IPYTHONDIR=str(ipython_dir),
    )
    port = _free_port()
    cmd = [
        sys.executable, "-m", "jupyter", "lab",
        "--no-browser", "--ip", "127.0.0.1", f"--port={port}", "--ServerApp.port_retries=0",
        "--ServerApp.token=", "--ServerApp.password=",
        f"--ServerApp.root_dir={ROOT}", f"--LabApp.app_settings_dir={app_settings}",
    ]  # fmt: skip
    if os.getuid() == 0:
        cmd.append("--allow-root")
    log = tmp / "jupyterlab.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    server = Lab(f"http://127.0.0.1:{port}", proc, log)
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


def _jupyter_list(*args: str) -> str:
    """Output of `jupyter <args>`, colour codes removed."""
    out = subprocess.run(
        [sys.executable, "-m", "jupyter", *args], capture_output=True, text=True, timeout=120
    )
    return re.sub(r"\x1b\[[0-9;]*m", "", out.stdout + out.stderr)


def _page_config(html: str) -> dict:
    match = re.search(
        r'<script id="jupyter-config-data" type="application/json">(.*?)</script>', html, re.S
    )
    assert match, "no jupyter-config-data in /lab"
    return json.loads(match.group(1))


# --- HTTP checks --------------------------------------------------------------------------
def test_lab_serves_the_course(lab):
    """/lab answers 200 with JupyterLab's page, serving this repository."""
    status, html = lab.get("/lab")
    assert status == 200, lab.log_tail()
    config = _page_config(html)
    assert config["appName"] == "JupyterLab"
    assert Path(config["serverRoot"]).resolve() == ROOT


def test_course_lab_extensions_are_enabled(lab):
    """The running server loads the ipyparallel, nbgrader and jupytext lab extensions."""
    config = _page_config(lab.get("/lab")[1])
    loaded = {ext["name"] for ext in config["federated_extensions"]}
    assert set(LAB_EXTENSIONS) <= loaded, f"loaded lab extensions: {sorted(loaded)}"
    disabled = [d for d in config["disabledExtensions"] if d.split(":")[0] in LAB_EXTENSIONS]
    assert not disabled, f"disabled: {disabled}"


def test_labextension_list_reports_them_enabled():
    """`jupyter labextension list` shows each course extension enabled and OK."""
    text = _jupyter_list("labextension", "list")
    for name in LAB_EXTENSIONS:
        assert re.search(rf"^\s*{re.escape(name)} v\S+ enabled\s+OK", text, re.M), text


def test_nbgrader_server_extensions_are_enabled_and_answer(lab):
    """nbgrader's server extensions are enabled and their handlers answer on the server."""
    text = _jupyter_list("server", "extension", "list")
    log = lab.log.read_text(errors="replace")
    for name in NBGRADER_SERVER_EXTENSIONS:
        assert re.search(rf"^\s*{re.escape(name)} enabled$", text, re.M), text
        assert not re.search(rf"^\s*{re.escape(name)} disabled$", text, re.M), text
        assert re.search(rf"^\s*{re.escape(name)}\s+\S*\s*OK$", text, re.M), text
        assert f"{name} | extension was successfully loaded" in log, lab.log_tail()
    import nbgrader

    status, body = lab.get(f"/nbgrader_version?version={nbgrader.__version__}")
    assert status == 200 and json.loads(body)["success"] is True, body  # assignment_list
    status, body = lab.get("/formgrader/api/status")
    assert status == 200 and json.loads(body) == {"status": True}, body  # formgrader


def test_ipyparallel_server_extension_answers(lab):
    """The IPython Parallel sidebar's server side lists the (stopped) default cluster."""
    status, body = lab.get("/ipyparallel/clusters")
    assert status == 200, body
    clusters = json.loads(body)
    assert [c["id"] for c in clusters] == ["default:"], clusters


def test_markdown_defaults_to_the_jupytext_notebook(lab):
    """The server hands JupyterLab binder/overrides.json: .md opens as a notebook."""
    status, body = lab.get("/lab/api/settings/@jupyterlab/docmanager-extension:plugin")
    assert status == 200, body
    viewers = json.loads(body)["schema"]["properties"]["defaultViewers"]["default"]
    assert viewers.get("markdown") == "Jupytext Notebook", viewers


# --- in a browser -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        yield context.new_page()
    finally:
        context.close()


@contextlib.contextmanager
def _screenshot_on_failure(page, name: str):
    """Keep what the browser showed when a check fails, next to the test results."""
    try:
        yield
    except BaseException:
        RESULTS.mkdir(exist_ok=True)
        page.screenshot(path=str(RESULTS / f"{name}-failed.png"))
        raise


def _open_lab(page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
    page.wait_for_selector("#jp-main-dock-panel", state="visible", timeout=30_000)


@pytest.mark.browser
def test_browser_shows_clusters_sidebar_and_nbgrader_menu(lab, page):
    """In Chromium: the IPython Parallel 'Clusters' panel and the 'Nbgrader' menu work."""
    from playwright.sync_api import expect

    with _screenshot_on_failure(page, "jupyterlab"):
        _open_lab(page, lab.url + "/lab?reset")

        tab = page.locator('.jp-SideBar.jp-mod-left .lm-TabBar-tab[data-id="ipp-cluster-launcher"]')
        expect(tab).to_have_attribute("title", re.compile("IPython Parallel"))
        tab.click()
        panel = page.locator("#ipp-cluster-launcher")
        expect(panel).to_be_visible()
        expect(panel.locator(".ipp-ClusterManager-label")).to_have_text("CLUSTERS")
        default = panel.locator('.ipp-ClusterListingItem[data-cluster-id="default:"]')
        expect(default).to_contain_text("State: Stopped")
        expect(default.locator(".ipp-ClusterListingItem-start")).to_be_visible()

        create = '.jp-SideBar.jp-mod-right .lm-TabBar-tab[title="Nbgrader Create Assignment"]'
        expect(page.locator(create)).to_be_visible()  # nbgrader's right-hand sidebar
        page.locator("#jp-menu-panel .lm-MenuBar-itemLabel", has_text="Nbgrader").click()
        menu = page.locator("#jp-mainmenu-nbgrader")
        expect(menu).to_be_visible()
        for item in ("Assignment List", "Course List", "Formgrader"):
            expect(
                menu.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{item}$"))
            ).to_be_visible()

    RESULTS.mkdir(exist_ok=True)
    page.screenshot(path=str(RESULTS / "jupyterlab.png"))


LECTURE_PROBE = """\
---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3 (ipykernel)
  language: python
  name: python3
---

# Viewer probe

```{code-cell} ipython3
answer = 6 * 7
```
"""


@pytest.mark.browser
def test_browser_opens_a_myst_lecture_as_a_notebook(lab, page):
    """Double-clicking a MyST .md (as lectures are) opens a notebook, not a text editor."""
    from playwright.sync_api import expect

    RESULTS.mkdir(exist_ok=True)
    probe = RESULTS / "viewer-probe.md"  # results/ is git-ignored
    probe.write_text(LECTURE_PROBE)
    try:
        with _screenshot_on_failure(page, "viewer-probe"):
            _open_lab(page, lab.url + "/lab/tree/results?reset")
            item = page.locator(
                "#filebrowser .jp-DirListing-item",
                has=page.locator(".jp-DirListing-itemText", has_text="viewer-probe.md"),
            )
            expect(item).to_be_visible(timeout=30_000)
            item.dblclick()
            notebook = page.locator(".jp-NotebookPanel")
            expect(notebook).to_be_visible(timeout=30_000)
            expect(notebook.locator(".jp-MarkdownCell h1")).to_contain_text("Viewer probe")
            expect(notebook.locator(".jp-CodeCell .jp-InputArea-editor")).to_contain_text(
                "answer = 6 * 7"
            )
            expect(page.locator(".jp-FileEditor")).to_have_count(0)
    finally:
        # The notebook started a kernel: shut its session down before the page goes.
        status, body = lab.get("/api/sessions")
        for session in json.loads(body) if status == 200 else []:
            req = urllib.request.Request(f"{lab.url}/api/sessions/{session['id']}", method="DELETE")
            try:
                urllib.request.urlopen(req, timeout=10).close()
            except OSError:
                pass
        probe.unlink(missing_ok=True)
        checkpoints = RESULTS / ".ipynb_checkpoints"  # JupyterLab made one on opening
        (checkpoints / "viewer-probe-checkpoint.md").unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            checkpoints.rmdir()
