"""A real JupyterLab as the instructor gets it (`make instructor`).

The server (tests/jupyterlab_harness.py) serves a copy of the course (autograder/, labs/,
jupyter/instructor/), so the formgrader never touches a real gradebook. The browser tests
drive Debian's Chromium through Playwright; they skip when it is not installed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from jupyterlab_harness import (
    LAB_EXTENSIONS,
    NBGRADER_SERVER_EXTENSIONS,
    RESULTS,
    SAVED_FILE,
    copy_course,
    jupyter_list,
    main_tab,
    nbgrader_menu_item,
    open_lab,
    page_config,
    running_lab,
    screenshot_on_failure,
    setting_default,
)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("jupyterlab-instructor")
    with running_lab(tmp, "instructor", root=copy_course(tmp / "course")) as server:
        yield server


# --- HTTP checks --------------------------------------------------------------------------
def test_lab_serves_the_course(lab):
    """/lab answers 200 with JupyterLab's page, serving the course."""
    config = page_config(lab)
    assert config["appName"] == "JupyterLab"
    assert Path(config["serverRoot"]).resolve() == lab.root.resolve()


def test_course_lab_extensions_are_enabled(lab):
    """The instructor's server loads the ipyparallel, nbgrader and jupytext lab extensions."""
    config = page_config(lab)
    loaded = {ext["name"] for ext in config["federated_extensions"]}
    assert set(LAB_EXTENSIONS) <= loaded, f"loaded lab extensions: {sorted(loaded)}"
    disabled = [d for d in config["disabledExtensions"] if d.split(":")[0] in LAB_EXTENSIONS]
    assert not disabled, f"disabled: {disabled}"


def test_labextension_list_reports_them_enabled():
    """`jupyter labextension list` shows each course extension installed, enabled and OK."""
    text = jupyter_list("labextension", "list")
    for name in LAB_EXTENSIONS:
        assert re.search(rf"^\s*{re.escape(name)} v\S+ enabled\s+OK", text, re.M), text


def test_nbgrader_server_extensions_are_enabled_and_answer(lab):
    """nbgrader's server extensions are installed, loaded, and their handlers answer."""
    text = jupyter_list("server", "extension", "list")
    log = lab.log.read_text(errors="replace")
    for name in NBGRADER_SERVER_EXTENSIONS:
        assert re.search(rf"^\s*{re.escape(name)} enabled$", text, re.M), text
        assert re.search(rf"^\s*{re.escape(name)}\s+\S*\s*OK$", text, re.M), text
        assert f"{name} | extension was successfully loaded" in log, lab.log_tail()
    import nbgrader

    status, body = lab.get(f"/nbgrader_version?version={nbgrader.__version__}")
    assert status == 200 and json.loads(body)["success"] is True, body  # assignment_list
    status, body = lab.get("/formgrader/api/status")
    assert status == 200 and json.loads(body) == {"status": True}, body  # formgrader


def test_formgrader_manages_the_course_directory(lab):
    """The formgrader sees the course autograder/: every lab in labs/ is an assignment."""
    status, body = lab.get("/formgrader/api/assignments")
    assert status == 200, body
    names = {a["name"] for a in json.loads(body)}
    labs = {p.name for p in (lab.root / "labs").iterdir() if p.is_dir()}
    assert labs and labs <= names, f"formgrader lists {sorted(names)}; labs/ has {sorted(labs)}"
    assert "course directory root is not a subdirectory" not in lab.log.read_text()


def test_ipyparallel_server_extension_answers(lab):
    """The IPython Parallel sidebar's server side lists the (stopped) default cluster."""
    status, body = lab.get("/ipyparallel/clusters")
    assert status == 200, body
    clusters = json.loads(body)
    assert [c["id"] for c in clusters] == ["default:"], clusters


def test_markdown_defaults_to_the_jupytext_notebook(lab):
    """The server hands JupyterLab binder/overrides.json: .md opens as a notebook."""
    viewers = setting_default(lab, "@jupyterlab/docmanager-extension:plugin", "defaultViewers")
    assert viewers.get("markdown") == "Jupytext Notebook", viewers


def test_no_news_by_default(lab):
    """binder/overrides.json: JupyterLab neither asks about news nor checks for updates."""
    plugin = "@jupyterlab/apputils-extension:notification"
    assert setting_default(lab, plugin, "fetchNews") == "false"
    assert setting_default(lab, plugin, "checkForUpdates") is False


@pytest.mark.browser
def test_browser_instructor_sees_all_of_nbgrader_and_the_clusters(lab, page):
    """In Chromium: the instructor's layout comes back, the IPython Parallel panel, nbgrader's
    menu and create-assignment sidebar are there, and the Formgrader opens on the course."""
    from playwright.sync_api import expect

    with screenshot_on_failure(page, "jupyterlab-instructor"):
        open_lab(page, lab.url + "/lab")
        # an instructor keeps the layout saved in the workspace (what a student does not)
        expect(main_tab(page, Path(SAVED_FILE).name)).to_be_visible(timeout=30_000)

        tab = page.locator('.jp-SideBar.jp-mod-left .lm-TabBar-tab[data-id="ipp-cluster-launcher"]')
        expect(tab).to_have_attribute("title", re.compile("IPython Parallel"))
        tab.click()
        panel = page.locator("#ipp-cluster-launcher")
        expect(panel).to_be_visible()
        expect(panel.locator(".ipp-ClusterManager-label")).to_have_text("CLUSTERS")
        default = panel.locator('.ipp-ClusterListingItem[data-cluster-id="default:"]')
        expect(default).to_contain_text("State: Stopped")

        create = '.jp-SideBar.jp-mod-right .lm-TabBar-tab[title="Nbgrader Create Assignment"]'
        expect(page.locator(create)).to_be_visible()  # nbgrader's right-hand sidebar
        page.locator("#jp-menu-panel .lm-MenuBar-itemLabel", has_text="Nbgrader").click()
        expect(page.locator("#jp-mainmenu-nbgrader")).to_be_visible()
        for item in ("Assignment List", "Course List", "Formgrader"):
            expect(nbgrader_menu_item(page, item)).to_be_visible()

        nbgrader_menu_item(page, "Formgrader").click()
        expect(main_tab(page, "Formgrader")).to_be_visible(timeout=30_000)
        formgrader = page.frame_locator("#jp-main-dock-panel iframe")
        expect(formgrader.locator("body")).to_contain_text("Manage Assignments", timeout=30_000)
        expect(formgrader.locator("body")).to_contain_text("lab00-mpi-basics", timeout=30_000)

    RESULTS.mkdir(exist_ok=True)
    page.screenshot(path=str(RESULTS / "jupyterlab-instructor.png"))
