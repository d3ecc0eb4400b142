"""A student of a class, headless: JupyterHub's REST API, their server's REST API and the
kernel's websocket, as a browser's JupyterLab uses them.

``python -m mpilab.bench classroom`` drives N of these side by side; the end-to-end test of
a term (tests/test_classroom_term.py) drives the headless students of its class with it.
Everything goes through the hub's public port (the proxy), with the token the hub gives
for the student's password (PAM): what a student's browser reaches, nothing more. Every
call has a timeout; a cell that does not answer in time is reported, not waited for.
"""

from __future__ import annotations

import asyncio
import http.cookiejar
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field


class HubError(RuntimeError):
    """The hub or the student's server answered with an error, or not in time."""


@dataclass
class CellRun:
    """One code cell run in the student's kernel.

    ``status`` is the kernel's (``ok``, ``error``, ``aborted``), ``timeout`` when no reply
    came in time, ``died`` when the kernel died or restarted meanwhile; ``seconds`` runs
    from the execute request to the reply (or to giving up).
    """

    index: int
    seconds: float
    status: str
    ename: str = ""
    evalue: str = ""
    text: str = ""

    @property
    def ok(self) -> bool:
        """Whether the kernel ran the cell without an error."""
        return self.status == "ok"


@dataclass
class Student:
    """A student's session with the hub at `url` (``http://host:port``, the proxy).

    Parameters
    ----------
    url : str
        The class's address, without a trailing slash.
    name : str
        The student's login.
    timeout : float
        Seconds any one HTTP call may take.
    """

    url: str
    name: str
    timeout: float = 60.0
    token: str = ""
    _jar: http.cookiejar.CookieJar = field(default_factory=http.cookiejar.CookieJar)

    # --- HTTP -----------------------------------------------------------------------------
    def call(self, path: str, method: str = "GET", body: dict | None = None,
             timeout: float | None = None) -> tuple[int, object]:
        """`method` `path` (from the hub's root) with the student's token; (status, JSON).

        Parameters
        ----------
        path : str
            ``/hub/api/...`` or ``/user/NAME/...``.
        method : str
            The HTTP method.
        body : dict, optional
            Sent as JSON.
        timeout : float, optional
            Seconds for this call (default: the student's).

        Returns
        -------
        tuple of (int, object)
            The HTTP status and the decoded JSON body (``{}`` when it is not JSON).
        """
        req = urllib.request.Request(self.url + path, method=method,
                                     data=None if body is None else json.dumps(body).encode())
        req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"token {self.token}")
        xsrf = next((c.value for c in self._jar if c.name == "_xsrf"), None)
        if xsrf:
            req.add_header("X-XSRFToken", xsrf)
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self._jar))
        try:
            with opener.open(req, timeout=timeout or self.timeout) as r:
                text = r.read().decode(errors="replace")
                status = r.status
        except urllib.error.HTTPError as e:
            text, status = e.read().decode(errors="replace"), e.code
        try:
            return status, json.loads(text) if text.strip()[:1] in ("{", "[") else {}
        except ValueError:
            return status, {}

    def must(self, path: str, method: str = "GET", body: dict | None = None,
             ok: tuple[int, ...] = (200, 201, 202, 204), timeout: float | None = None):
        """:meth:`call`, raising :class:`HubError` unless the status is one of `ok`.

        Parameters
        ----------
        path, method, body, timeout
            As for :meth:`call`.
        ok : tuple of int
            The statuses that mean success.

        Returns
        -------
        object
            The decoded JSON body.
        """
        status, got = self.call(path, method, body, timeout)
        if status not in ok:
            raise HubError(f"{self.name}: {method} {path} answered {status}: {str(got)[:300]}")
        return got

    # --- the hub ----------------------------------------------------------------------------
    def log_in(self, password: str) -> str:
        """A token from the hub for the student's password (checked by PAM).

        Parameters
        ----------
        password : str
            The student's password.

        Returns
        -------
        str
            The token, also kept for the student's later calls.
        """
        self.token = ""
        made = self.must(f"/hub/api/users/{self.name}/tokens", "POST",
                         {"auth": {"username": self.name, "password": password},
                          "note": "mpilab classroom client"})
        self.token = made["token"]
        return self.token

    def start_server(self, timeout: float = 300.0) -> float:
        """Ask the hub for the student's server; seconds until the hub says it is ready.

        Parameters
        ----------
        timeout : float
            Seconds to wait for it.

        Returns
        -------
        float
            From the request to the hub's ``ready``.
        """
        took = self._until("POST", (201, 202, 400), timeout,
                           lambda servers: servers.get("", {}).get("ready"),
                           lambda servers: f"not ready in {timeout:g} s: {servers.get('', {})}")
        # the _xsrf cookie a browser gets with its first page, for the POSTs that check it
        self.call(f"/user/{self.name}/lab", timeout=self.timeout)
        return took

    def stop_server(self, timeout: float = 120.0) -> float:
        """Ask the hub to stop the student's server; seconds until it is gone.

        Parameters
        ----------
        timeout : float
            As for :meth:`start_server`.

        Returns
        -------
        float
            From the request to the hub listing no server for the student.
        """
        return self._until("DELETE", (202, 204, 400), timeout, lambda servers: not servers,
                           lambda servers: f"still there after {timeout:g} s")

    def _until(self, method: str, ok: tuple, timeout: float, settled, unsettled) -> float:
        """Send `method` for the student's server, then poll the hub's record of the student
        every 0.5 s until ``settled(servers)``; the seconds that took (HubError after
        `timeout`, saying "NAME's server " + ``unsettled(servers)``)."""
        t0 = time.perf_counter()
        self.must(f"/hub/api/users/{self.name}/server", method, ok=ok)
        while True:
            servers = self.must(f"/hub/api/users/{self.name}").get("servers") or {}
            if settled(servers):
                return time.perf_counter() - t0
            if time.perf_counter() - t0 > timeout:
                raise HubError(f"{self.name}'s server {unsettled(servers)}")
            time.sleep(0.5)

    # --- the student's server ---------------------------------------------------------------
    def server(self, path: str, method: str = "GET", body: dict | None = None,
               timeout: float | None = None):
        """:meth:`must` on the student's own server (``/user/NAME`` + `path`).

        Parameters
        ----------
        path : str
            The server's path, ``/api/...`` or an extension's.
        method, body, timeout
            As for :meth:`call`.

        Returns
        -------
        object
            The decoded JSON body.
        """
        return self.must(f"/user/{self.name}{path}", method, body, timeout=timeout)

    def assignment(self, action: str, course: str, assignment: str,
                   timeout: float = 300.0):
        """nbgrader's Assignment List: ``fetch``, ``submit`` or ``fetch_feedback``.

        Parameters
        ----------
        action : str
            ``fetch``, ``submit`` or ``fetch_feedback``.
        course : str
            The course id.
        assignment : str
            The assignment's name.
        timeout : float
            Seconds for the server to do it.

        Returns
        -------
        object
            What the server answered: the assignment list, or nbgrader's error.
        """
        got = self.server(f"/assignments/{action}", "POST",
                          {"course_id": course, "assignment_id": assignment}, timeout=timeout)
        if isinstance(got, dict) and got.get("success") is False:
            raise HubError(f"{self.name}: nbgrader {action} {assignment}: "
                           f"{str(got.get('value') or got.get('message'))[:1000]}")
        return got

    def assignments(self, course: str) -> list[dict]:
        """The student's view of the course's assignments (nbgrader's Assignment List).

        Parameters
        ----------
        course : str
            The course id.

        Returns
        -------
        list of dict
            nbgrader's records: ``assignment_id``, ``status``, ``notebooks``, ...
        """
        got = self.server(f"/assignments?course_id={urllib.parse.quote(course)}")
        if not got.get("success"):
            raise HubError(f"{self.name}: the assignment list failed: {str(got)[:1000]}")
        return got["value"]

    def read_notebook(self, path: str) -> dict:
        """The notebook at `path` (relative to the student's home), as JSON.

        Parameters
        ----------
        path : str
            Its path in the server's contents.

        Returns
        -------
        dict
            The notebook (nbformat 4 JSON).
        """
        return self.server(f"/api/contents/{urllib.parse.quote(path)}?content=1")["content"]

    def write_notebook(self, path: str, nb: dict) -> None:
        """Save `nb` at `path` through the server, as JupyterLab saves a notebook.

        Parameters
        ----------
        path : str
            Its path in the server's contents.
        nb : dict
            The notebook (nbformat 4 JSON).
        """
        self.server(f"/api/contents/{urllib.parse.quote(path)}", "PUT",
                    {"type": "notebook", "format": "json", "content": nb})

    def open_kernel(self, path: str, kernel: str = "python3") -> str:
        """A session for notebook `path` with a new kernel; the kernel's id.

        Parameters
        ----------
        path : str
            The notebook's path in the server's contents.
        kernel : str
            The kernel's name.

        Returns
        -------
        str
            The kernel's id.
        """
        made = self.server("/api/sessions", "POST", {"path": path, "type": "notebook",
                                                     "name": "", "kernel": {"name": kernel}})
        return made["kernel"]["id"]

    def close_kernels(self, tries: int = 5) -> None:
        """End every session and kernel of the student's server (a kernel that died or is
        restarting may refuse at first: tried again, `tries` times, then HubError).

        Parameters
        ----------
        tries : int
            Rounds of deleting before giving up.
        """
        for _ in range(tries):
            for s in self.server("/api/sessions"):
                self.call(f"/user/{self.name}/api/sessions/{s['id']}", "DELETE")
            for k in self.server("/api/kernels"):
                self.call(f"/user/{self.name}/api/kernels/{k['id']}", "DELETE")
            if not self.server("/api/kernels") and not self.server("/api/sessions"):
                return
            time.sleep(2)
        raise HubError(f"{self.name}: kernels left after {tries} tries: "
                       f"{self.server('/api/kernels')}")

    def run_cells(self, kernel: str, sources: list[str], timeout: float = 300.0,
                  stop_on_error: bool = False) -> list[CellRun]:
        """Run `sources` one after the other in `kernel`, through its websocket.

        Parameters
        ----------
        kernel : str
            The kernel's id (:meth:`open_kernel`).
        sources : list of str
            The code cells' sources.
        timeout : float
            Seconds one cell may take before it is given up (the kernel is interrupted).
        stop_on_error : bool
            Stop at the first cell that does not end ``ok``.

        Returns
        -------
        list of CellRun
            One per cell run; after a cell that timed out or whose kernel died, none.
        """
        # in a thread of its own: the caller's thread may run an event loop already (a
        # notebook's, Playwright's)
        got: list = []

        def run() -> None:
            try:
                got.append(asyncio.run(self._run_cells(kernel, sources, timeout, stop_on_error)))
            except BaseException as exc:  # noqa: BLE001 - raised below, in the caller's thread
                got.append(exc)

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        worker.join()
        if isinstance(got[0], BaseException):
            raise got[0]
        return got[0]

    async def _run_cells(self, kernel, sources, timeout, stop_on_error):
        from tornado import httpclient, websocket

        ws_url = (self.url.replace("http", "ws", 1)
                  + f"/user/{self.name}/api/kernels/{kernel}/channels"
                  + f"?session_id={uuid.uuid4().hex}")
        req = httpclient.HTTPRequest(ws_url, headers={"Authorization": f"token {self.token}"},
                                     connect_timeout=self.timeout, request_timeout=self.timeout)
        ws = await websocket.websocket_connect(req, max_message_size=1 << 30)
        session = uuid.uuid4().hex
        runs: list[CellRun] = []
        try:
            for index, source in enumerate(sources):
                run = await self._one_cell(ws, session, index, source, timeout)
                runs.append(run)
                if run.status in ("timeout", "died") or (stop_on_error and not run.ok):
                    if run.status == "timeout":
                        self.server(f"/api/kernels/{kernel}/interrupt", "POST")
                    break
        finally:
            ws.close()
        return runs

    @staticmethod
    async def _one_cell(ws, session: str, index: int, source: str, timeout: float) -> CellRun:
        msg_id = uuid.uuid4().hex
        ws.write_message(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "",
                       "session": session, "version": "5.3", "date": ""},
            "parent_header": {}, "metadata": {}, "channel": "shell",
            "content": {"code": source, "silent": False, "store_history": True,
                        "user_expressions": {}, "allow_stdin": False, "stop_on_error": True},
        }))  # fmt: skip
        t0 = time.perf_counter()
        text: list[str] = []
        ename = evalue = ""
        while True:
            left = timeout - (time.perf_counter() - t0)
            if left <= 0:
                return CellRun(index, time.perf_counter() - t0, "timeout", text="".join(text))
            try:
                raw = await asyncio.wait_for(ws.read_message(), left)
            except TimeoutError:
                continue
            if raw is None:
                return CellRun(index, time.perf_counter() - t0, "died",
                               evalue="the websocket closed", text="".join(text))
            if isinstance(raw, bytes):
                continue
            msg = json.loads(raw)
            kind, content = msg.get("msg_type"), msg.get("content", {})
            if kind == "status" and content.get("execution_state") in ("restarting", "dead"):
                return CellRun(index, time.perf_counter() - t0, "died",
                               evalue=content["execution_state"], text="".join(text))
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if kind == "stream":
                text.append(content.get("text", ""))
            elif kind == "error":
                ename, evalue = content.get("ename", ""), content.get("evalue", "")
            elif kind == "execute_reply":
                return CellRun(index, time.perf_counter() - t0, content.get("status", "?"),
                               ename or content.get("ename", ""),
                               evalue or content.get("evalue", ""), "".join(text))


def code_cells(nb: dict) -> list[str]:
    """The sources of a notebook's code cells, in order (nbformat 4 JSON).

    Parameters
    ----------
    nb : dict
        The notebook.

    Returns
    -------
    list of str
        Each code cell's source.
    """
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in nb["cells"] if c["cell_type"] == "code"]


def expected_to_fail(nb: dict) -> set[int]:
    """Which code cells (indexes among the code cells) are tagged ``raises-exception``.

    Parameters
    ----------
    nb : dict
        The notebook, as for :func:`code_cells`.

    Returns
    -------
    set of int
        Their indexes in :func:`code_cells`.
    """
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    return {i for i, c in enumerate(code)
            if "raises-exception" in c.get("metadata", {}).get("tags", [])}


def fill_answers(nb: dict, answers: dict[str, str]) -> dict:
    """`nb` with its nbgrader solution cells' sources replaced by `answers` (by grade_id).

    Parameters
    ----------
    nb : dict
        The released notebook (nbformat 4 JSON); changed in place.
    answers : dict of str to str
        The source of each solution cell, by ``grade_id``.

    Returns
    -------
    dict
        `nb`.
    """
    for cell in nb["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution") and meta.get("grade_id") in answers:
            cell["source"] = answers[meta["grade_id"]]
    return nb
