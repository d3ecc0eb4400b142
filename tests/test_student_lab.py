"""A student's JupyterLab (`make lab`, Binder): the course, and nothing that errors or invites
a wrong click.

The server is started as `make lab` and binder/start start it: ``jupyter/student`` on
``JUPYTER_CONFIG_PATH`` (tests/jupyterlab_harness.py has the machinery,
tests/test_jupyterlab.py the instructor's side). A student sees no formgrader, course list, create-assignment, assignment list or
Validate button from nbgrader, no IPython Parallel sidebar, no question about Jupyter news,
not the layout of an earlier session, and the terminal stays quiet when a notebook
restarts its cluster.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from conftest import needs_mpi
from jupyterlab_harness import (
    RESULTS,
    ROOT,
    SAVED_FILE,
    main_tab,
    open_lab,
    page_config,
    running_lab,
    screenshot_on_failure,
)

STUDENT = ROOT / "jupyter" / "student"
HIDDEN_SERVER_EXTENSIONS = (
    "nbgrader.server_extensions.formgrader",
    "nbgrader.server_extensions.course_list",
    "nbgrader.server_extensions.assignment_list",
    "nbgrader.server_extensions.validate_assignment",
    "ipyparallel",
)
# What the server's log (the terminal that runs `make lab`) must not show a student: nbgrader's
# exchange errors, ipyparallel copying a controller's log, any error the server logs.
BAD_LOG = re.compile(r"ExchangeError|Unwritable directory|IPController|Output for ipcontroller"
                     r"|^\[E ", re.M)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with running_lab(tmp_path_factory.mktemp("jupyterlab-student"), "student") as server:
        yield server


def _disabled_plugins() -> list[str]:
    data = json.loads((STUDENT / "labconfig" / "page_config.json").read_text())
    return [name for name, off in data["disabledExtensions"].items() if off]


def _installed_plugin_ids() -> str:
    """The JavaScript of every installed lab extension, where plugin ids are declared."""
    import sys

    base = Path(sys.prefix, "share", "jupyter", "labextensions")
    return "\n".join(p.read_text(errors="replace") for p in base.glob("**/static/*.js"))


# jupyter_server 2.21.1 (the newest): GET /api/kernels while a kernel is still starting
# fails with a TraitError (its last_activity is None; list_kernels catches KeyError and
# HTTPError only). The tests' own poll (urllib) can hit that window; what a student's
# page does is still checked.
_OUR_POLL_RACE = re.compile(
    r"\[E [^\]]*ServerApp\] Uncaught exception GET /api/kernels .*?"
    r"500 GET /api/kernels \([^)]*\)[^\n]*", re.S)


def _without_our_poll_race(text: str) -> str:
    return _OUR_POLL_RACE.sub(
        lambda m: "" if "'last_activity' trait" in m.group(0)
        and "Python-urllib" in m.group(0) else m.group(0), text)


def assert_quiet_log(lab) -> None:
    text = _without_our_poll_race(lab.log.read_text(errors="replace"))
    bad = [m.group(0) for m in BAD_LOG.finditer(text)]
    assert not bad, f"the server log shows {bad[:5]}:\n{lab.log_tail()}"


# --- HTTP checks --------------------------------------------------------------------------
def test_instructor_server_extensions_are_not_loaded(lab):
    """nbgrader's instructor and exchange handlers and ipyparallel's are not served."""
    log = lab.log.read_text(errors="replace")
    for name in HIDDEN_SERVER_EXTENSIONS:
        assert f"{name} | extension was successfully loaded" not in log, lab.log_tail()
    assert "jupyterlab_jupytext | extension was successfully loaded" in log, lab.log_tail()
    for path in ("/formgrader/api/status", "/formgrader/api/assignments", "/formgrader/courses",
                 "/assignments?course_id=mpilab", "/nbgrader_version?version=0",
                 "/ipyparallel/clusters"):
        status, _body = lab.get(path)
        assert status == 404, f"{path} answered {status} on a student's server"


def test_hidden_plugins_are_real_plugin_ids(lab):
    """Every plugin the student config disables exists (a renamed one would reappear)."""
    installed = _installed_plugin_ids()
    disabled = set(page_config(lab)["disabledExtensions"])
    for plugin in _disabled_plugins():
        assert f'"{plugin}"' in installed, f"no installed lab extension declares {plugin}"
        assert plugin in disabled, f"{plugin} is not disabled on the server: {sorted(disabled)}"
    for plugin in ("@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
                   "@jupyter/nbgrader:course-list", "ipyparallel-labextension:plugin"):
        assert plugin in disabled


def test_the_file_browser_shows_the_course_not_its_machinery(lab):
    """Issue 28 §1b: the top folder listed 19 entries (the autograder with its gradebook,
    build/, tests/, scripts/, setup.py); a student's server lists what the course is for
    them, and a folder below the top is listed whole."""
    import ast

    status, body = lab.get("/api/contents/")
    assert status == 200, body
    names = {m["name"] for m in json.loads(body)["content"]}
    config = ast.parse((STUDENT / "jupyter_server_config.py").read_text())
    machinery = next(ast.literal_eval(node.value.args[0]) for node in ast.walk(config)
                     if isinstance(node, ast.Assign)
                     and getattr(node.targets[0], "id", None) == "MACHINERY")
    course = {"README.md", "docs", "kernels", "labs", "lectures", "mpilab", "reference"}
    assert course <= names, sorted(names)
    for name in ("autograder", "tests", "scripts", "setup.py", "Makefile"):
        assert (ROOT / name).exists() and name in machinery and name not in names, name
    # whatever else is there (a folder the student made) is listed
    assert names == {p.name for p in ROOT.iterdir() if not p.name.startswith(".")
                     and p.name not in machinery}, sorted(names)
    status, body = lab.get("/api/contents/labs")
    labs = {m["name"] for m in json.loads(body)["content"]}
    assert status == 200 and labs == {p.name for p in (ROOT / "labs").iterdir()
                                      if not p.name.startswith(".")}, sorted(labs)


def test_a_fresh_workspace_at_every_start(lab):
    """Layouts are kept in a folder of this server's own, empty at start, not the user's."""
    where = Path(page_config(lab)["workspacesDir"])
    assert where.resolve() != lab.workspaces.resolve()
    assert where.is_dir() and where.name.startswith("mpilab-workspaces-")
    assert any(lab.workspaces.iterdir()), "the saved workspace the test relies on is gone"


# --- in a browser -----------------------------------------------------------------------------
@pytest.mark.browser
def test_browser_student_sees_the_course_and_nothing_else(lab, page):
    """In Chromium: no Nbgrader menu (no Formgrader, Course List, Create Assignment), no
    create-assignment or IPython Parallel sidebar, no dialog or notification, and the
    layout saved by an earlier session does not come back (nor its kernels)."""
    from playwright.sync_api import expect

    with screenshot_on_failure(page, "jupyterlab-student"):
        open_lab(page, lab.url + "/lab")
        # The launcher shows once the (empty) layout is restored; the instructor's server,
        # given the same saved workspace, shows its editor instead.
        expect(main_tab(page, "Launcher")).to_be_visible(timeout=30_000)
        expect(main_tab(page, Path(SAVED_FILE).name)).to_have_count(0)

        menus = page.locator("#jp-menu-panel .lm-MenuBar-itemLabel")
        expect(menus.filter(has_text=re.compile("^File$"))).to_be_visible()
        expect(menus.filter(has_text=re.compile("^Nbgrader$"))).to_have_count(0)
        expect(page.locator('.lm-TabBar-tab[data-id="ipp-cluster-launcher"]')).to_have_count(0)
        expect(page.locator("#ipp-cluster-launcher")).to_have_count(0)
        expect(page.locator('.lm-TabBar-tab[title="Nbgrader Create Assignment"]')).to_have_count(0)

        # nbgrader's commands are not registered at all: the command palette has none.
        page.keyboard.press("Control+Shift+C")
        palette = page.locator("#modal-command-palette")
        expect(palette).to_be_visible()
        for words in ("Formgrader", "Course List", "Create Assignment", "Assignment List"):
            palette.locator("input").fill(words)
            items = palette.locator(".lm-CommandPalette-item",
                                    has_text=re.compile(words, re.I))
            expect(items).to_have_count(0)
        page.keyboard.press("Escape")

        # JupyterLab asks about news within a second or two of loading, where it asks.
        page.wait_for_timeout(3000)
        expect(page.locator(".jp-Dialog")).to_have_count(0)
        expect(page.locator(".Toastify__toast")).to_have_count(0)
        expect(page.locator(".jp-Notification-Status")).to_have_text("0")
    status, body = lab.get("/api/sessions")
    assert status == 200 and json.loads(body) == [], f"kernels were started: {body}"
    assert_quiet_log(lab)
    RESULTS.mkdir(exist_ok=True)
    page.screenshot(path=str(RESULTS / "jupyterlab-student.png"))


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


def _end_sessions(lab, page=None, settle: float = 60) -> None:
    """Close `page`, then shut every kernel down. A kernel is first left to finish starting
    (one killed while it imports prints a KeyboardInterrupt to the server's terminal), and
    a page's notebook to get its kernel (a page closed before that leaves the server
    starting a kernel nobody will end); the page goes before its kernel does, or JupyterLab
    would start it another one."""
    deadline = time.monotonic() + settle
    while time.monotonic() < deadline:
        status, body = lab.get("/api/kernels")
        kernels = json.loads(body) if status == 200 else []
        if (kernels or page is None) and all(k["execution_state"] in ("idle", "dead")
                                             for k in kernels):
            break
        time.sleep(0.5)
    if page is not None:
        page.close()
    status, body = lab.get("/api/sessions")
    for session in json.loads(body) if status == 200 else []:
        req = urllib.request.Request(f"{lab.url}/api/sessions/{session['id']}", method="DELETE",
                                     headers=_xsrf_headers(lab))
        try:
            urllib.request.urlopen(req, timeout=10).close()
        except OSError:
            pass


@pytest.mark.browser
def test_browser_opens_a_myst_lecture_as_a_notebook(lab, page):
    """Double-clicking a MyST .md (as lectures are) opens a notebook, not a text editor,
    with no Validate button (nbgrader's, which can only fail on a lecture)."""
    from playwright.sync_api import expect

    RESULTS.mkdir(exist_ok=True)
    probe = RESULTS / "viewer-probe.md"  # results/ is git-ignored
    probe.write_text(LECTURE_PROBE)
    try:
        with screenshot_on_failure(page, "viewer-probe"):
            open_lab(page, lab.url + "/lab/tree/results")
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
            toolbar = notebook.locator(".jp-NotebookPanel-toolbar")
            expect(toolbar).to_be_visible()
            expect(toolbar.get_by_text("Validate", exact=True)).to_have_count(0)
            expect(page.locator(".jp-Dialog")).to_have_count(0)
    finally:
        # The notebook started a kernel: shut it down with the page.
        _end_sessions(lab, page)
        probe.unlink(missing_ok=True)
        checkpoints = RESULTS / ".ipynb_checkpoints"  # JupyterLab made one on opening
        (checkpoints / "viewer-probe-checkpoint.md").unlink(missing_ok=True)
        try:
            checkpoints.rmdir()
        except OSError:
            pass
    assert_quiet_log(lab)


# --- a cluster restarted from a notebook ----------------------------------------------------
def _xsrf_headers(lab) -> dict[str, str]:
    """The cookie and header a browser sends with a POST (Jupyter server checks both)."""
    with urllib.request.urlopen(lab.url + "/lab", timeout=10) as r:
        cookies = r.headers.get_all("Set-Cookie") or []
    for c in cookies:
        name, _, rest = c.partition("=")
        if name.strip() == "_xsrf":
            token = rest.split(";")[0]
            return {"X-XSRFToken": token, "Cookie": f"_xsrf={token}"}
    return {}


def _run_in_kernel(lab, path: str, code: str, timeout: float) -> list[str]:
    """Run `code` in a kernel the server starts for notebook `path`; its stream output."""
    from tornado import websocket

    req = urllib.request.Request(
        lab.url + "/api/sessions", method="POST",
        data=json.dumps({"path": path, "type": "notebook", "name": "",
                         "kernel": {"name": "python3"}}).encode(),
        headers={"Content-Type": "application/json", **_xsrf_headers(lab)},
    )  # fmt: skip
    with urllib.request.urlopen(req, timeout=60) as r:
        kernel = json.load(r)["kernel"]["id"]
    out: list[str] = []

    async def run():
        ws = await websocket.websocket_connect(
            lab.url.replace("http", "ws", 1) + f"/api/kernels/{kernel}/channels")
        msg_id = uuid.uuid4().hex
        ws.write_message(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "",
                       "session": uuid.uuid4().hex, "version": "5.3", "date": ""},
            "parent_header": {}, "metadata": {}, "channel": "shell",
            "content": {"code": code, "silent": False, "store_history": False,
                        "user_expressions": {}, "allow_stdin": False},
        }))  # fmt: skip
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                raw = await ws.read_message()
                if raw is None:
                    break
                if isinstance(raw, bytes):
                    continue
                msg = json.loads(raw)
                if msg.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind = msg["msg_type"]
                if kind == "stream":
                    out.append(msg["content"]["text"])
                elif kind == "error":
                    out.append(f"{msg['content']['ename']}: {msg['content']['evalue']}")
                elif kind == "execute_reply":
                    return
            out.append("TIMEOUT")
        finally:
            ws.close()

    # In a thread of its own: Playwright's sync API keeps an event loop in this one.
    failed: list[BaseException] = []

    def in_thread():
        try:
            asyncio.run(asyncio.wait_for(run(), timeout + 10))
        except BaseException as exc:  # reported below, in the test's thread
            failed.append(exc)

    worker = threading.Thread(target=in_thread, daemon=True)
    worker.start()
    worker.join(timeout + 20)
    if failed:
        raise failed[0]
    return out


@needs_mpi
def test_restarting_a_cluster_keeps_the_terminal_quiet(lab):
    """A notebook starts, restarts and stops its cluster while the page polls for clusters
    (as the IPython Parallel sidebar does): nothing of the controller's log reaches the
    server's terminal (ipyparallel's server side would copy 100 lines of it per restart)."""
    probe = RESULTS / "cluster-probe.md"
    RESULTS.mkdir(exist_ok=True)
    probe.write_text(LECTURE_PROBE)
    polled: list[int] = []
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            try:
                polled.append(lab.get("/ipyparallel/clusters")[0])
            except OSError:
                pass
            stop.wait(1.0)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    code = ("from mpilab import cluster\nc = cluster.start(2)\nc.restart()\n"
            "print('ranks', c.run(lambda: 1))\nc.stop()\nprint('stopped')")
    try:
        out = _run_in_kernel(lab, "results/cluster-probe.md", code, timeout=240)
    finally:
        stop.set()
        poller.join(timeout=10)
        _end_sessions(lab)
        probe.unlink(missing_ok=True)
    text = "".join(out)
    assert "stopped" in text, text
    assert polled and set(polled) == {404}, polled
    assert_quiet_log(lab)


def test_server_log_stays_quiet(lab):
    """After everything above: no ExchangeError, server error or controller output logged."""
    assert_quiet_log(lab)


# --- opening and saving leaves the course as it was ----------------------------------------
# What JupyterLab changes in a notebook it opens, and why the course's files then stay as
# they are: the kernelspec it writes once the kernel runs (the installed one's: the files
# name it exactly), the kernel's language_info (the student's server fills it in on reading
# and leaves it out on saving: jupyter/student/jupyter_server_config.py), how it writes an
# .ipynb (nbformat's own serialisation: the labs are kept in it) and a lecture's header
# (jupytext.toml keeps jupytext's version fields out).
OPEN_SAVE = "results/open-save"  # git-ignored, under the server's root as lectures/ and labs/
LECTURES = sorted((ROOT / "lectures").glob("*.md"))
LAB_SOURCES = sorted((ROOT / "labs").glob("*/*.ipynb"))
OPENED_AND_SAVED = (
    ROOT / "lectures" / "07-crossing-the-network.md",
    ROOT / "labs" / "lab00-mpi-basics" / "lab00-mpi-basics.ipynb",
)


def _read_notebook(path: Path):
    from mpilab import notebooks

    return notebooks.read(path)


def test_lectures_and_labs_name_the_installed_kernel_as_jupyterlab_writes_it():
    """JupyterLab replaces a notebook's kernelspec by {name, display_name, language} of
    the kernel it started, unless they are equal: a lecture naming "Python 3" came back
    with the installed "Python 3 (ipykernel)" and its keys reordered."""
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec("python3")
    want = {"name": "python3", "display_name": spec.display_name, "language": spec.language}
    assert LECTURES and LAB_SOURCES
    for path in LECTURES + LAB_SOURCES:
        assert dict(_read_notebook(path).metadata.kernelspec) == want, path.relative_to(ROOT)


def test_labs_are_written_as_jupyter_writes_a_notebook():
    """A saved .ipynb is nbformat's serialisation (keys sorted, every code cell with its
    execution_count and outputs): a lab in any other form changes when a student saves it."""
    import nbformat

    for path in LAB_SOURCES:
        text = path.read_text(encoding="utf-8")
        nb = nbformat.reads(text, as_version=nbformat.NO_CONVERT)
        assert text == nbformat.writes(nb, version=nbformat.NO_CONVERT) + "\n", (
            f"{path.relative_to(ROOT)}: rewrite it with nbformat.write (and check "
            "nbstripout --verify)")


def _copy_to_open(source: Path, name: str) -> Path:
    """`source` copied where the student's server sees it (results/ is git-ignored)."""
    copy = ROOT / OPEN_SAVE / name
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_bytes(source.read_bytes())
    return copy


def _remove_copy(copy: Path) -> None:
    """The copy, the checkpoint JupyterLab made of it, and their folders once empty."""
    copy.unlink(missing_ok=True)
    checkpoints = copy.parent / ".ipynb_checkpoints"
    for checkpoint in checkpoints.glob(f"{copy.stem}-checkpoint*"):
        checkpoint.unlink()
    for empty in (checkpoints, copy.parent):
        try:
            empty.rmdir()
        except OSError:
            pass


def _put_contents(lab, path: str, model: dict) -> None:
    req = urllib.request.Request(
        f"{lab.url}/api/contents/{path}", method="PUT", data=json.dumps(model).encode(),
        headers={"Content-Type": "application/json", **_xsrf_headers(lab)})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status in (200, 201), r.status


@pytest.mark.parametrize("source", OPENED_AND_SAVED, ids=lambda p: p.name)
def test_the_server_gives_the_kernels_language_info_and_saves_the_file_back(lab, source):
    """Through the student's server's contents API (as JupyterLab reads and saves): the
    notebook comes with the language_info its kernel will report, and saved back with it
    (and whatever else JupyterLab keeps) it is the course's file, byte for byte."""
    from ipykernel.ipkernel import IPythonKernel

    original = source.read_bytes()
    copy = _copy_to_open(source, f"api-{source.name}")
    path = f"{OPEN_SAVE}/{copy.name}"
    try:
        status, body = lab.get(f"/api/contents/{path}?type=notebook&content=1")
        assert status == 200, body
        model = json.loads(body)
        assert model["content"]["metadata"]["language_info"] == IPythonKernel.language_info
        _put_contents(lab, path, {"type": "notebook", "format": "json",
                                  "content": model["content"]})
        assert copy.read_bytes() == original, copy.read_text()
    finally:
        _remove_copy(copy)


@pytest.mark.browser
@pytest.mark.parametrize("source", OPENED_AND_SAVED, ids=lambda p: p.name)
def test_browser_open_and_save_leaves_the_file_unchanged(lab, page, source):
    """A lecture (a jupytext MyST .md) and a lab (an nbstripout'ed .ipynb), opened in a
    student's JupyterLab: once the kernel is idle the tab is not marked modified, and
    Ctrl+S writes back exactly the file the course has (a student's checkout stays clean,
    and the next `git pull` does not conflict)."""
    from playwright.sync_api import expect

    original = source.read_bytes()
    copy = _copy_to_open(source, source.name)
    try:
        with screenshot_on_failure(page, f"open-save-{copy.stem}"):
            open_lab(page, f"{lab.url}/lab/tree/{OPEN_SAVE}/{copy.name}")
            notebook = page.locator(".jp-NotebookPanel")
            expect(notebook).to_be_visible(timeout=30_000)
            expect(notebook.locator(".jp-Cell").first).to_be_visible(timeout=30_000)
            # The kernel started, answered kernel_info (JupyterLab then writes its spec and
            # language into the notebook's metadata) and is idle.
            expect(notebook.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]')
                   ).to_have_count(1, timeout=90_000)
            page.wait_for_timeout(2000)
            tab = main_tab(page, copy.name)
            expect(tab).to_have_count(1)
            expect(tab).not_to_have_class(re.compile(r"\bjp-mod-dirty\b"))

            before = copy.stat().st_mtime_ns
            notebook.locator(".jp-Cell").first.click()
            page.keyboard.press("Escape")  # command mode: Ctrl+S saves, not the cell editor
            page.keyboard.press("Control+s")
            deadline = time.monotonic() + 30
            while copy.stat().st_mtime_ns == before and time.monotonic() < deadline:
                page.wait_for_timeout(250)
            assert copy.stat().st_mtime_ns != before, "Ctrl+S did not save the file"
            expect(tab).not_to_have_class(re.compile(r"\bjp-mod-dirty\b"))
        saved = copy.read_bytes()
        if saved != original:
            import difflib

            diff = "".join(difflib.unified_diff(
                original.decode().splitlines(True), saved.decode().splitlines(True),
                f"{source.relative_to(ROOT)}", "saved by JupyterLab", n=1))
            pytest.fail(f"saving changed the file:\n{diff}")
    finally:
        _end_sessions(lab, page)
        _remove_copy(copy)
    assert_quiet_log(lab)
