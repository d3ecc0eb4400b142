"""nbgrader's autograde with the verdicts outside the student's process.

:class:`IsolatedExecute` replaces nbgrader's ``Execute`` preprocessor at autograde time
(``autograder/nbgrader_config.py``). It runs one notebook in two kernels:

* the **student's kernel**, in a :class:`~mpilab.autograder.sandbox.Sandbox` (bubblewrap, as
  ``nobody``, with memory, process and file limits; started and reached by
  :mod:`mpilab.autograder.student_kernel`), runs every cell a student could have written
  and the locked cells, as nbgrader would;
* the **grader's kernel**, an ordinary kernel of the course's Python, runs the test cells
  (nbgrader has restored them, hidden tests included) after the imports, functions and
  classes of the locked cells. It never runs student code: a name a test uses that only
  the student's notebook defines is exported by the student's kernel and bound in the
  grader's as data or as a handle (:mod:`mpilab.autograder.isolated`); the checks run the
  student's functions on sandboxed MPI ranks and decide here.

What nbgrader records is unchanged in form: each test cell's outputs (an error means no
points), the gradebook, the autograded notebook. In addition:

* a test cell's error shows only the check's message, never a traceback (whose lines
  would show hidden tests); every output has the course's and the sandbox's paths
  replaced by ``<course>``, ``<python>``, ``<sandbox>``;
* a student kernel that dies (``os._exit``, a segfault, out of memory, killing its parent)
  or stops answering is started again and the cells before it run again (without the
  one that killed it), so later parts are still graded; after ``kernel_restarts`` deaths
  the remaining student cells are not run;
* each cell keeps at most ``max_output_bytes`` of output;
* when the notebook is done, every process the submission started is killed (its
  sandboxes' PID namespaces and cgroup) and its scratch folder removed.

``GenerateFeedback`` gets :class:`HideHiddenTests` (nbgrader's ``ClearHiddenTests``, which
the feedback converter does not run by default: nbgrader issue 1363).
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

from jupyter_core.utils import run_sync
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat import NotebookNode
from nbgrader.preprocessors import ClearHiddenTests, Execute
from traitlets import Bool, Integer, List, Unicode

from ..notebooks import IPCKernelManager
from . import quiet
from .cells import classify, defined_sources, definitions, free_names
from .isolated import ENV, sandbox_env
from .sandbox import NOBODY, Limits, Sandbox
from .scratch import make_scratch, remove_stale_cgroups, remove_stale_scratch
from .student_kernel import PREIMPORT, SandboxKernelManager, Unresponsive, shell_reply

__all__ = ["IsolatedExecute", "HideHiddenTests", "classify", "free_names", "definitions"]


# ---------------------------------------------------------------------------------------
# the preprocessor


class IsolatedExecute(Execute):
    """nbgrader's Execute with student code in a sandbox and the tests in a grader kernel."""

    test_timeout = Integer(300, help="Seconds a test cell may run in the grader's kernel "
                                     "(its checks have their own, shorter timeouts)"
                           ).tag(config=True)
    kernel_restarts = Integer(3, help="How often the student's kernel is started again after "
                                      "it died or stopped answering").tag(config=True)
    max_output_bytes = Integer(1 << 20, help="Output kept per cell").tag(config=True)
    hide = List(Unicode(), help="Folders the student's code must not see (the course "
                                "directory and the lab sources are added)").tag(config=True)
    memory_bytes = Integer(Limits.memory_bytes, help="Memory of all the processes of one "
                                                     "submission").tag(config=True)
    processes = Integer(Limits.processes, help="Processes one submission may have at once"
                        ).tag(config=True)
    keep_scratch = Bool(False, help="Keep the scratch folder (debugging)").tag(config=True)

    # -- set-up ---------------------------------------------------------------------------
    def _hidden(self) -> list[str]:
        hide = list(self.hide)
        cd = self.config.get("CourseDirectory", {})
        root = cd.get("root")
        if root:
            hide.append(root)
            src = cd.get("source_directory")
            if src:
                hide.append(os.path.normpath(os.path.join(root, src)))
        ex = self.config.get("Exchange", {}).get("root")
        if ex:
            hide.append(ex)
        return [os.path.realpath(h) for h in hide]

    def _setup(self, resources) -> None:
        meta = (resources or {}).get("metadata", {}) or {}
        self._nb_dir = os.path.abspath(meta.get("path") or ".")
        self._nb_name = f"{meta.get('name') or 'notebook'}.ipynb"
        if os.geteuid() == 0:
            remove_stale_cgroups()
        remove_stale_scratch()  # of gradings that were killed
        scratch, self._claim = make_scratch(keep=self.keep_scratch)
        limits = Limits(memory_bytes=self.memory_bytes, processes=self.processes)
        box = Sandbox(scratch, hide=self._hidden(), limits=limits)
        if not box.isolated:
            self.log.warning("Student code runs WITHOUT a sandbox (%s): it could read and "
                             "change the course directory", box.why_not)
        self._box = box
        self._home = str(box.folder("home"))
        for entry in os.listdir(self._nb_dir):  # the submission's files, not its notebooks
            src = os.path.join(self._nb_dir, entry)
            if entry.endswith(".ipynb") or entry.startswith("."):
                continue
            dst = os.path.join(self._home, entry)
            if os.path.isdir(src) and not os.path.islink(src):
                shutil.copytree(src, dst, symlinks=True)
            elif os.path.isfile(src) and not os.path.islink(src):
                shutil.copy(src, dst)
        if box.isolated and box.as_root:
            for dirpath, dirnames, filenames in os.walk(self._home):
                for n in dirnames + filenames:
                    os.lchown(os.path.join(dirpath, n), NOBODY, NOBODY)
        self._ipc = str(box.folder("ipc"))
        self._exports = str(box.folder("exports"))
        self._pool = str(box.folder("pool"))
        self._build = str(box.folder("build"))
        box.save(os.path.join(scratch, "sandbox.json"))
        cfg = {"sandbox": os.path.join(scratch, "sandbox.json"), "home": self._home,
               "pool": self._pool, "build": self._build, "exports": self._exports}
        # the grader's kernel talks over Unix sockets in a folder only the grader may enter:
        # over tcp, jupyter_client picks free ports and closes them before the kernel binds,
        # and a grading beside it can take one meanwhile ("Address already in use", the
        # kernel dies before kernel_info: seen in CI with 3 gradings side by side)
        self._grader_ipc = os.path.join(scratch, "grader-ipc")
        os.mkdir(self._grader_ipc, 0o700)
        self._config_path = os.path.join(scratch, "grader.json")
        Path(self._config_path).write_text(json.dumps(cfg))
        os.chmod(self._config_path, 0o600)
        self._student_env = sandbox_env(self._home, {
            "MPILAB_NOTEBOOK": os.path.join(self._home, self._nb_name)})
        self._exports_made = 0
        self._replay: list[str] = []  # what ran in the student's kernel, to run again
        self._deaths = 0
        self._student_gone = ""  # why student cells no longer run
        self._paths = _path_names(scratch, self._hidden())

    def create_kernel_manager(self):
        """The manager of the student's kernel: a :class:`SandboxKernelManager`.

        Returns
        -------
        SandboxKernelManager
            The new manager, also kept as ``self.km``.
        """
        self.km = SandboxKernelManager(box=self._box, home=self._home, ipc=self._ipc,
                                       exports=self._exports, env=self._student_env,
                                       kernel_name=self.kernel_name or "python3",
                                       config=self.config)
        return self.km

    def _start_grader(self, resources) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JPY_", "MPILAB_NOTEBOOK"))}
        env.update({ENV: self._config_path, "PYTHONSAFEPATH": "1", "MPLBACKEND": "Agg"})
        km = IPCKernelManager(folder=self._grader_ipc, kernel_name="python3", config=self.config)
        self._gclient = NotebookClient(
            self.nb, km=km, timeout=self.test_timeout, allow_errors=True,
            interrupt_on_timeout=True, raise_on_iopub_timeout=False, record_timing=False,
            extra_arguments=["--HistoryManager.hist_file=:memory:",
                             "--IPKernelApp.ignore_cwd=True"],
            on_cell_executed=_record_error_reply,
            error_on_timeout={"ename": "CellTimeoutError", "evalue": (
                f"the checks took longer than {self.test_timeout} s"),
                "traceback": [f"CellTimeoutError: the checks took longer than "
                              f"{self.test_timeout} s"]},
            resources=resources)
        # a kernel's start and imports: seconds of a core, not while another grading measures
        with quiet.working():
            run_sync(km.start_kernel)(env=env, cwd=self._nb_dir,
                                      extra_arguments=self._gclient.extra_arguments)
            self._gclient.start_new_kernel_client()
            self._grader_exec("import warnings\nwarnings.simplefilter('ignore')\n"
                              "import matplotlib\nmatplotlib.use('Agg')\n"
                              "import mpilab.autograder.isolated"
                              "  # mpilab.build compiles in the sandbox")

    # -- the main loop ------------------------------------------------------------------
    def preprocess(self, nb, resources=None, km=None):
        """Grade `nb`: student cells in the sandboxed kernel, test cells in the grader's.

        Ends every process of the submission afterwards, and replaces the course's and
        the sandbox's paths in the outputs.

        Parameters
        ----------
        nb : NotebookNode
            The submission, with nbgrader's test cells restored; its cells get their
            outputs in place.
        resources : dict, optional
            nbgrader's resources; ``resources["metadata"]`` gives the notebook's folder
            (``path``) and name (``name``).
        km : KernelManager, optional
            The student's kernel manager. Leave it None (as nbgrader does): a
            :class:`SandboxKernelManager` is made; one given is used as it is.

        Returns
        -------
        nb : NotebookNode
            The executed notebook.
        resources : dict
            The resources, as nbclient leaves them.
        """
        NotebookClient.__init__(self, nb, km)
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        if self.extra_arguments == []:
            self.extra_arguments = ["--HistoryManager.hist_file=:memory:"]
        self._setup(resources)
        t0 = time.perf_counter()
        try:
            self._start_student()
            self._start_grader(resources)
            for index, cell in enumerate(self.nb.cells):
                kind = classify(cell)
                if kind == "skip":
                    continue
                t_cell = time.perf_counter()
                if kind == "test":
                    self._run_test(cell, index)
                else:
                    self._run_student(cell, index)
                    if kind == "locked":
                        self._grader_exec(definitions(cell.source))
                self.log.debug("cell %d (%s %s): %.1f s", index, kind,
                               cell.metadata.get("nbgrader", {}).get("grade_id", ""),
                               time.perf_counter() - t_cell)
            self.set_widgets_metadata()
        finally:
            self._teardown()
            self._sanitize_paths()
            self.log.info("Graded %s in %.1f s", self._nb_name, time.perf_counter() - t0)
        return self.nb, self.resources

    def _teardown(self) -> None:
        for client in (getattr(self, "_gclient", None),):
            if client is not None and client.km is not None:
                try:
                    self._grader_exec("__import__('mpilab.autograder.isolated', "
                                      "fromlist=['_']).shutdown()", timeout=10)
                except Exception:  # noqa: BLE001 - it is killed below anyway
                    pass
                try:
                    client._cleanup_kernel()
                except Exception:  # noqa: BLE001
                    pass
        try:
            if self.km is not None:
                self._cleanup_kernel()
        except Exception:  # noqa: BLE001
            pass
        self._box.close(remove=not self.keep_scratch)
        self._claim.close()

    # -- the student's kernel -----------------------------------------------------------
    def _start_student(self) -> None:
        if self.km is None:
            self.create_kernel_manager()
        # the kernel's start and imports: seconds of a core, not while another grading measures
        with quiet.working():
            self.start_new_kernel()
            self.start_new_kernel_client()
            info = self.wait_for_reply(self.kc.kernel_info())
            if info and "language_info" in info.get("content", {}):
                self.nb.metadata["language_info"] = info["content"]["language_info"]
            # the exporter, imported before any student cell and with the submission's own
            # files off the path: what the student's code replaces later does not reach it
            self._student_run(PREIMPORT, timeout=60)

    def _restart_student(self, why: str) -> bool:
        """Start the student's kernel again and replay what ran; False when given up."""
        self._deaths += 1
        self.log.warning("The student's kernel %s (%d of %d restarts)", why, self._deaths,
                         self.kernel_restarts)
        try:
            self._cleanup_kernel()
        except Exception:  # noqa: BLE001
            pass
        self.km = self.kc = None
        if self._deaths > self.kernel_restarts:
            self._student_gone = (f"not run: the kernel stopped {self._deaths} times, so the "
                                  "rest of the notebook was not run")
            return False
        try:
            self._start_student()
            for code in self._replay:
                self._student_run(code, timeout=self.timeout or 60)
        except (DeadKernelError, Unresponsive, RuntimeError) as exc:
            return self._restart_student(f"failed again while catching up ({exc})")
        return True

    def _run_student(self, cell, index) -> None:
        if self._student_gone:
            cell.outputs = [_error("NotRun", self._student_gone)]
            return
        self._cell_bytes = 0
        self._cell_dropped = 0
        try:
            # a student's cell may keep a core busy: not while another grading measures
            with quiet.working():
                self.execute_cell(cell, index, execution_count=self.code_cells_executed + 1)
        except DeadKernelError:
            cell.outputs.append(_error(
                "KernelDied", "The Python kernel died while this cell ran (os._exit, a crash "
                "in compiled code, more memory than allowed, or a killed process). The cells "
                "after it ran in a new kernel, with this cell left out."))
            self._restart_student("died")
            return
        except CellTimeoutError:
            cell.outputs.append(_error(
                "CellTimeoutError", f"this cell ran longer than {self.timeout} s and did not "
                "stop when interrupted; the cells after it ran in a new kernel, with this cell "
                "left out."))
            self._restart_student("did not stop when interrupted")
            return
        finally:
            if self._cell_dropped:
                cell.outputs.append(NotebookNode(
                    output_type="stream", name="stdout",
                    text=f"\n[{self._cell_dropped:,} more bytes of output were not kept]\n"))
        if any(o.get("ename") == "CellTimeoutError" for o in cell.outputs):
            try:  # an interrupted kernel must answer again before the next cell
                self._student_run("pass", timeout=10)
            except (Unresponsive, DeadKernelError):
                self._restart_student("did not answer after an interrupt")
                return
        self._replay.append(cell.source)

    def _student_run(self, code: str, timeout: float) -> dict:
        """Run `code` silently in the student's kernel; its reply (raises when none)."""
        if self.kc is None:
            raise Unresponsive("no kernel")
        msg_id = self.kc.execute(code, silent=True, store_history=False, allow_stdin=False,
                                 stop_on_error=False)
        return shell_reply(self.kc, self.km, msg_id, timeout)

    def process_message(self, msg, cell, cell_index):
        """Keep at most ``max_output_bytes`` of a cell's output (a flood is cut, not stored).

        Parameters
        ----------
        msg : dict
            A message from the kernel's IOPub channel.
        cell : NotebookNode
            The cell being executed.
        cell_index : int
            Its index in the notebook.

        Returns
        -------
        NotebookNode or None
            What nbclient's ``process_message`` makes of `msg`; None for output past
            the cell's ``max_output_bytes`` (errors are always kept), whose size is
            counted for the note appended to the cell.
        """
        content = msg.get("content", {})
        if msg.get("msg_type") in ("stream", "display_data", "execute_result", "error",
                                   "update_display_data") or msg.get("msg_type", "").startswith(
                                       "comm"):
            size = _size(content)
            self._cell_bytes = getattr(self, "_cell_bytes", 0) + size
            if self._cell_bytes > self.max_output_bytes and msg.get("msg_type") != "error":
                self._cell_dropped = getattr(self, "_cell_dropped", 0) + size
                return None
        return super().process_message(msg, cell, cell_index)

    def _export(self, names: list[str]) -> str | None:
        """Ask the student's kernel to export `names`; the folder, or None without an answer."""
        if self._student_gone or self.kc is None:
            return None
        self._exports_made += 1
        folder = str(self._box.folder(f"exports/{self._exports_made}"))
        code = (f"__import__('sys').modules['mpilab.autograder.student'].export("
                f"{names!r}, {folder!r})")
        try:
            self._student_run(code, timeout=30)
        except (Unresponsive, DeadKernelError) as exc:
            self._restart_student(f"did not hand its functions over ({exc})")
            return None
        return folder

    # -- the grader's kernel ------------------------------------------------------------
    def _grader_exec(self, code: str, timeout: float = 60) -> dict | None:
        if not code.strip():
            return None
        kc = self._gclient.kc
        msg_id = kc.execute(code, silent=True, store_history=False, allow_stdin=False)
        return shell_reply(kc, self._gclient.km, msg_id, timeout)

    def _grader_eval(self, expr: str, timeout: float = 60):
        kc = self._gclient.kc
        msg_id = kc.execute("", silent=True, store_history=False, allow_stdin=False,
                            user_expressions={"r": expr})
        reply = shell_reply(kc, self._gclient.km, msg_id, timeout)
        value = reply["content"].get("user_expressions", {}).get("r", {})
        if value.get("status") != "ok":
            raise RuntimeError(f"the grader's kernel could not evaluate {expr!r}: {value}")
        return ast.literal_eval(value["data"]["text/plain"])

    def _run_test(self, cell, index) -> None:
        mod = "__import__('mpilab.autograder.isolated', fromlist=['_'])"
        try:
            names = self._grader_eval(f"{mod}.missing(globals(), {free_names(cell.source)!r})")
            if names:
                folder = self._export(names)
                if folder is not None:
                    shown = defined_sources([c.source for c in self.nb.cells[:index]
                                             if classify(c) in ("student", "locked")], names)
                    self._grader_exec(f"{mod}.bind(globals(), {folder!r}, {names!r}, "
                                      f"{shown!r})")
            self._gclient.execute_cell(cell, index,
                                       execution_count=self.code_cells_executed + 1)
        except (DeadKernelError, Unresponsive, CellTimeoutError, RuntimeError) as exc:
            cell.outputs = [_error("GraderError", f"the checks of this part could not run "
                                   f"({type(exc).__name__}: {exc}). The grader's problem, "
                                   "not yours: no points counted until your instructor "
                                   "grades it again")]
            self.log.error("Test cell %s: %s", index, exc)
            self._restart_grader()
        for out in cell.outputs:  # the check's message only: a traceback shows hidden tests
            if out.output_type == "error":
                out.traceback = [f"{out.ename}: {out.evalue}"]
        # anything the student's code wrote to the grader's stderr would cost the points
        cell.outputs = [o for o in cell.outputs
                        if not (o.output_type == "stream" and o.name == "stderr")]

    def _restart_grader(self) -> None:
        try:
            self._gclient._cleanup_kernel()
        except Exception:  # noqa: BLE001
            pass
        self._start_grader(self.resources)
        for cell in self.nb.cells:  # the instructor's definitions again
            if classify(cell) == "locked":
                self._grader_exec(definitions(cell.source))

    # -- what the student sees ------------------------------------------------------------
    def _sanitize_paths(self) -> None:
        for cell in self.nb.cells:
            for out in cell.get("outputs", []):
                if "text" in out:
                    out.text = _replace(out.text, self._paths)
                if "evalue" in out:
                    out.evalue = _replace(out.evalue, self._paths)
                if "traceback" in out:
                    out.traceback = [_replace(t, self._paths) for t in out.traceback]
                for key, val in (out.get("data") or {}).items():
                    if isinstance(val, str) and key.startswith("text/"):
                        out.data[key] = _replace(val, self._paths)


class HideHiddenTests(ClearHiddenTests):
    """The hidden tests cut from the feedback a student gets back (nbgrader issue 1363).

    Only the test cells are cut, whose text nbgrader restored from the gradebook: a
    student's own cell that happens to contain the delimiter text would make nbgrader's
    ClearHiddenTests fail, and that student would get no feedback at all.
    """

    def preprocess_cell(self, cell, resources, cell_index):
        """Cut the hidden tests from `cell` if it is a test cell.

        Parameters
        ----------
        cell : NotebookNode
            A cell of the feedback's notebook.
        resources : dict
            nbgrader's resources, passed through.
        cell_index : int
            The cell's index in the notebook.

        Returns
        -------
        cell : NotebookNode
            The cell: a test cell without its hidden-test region (with unbalanced
            delimiters, without anything from the first one's line on), any other unchanged.
        resources : dict
            `resources`, unchanged.
        """
        if classify(cell) != "test":
            return cell, resources
        try:
            self._remove_hidden_test_region(cell)
        except RuntimeError:  # unbalanced: keep nothing from the first delimiter on
            cell.source = cell.source.split(self.begin_test_delimeter)[0].rsplit("\n", 1)[0]
        return cell, resources


# ---------------------------------------------------------------------------------------
# helpers


def _record_error_reply(cell, execute_reply, **kwargs) -> None:
    """As nbgrader's Execute: an error reply with no error output (a timeout) is recorded."""
    content = (execute_reply or {}).get("content", {})
    if content.get("status") == "error" and not any(
            o.output_type == "error" and o.get("ename") == content.get("ename")
            for o in cell.outputs):
        cell.outputs.append(_error(content.get("ename", "Error"), content.get("evalue", "")))


def _error(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue,
                        traceback=[f"{ename}: {evalue}"])


def _size(content: dict) -> int:
    n = len(content.get("text", "") or "")
    for v in (content.get("data") or {}).values():
        n += len(v) if isinstance(v, (str, bytes)) else len(json.dumps(v, default=str))
    n += sum(len(t) for t in content.get("traceback", []) or [])
    return n


def _path_names(scratch: str, hidden: list[str]) -> list[tuple[str, str]]:
    import mpilab

    pairs = [(scratch, "<sandbox>")]
    for h in hidden:
        pairs.append((h, "<course>"))
    pkg = os.path.dirname(os.path.dirname(os.path.realpath(mpilab.__file__)))
    pairs += [(pkg, "<course>"), (os.path.realpath(sys.prefix), "<python>"),
              (sys.prefix, "<python>"), (os.path.realpath(sys.base_prefix), "<python>"),
              (sys.base_prefix, "<python>")]
    home = os.path.expanduser("~")
    if home not in ("/", ""):
        pairs.append((home, "~"))
    return sorted({(a, b) for a, b in pairs if a and len(a) > 1}, key=lambda p: -len(p[0]))


def _replace(text: str, pairs: list[tuple[str, str]]) -> str:
    for a, b in pairs:
        if a in text:
            text = text.replace(a, b)
    return re.sub(r"/tmp/mpilab-grade-[A-Za-z0-9_]+", "<sandbox>", text)
