"""The package's layers only point down (ARCHITECTURE.md).

Every import inside ``mpilab`` is read from the source (module level and inside
functions alike) and checked against the layer map below: a module may import from its
own layer or a lower one, never a higher one. A new module must be given a layer here,
or this test fails.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "mpilab"

# lowest first; a name stands for the module or package and everything under it, unless a
# longer name says otherwise ("mpilab" is the package's __init__ alone): models/
# (predictions, hockney, loggp) and tracing/ (schedules, recording, requests, drawing) are
# foundations, collectives/ (algorithms, running) and grading/ (a lab's checks, its graded
# prediction in <lab>_model, its verdicts on plain data) the teaching API
LAYERS: list[tuple[str, list[str]]] = [
    ("foundations", ["mpilab", "mpilab.kernels", "mpilab.runtime", "mpilab.netlab",
                     "mpilab.papers", "mpilab.paths", "mpilab.buffers",
                     "mpilab.validate", "mpilab.sources",
                     "mpilab.models", "mpilab.tracing", "mpilab.coarray_view", "mpilab.plots"]),
    # with the autograder's machinery (sandbox, scratch folders, the student's kernel, rank
    # pool, its wire format, grading lock, what a failed check raises, a student's objects
    # on either side): it starts the grader's jobs as jobs starts the course's, and never
    # imports a check
    ("running jobs", ["mpilab.jobs", "mpilab.timing", "mpilab.build", "mpilab.cluster",
                      "mpilab.magics", "mpilab.notebooks", "mpilab.autograder"]),
    # topics, their figures (plots/<topic>) and their checks (grading/<topic>)
    ("teaching API", ["mpilab.halo", "mpilab.pingpong", "mpilab.collectives", "mpilab.tuning",
                      "mpilab.network", "mpilab.coarrays", "mpilab.sim", "mpilab.plots.halo", "mpilab.plots.onesided",
                      "mpilab.plots.matching",
                      "mpilab.plots.collectives", "mpilab.grading"]),
    # nbgrader's preprocessors (autograder/nbgrader_config.py) and exchange plugins (a class's
    # nbgrader_config.py, classroom/) and the users' cgroups (limits, the hub's spawner) are a
    # door in, as the CLIs
    ("front ends", ["mpilab.bench", "mpilab.autograder.nbgrader", "mpilab.autograder.bench",
                    "mpilab.autograder.course", "mpilab.autograder.parallel",
                    "mpilab.autograder.edition", "mpilab.autograder.ungradable",
                    "mpilab.autograder.exchange", "mpilab.autograder.limits",
                    "mpilab.doctor"]),
]


def layer_of(module: str) -> int:
    best, found = -1, None
    for i, (_, names) in enumerate(LAYERS):
        for name in names:
            under = module.startswith(name + ".") and name != "mpilab"
            if (module == name or under) and len(name) > best:
                best, found = len(name), i
    if found is None:
        raise LookupError(f"{module} has no layer: add it to LAYERS in tests/test_layers.py")
    return found


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path, text: str | None = None) -> list[tuple[int, str]]:
    """(line, module) for every import of an mpilab module in `path` (or `text` as it)."""
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found = []
    source = path.read_text() if text is None else text
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:  # "from . import halo" imports the module mpilab.halo
                sub = f"{mod}.{a.name}"
                is_module = ((PKG.parent / sub.replace(".", "/")).with_suffix(".py").exists()
                             or (PKG.parent / sub.replace(".", "/")).is_dir())
                found.append((node.lineno, sub if is_module else mod))
    return [(line, m) for line, m in found if m == "mpilab" or m.startswith("mpilab.")]


SOURCES = sorted(PKG.rglob("*.py"))


def test_every_module_has_a_layer():
    missing = []
    for path in SOURCES:
        try:
            layer_of(module_name(path))
        except LookupError as exc:
            missing.append(str(exc))
    assert not missing, "\n".join(missing)


def upward(path: Path, text: str | None = None) -> list[str]:
    """The imports in `path` of a module from a higher layer, described."""
    mine = layer_of(module_name(path))
    return [f"{path.relative_to(PKG.parent)}:{line} imports {m} "
            f"({LAYERS[layer_of(m)][0]}, above {LAYERS[mine][0]})"
            for line, m in imports(path, text) if layer_of(m) > mine]


@pytest.mark.parametrize("path", SOURCES, ids=module_name)
def test_imports_point_down(path):
    up = upward(path)
    assert not up, "\n".join(up)


#: The house bar (issue 25): a module longer than this is split along a seam a newcomer
#: would recognise (one concern per module), not cut at the line.
MAX_LINES = 600


def test_no_module_is_over_the_bar():
    long = [f"{p.relative_to(PKG.parent)}: {n} lines"
            for p in SOURCES if (n := len(p.read_text().splitlines())) > MAX_LINES]
    assert not long, (f"over {MAX_LINES} lines (split by concern, ARCHITECTURE.md):\n"
                      + "\n".join(long))


def test_a_module_without_a_layer_is_named():
    with pytest.raises(LookupError, match="mpilab.lecture08 has no layer"):
        layer_of("mpilab.lecture08")
    assert layer_of("mpilab.grading.halo") == layer_of("mpilab.halo")
    assert layer_of("mpilab.grading.halo_model") == layer_of("mpilab.grading")
    assert layer_of("mpilab.collectives.running") == layer_of("mpilab.collectives")
    assert layer_of("mpilab.models.hockney") == layer_of("mpilab.tracing.requests") == 0
    assert layer_of("mpilab.autograder.scratch") == layer_of("mpilab.autograder.sandbox")
    assert layer_of("mpilab.autograder.student_kernel") < layer_of("mpilab.autograder.nbgrader")
    assert layer_of("mpilab.plots") < layer_of("mpilab.plots.halo")


def test_runtime_imports_only_itself():
    """``setup.py`` loads the runtime package from its files, before mpilab is built: its
    modules (discovery, machine, launching, cleanup) import one another, nothing else."""
    runtime = sorted((PKG / "runtime").glob("*.py"))
    assert {p.stem for p in runtime} >= {"__init__", "discovery", "machine", "launching",
                                         "cleanup"}
    bad = [f"{module_name(p)} imports {m}" for p in runtime for _, m in imports(p)
           if not m.startswith("mpilab.runtime.")]
    assert not bad, "\n".join(bad)
    assert all(layer_of(module_name(p)) == layer_of("mpilab.kernels") for p in runtime)


def test_the_checks_sit_on_the_autograder():
    """A lab's checks use the autograder's machinery, which never imports a check; nbgrader's
    preprocessors and the course tools sit on top of both."""
    machinery = ["sandbox", "scratch", "student_kernel", "pool", "worker", "wire", "quiet",
                 "failures", "isolated", "student"]
    doors = ["nbgrader", "course", "bench", "parallel"]
    checks = layer_of("mpilab.grading")
    assert max(layer_of(f"mpilab.autograder.{m}") for m in machinery) < checks
    assert layer_of("mpilab.grading.lab08") == layer_of("mpilab.grading.running") == checks
    assert min(layer_of(f"mpilab.autograder.{m}") for m in doors) > checks


def test_the_autograder_imports_no_check():
    """Not even inside a function: what the grader's kernel and the student's need of the
    checks' machinery (failures, fingerprints) is the autograder's own."""
    bad = [f"{module_name(p)}:{line} imports {m}" for p in SOURCES
           if module_name(p).startswith("mpilab.autograder")
           for line, m in imports(p) if m == "mpilab.grading" or m.startswith("mpilab.grading.")]
    assert not bad, "\n".join(bad)


def test_the_check_sees_an_upward_import_inside_a_function():
    halo = PKG / "halo" / "parallel.py"
    text = halo.read_text() + "\n\ndef _f():\n    from ..bench import pingpong\n"
    assert upward(halo) == []
    assert [u.split(" imports ")[1] for u in upward(halo, text)] == [
        "mpilab.bench.pingpong (front ends, above teaching API)"]


KERNEL_SOURCES = sorted((PKG.parent / "kernels").rglob("*.pyx")) + sorted(
    (PKG.parent / "kernels").rglob("*.pxi"))


@pytest.mark.parametrize("path", KERNEL_SOURCES, ids=lambda p: p.name)
def test_compiled_kernels_import_only_foundations(path):
    """The Cython kernels become mpilab.kernels.<name>: they may import foundations only."""
    name = r"(mpilab(?:\.\w+)*)(?!\w)"  # mpilab.x.y, not the C module mpilab_halo
    found = re.findall(rf"^\s*(?:from\s+{name}\s+c?import|c?import\s+{name})",
                       path.read_text(), re.M)
    mods = [a or b for a, b in found]
    up = [m for m in mods if layer_of(m) > layer_of("mpilab.kernels")]
    assert not up, f"{path.name} imports {up} from above the kernels' layer"


def test_no_teaching_module_imports_the_bench():
    """``python -m mpilab.bench`` sits on top: nothing below it imports it."""
    bad = [f"{module_name(p)} imports {m}" for p in SOURCES
           if layer_of(module_name(p)) < layer_of("mpilab.bench")
           for _, m in imports(p) if m == "mpilab.bench" or m.startswith("mpilab.bench.")]
    assert not bad, "\n".join(bad)


BENCH_IMPORT = re.compile(r"^\s*(?:from\s+mpilab\.bench(?:\.\w+)*\s+import|import\s+mpilab\.bench"
                          r"|from\s+mpilab\s+import\s+(?:[\w\s,(]*\b)?bench\b)", re.M)


def _command_lines() -> set[str]:
    """The modules ``python -m mpilab.bench <name>`` runs (one lives with the grader)."""
    tree = ast.parse((PKG / "bench" / "__init__.py").read_text())
    found = [n.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
             and any(getattr(t, "id", None) == "BENCHMARKS" for t in n.targets)]
    assert found, "mpilab/bench/__init__.py has no BENCHMARKS"
    return set(ast.literal_eval(found[0]).values())


def test_only_command_lines_import_the_bench():
    """One owner per measurement: an experiment's code is its topic module's, and
    ``mpilab.bench`` is command lines over it. So no module outside ``mpilab/bench``
    imports it (in a function either), but a command line that ``python -m mpilab.bench``
    runs from elsewhere (``autograde``)."""
    lines = _command_lines()
    assert "mpilab.autograder.bench" in lines
    bad = [f"{module_name(p)}:{line} imports {m}" for p in SOURCES
           if not module_name(p).startswith("mpilab.bench") and module_name(p) not in lines
           for line, m in imports(p) if m == "mpilab.bench" or m.startswith("mpilab.bench.")]
    assert not bad, "\n".join(bad)


LECTURES = sorted((PKG.parent / "lectures").glob("*.md"))
CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```", re.M | re.S)


@pytest.mark.parametrize("path", LECTURES, ids=lambda p: p.stem)
def test_no_lecture_imports_the_bench(path):
    """A lecture calls the topic modules, as the bench's command lines do."""
    bad = [line.strip() for cell in CODE_CELL.findall(path.read_text())
           for line in cell.splitlines() if BENCH_IMPORT.match(line)]
    assert not bad, f"{path.name} imports mpilab.bench: {bad}"


def test_the_bench_import_check_sees_each_spelling():
    for line in ("from mpilab.bench import buffers", "import mpilab.bench.pingpong",
                 "    from mpilab.bench.contention import run", "from mpilab import bench",
                 "from mpilab import runtime, bench"):
        assert BENCH_IMPORT.search(line), line
    for line in ("from mpilab import pingpong", "# python -m mpilab.bench pingpong",
                 "from mpilab import benchmarks"):
        assert not BENCH_IMPORT.search(line), line


def test_the_cluster_neither_imports_its_magics_nor_reads_the_graders_switch():
    """``%%mpi`` (mpilab.magics) uses the cluster; the cluster loads it as an IPython
    extension by its name, so no import goes back (in a function either): no circle. The
    autograder tells the cluster it grades through a hook
    (``cluster.start_engines_on_first_use``), not through its environment."""
    package = sorted((PKG / "cluster").rglob("*.py"))
    assert len(package) > 1
    back = [f"{module_name(p)}:{line}" for p in package for line, m in imports(p)
            if m == "mpilab.magics"]
    assert not back, f"{back} import mpilab.magics"
    assert "mpilab.cluster" in [m for _, m in imports(PKG / "magics.py")]
    switches = [module_name(p) for p in package if "MPILAB_GRADING" in p.read_text()]
    assert not switches, f"{switches} read MPILAB_GRADING"


def unnamed(text: str, paths) -> list[str]:
    """The modules of `paths` (below the package; a package by its folder's name) whose
    last name `text` never mentions as a word."""
    out = []
    for path in paths:
        name = module_name(path)
        last = name.rpartition(".")[2]
        if name != "mpilab" and path.name != "__main__.py" and not re.search(
                rf"(?<!\w){re.escape(last)}(?!\w)", text):
            out.append(name)
    return out


def test_the_architecture_names_every_module():
    """ARCHITECTURE.md's layer map says what each module is for: a new one is added there
    (and to LAYERS here)."""
    text = (PKG.parent / "ARCHITECTURE.md").read_text()
    assert unnamed(text, SOURCES) == []
    assert unnamed("halo, grading/ ... halo_model", [PKG / "grading" / "allgather.py",
                                                     PKG / "grading" / "halo_model.py"]) \
        == ["mpilab.grading.allgather"]


TOPICS = ("mpilab.halo", "mpilab.pingpong", "mpilab.collectives", "mpilab.tuning",
          "mpilab.network", "mpilab.coarrays", "mpilab.sim")


def teaching_role(module: str) -> str | None:
    """A teaching-layer module's role: "topic", "figures" (plots.<topic>) or "checks"."""
    if module == "mpilab.grading" or module.startswith("mpilab.grading."):
        return "checks"
    if module.startswith("mpilab.plots.") and layer_of(module) == 2:
        return "figures"
    if any(module == t or module.startswith(t + ".") for t in TOPICS):
        return "topic"
    return None


def test_inside_the_teaching_layer_topics_use_neither_checks_nor_figures():
    """Checks (grading/) and figures (plots/<topic>) use the topics; a topic uses neither,
    and checks and figures do not use each other: a topic stays usable from a lecture, a
    bench and the simulator without the grader or matplotlib."""
    allowed = {("checks", "topic"), ("figures", "topic"), ("topic", "topic"),
               ("checks", "checks"), ("figures", "figures")}
    bad = [f"{a} -> {b} ({where})" for a, edges in import_graph().items()
           for b, where in edges.items()
           if teaching_role(a) and teaching_role(b)
           and (teaching_role(a), teaching_role(b)) not in allowed]
    assert not bad, bad
    assert [teaching_role(m) for m in ("mpilab.grading.halo", "mpilab.plots.halo",
                                       "mpilab.sim.smpi", "mpilab.plots", "mpilab.jobs")] \
        == ["checks", "figures", "topic", None, None]


#: where a module is imported by a name made at run time, and why it has to be
STRING_IMPORTS = {
    "mpilab.kernels": "a compiled kernel, imported when first used (kernels.compiled)",
    "mpilab.bench.__main__": "the benchmark a command line names",
    "mpilab.autograder.nbgrader": "code the preprocessor sends to the grader's kernel, "
                                  "another process",
    "mpilab.autograder.worker": "the check modules the grader has imported, imported again "
                                "on its ranks when they start (pool.preloads): a request's "
                                "pickle would import them inside a student's timeout",
}


def string_import_lines(text: str) -> list[int]:
    """The lines of `text` (Python) that call importlib.import_module(...) or
    __import__(...), or hold code that does in a string (sent to run elsewhere)."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call):
            f = node.func
            if (f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")) in (
                    "import_module", "__import__"):
                found.append(node.lineno)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and re.search(r"__import__\(|import_module\(", node.value):
            found.append(node.lineno)
    return found


def test_modules_are_imported_by_their_names_in_code():
    """An import statement is what the layer and circle checks read; an import through a
    string would pass them unseen, so each is named here with its reason."""
    where = {module_name(p) for p in SOURCES if string_import_lines(p.read_text())}
    assert where <= set(STRING_IMPORTS), sorted(where - set(STRING_IMPORTS))
    assert where == set(STRING_IMPORTS), "a reason left for a string import that went"


def test_the_string_import_check_sees_each_spelling():
    for code in ('import importlib\nm = importlib.import_module("mpilab." + x)',
                 'p = __import__("mpilab").__file__',
                 'k.execute("__import__(\'sys\').modules")',
                 "from importlib import import_module\nm = import_module(name)"):
        assert string_import_lines(code) == [code.count("\n") + 1], code
    assert string_import_lines('"""Says import_module in prose."""\nimport os\n') == []


#: the environment variables that say a process is part of a grading
GRADING_SWITCHES = {"MPILAB_GRADER", "MPILAB_GRADING", "NBGRADER_EXECUTION"}


def switch_uses(paths) -> list[str]:
    """"path:line" of every string in code (not a docstring or comment) that is a
    grading switch's name, outside mpilab.autograder.isolated."""
    found = []
    for path in paths:
        if path == PKG / "autograder" / "isolated.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in GRADING_SWITCHES:
                found.append(f"{path}:{node.lineno}")
    return found


def test_the_grading_switches_are_read_in_one_place():
    """mpilab.autograder.isolated reads them (active, students_kernel,
    nbgrader_executing) and sets them for the sandbox; every other module asks it, or is
    told through a hook as the cluster is."""
    assert switch_uses(SOURCES) == []


def test_the_switch_check_sees_a_read(tmp_path):
    mod = tmp_path / "reader.py"
    mod.write_text('"""Mentions MPILAB_GRADING in prose only."""\nimport os\n'
                   'X = os.environ.get("MPILAB_GRADING")\n')
    assert [u.rsplit(":", 1)[1] for u in switch_uses([mod])] == ["3"]


# --------------------------------------------------------------------------- no circles

def _is_package(module: str) -> bool:
    return (PKG.parent / module.replace(".", "/") / "__init__.py").exists()


def import_graph(sources=None) -> dict[str, dict[str, str]]:
    """{module: {imported module: "path:line" of the first such import}} over `sources`.

    Every import counts, at module level and inside functions; relative imports are
    resolved; ``from mpilab import x`` imports the module ``mpilab.x`` when x is one; an
    import of a package is an import of its ``__init__`` (named as the package), and an
    import of a submodule is not one of its package's ``__init__`` (so a package whose
    ``__init__`` re-exports its modules, which import one another, has no circle; a module
    that imports its own package for a name does). A module importing itself is no edge.
    """
    graph: dict[str, dict[str, str]] = {}
    for path in SOURCES if sources is None else sources:
        me = module_name(path)
        edges = graph.setdefault(me, {})
        for line, m in imports(path):
            if m != me:
                edges.setdefault(m, f"{path.relative_to(PKG.parent)}:{line}")
    return graph


def cycles(graph: dict[str, dict[str, str]]) -> list[tuple[frozenset[str], list[str]]]:
    """Each strongly connected group of modules, and one circle through it, [a, ..., a]."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan; the graph is a few hundred edges
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    found = []
    for group in groups:  # the shortest circle from the group's first module back to it
        start, members = group[0], set(group)
        paths, seen = {start: [start]}, {start}
        queue = [start]
        circle = None
        while queue and circle is None:
            v = queue.pop(0)
            for w in sorted(graph.get(v, {})):
                if w == start:
                    circle = paths[v] + [start]
                    break
                if w in members and w not in seen:
                    seen.add(w)
                    paths[w] = paths[v] + [w]
                    queue.append(w)
        found.append((frozenset(group), circle))
    return found


def describe(circle: list[str], graph: dict[str, dict[str, str]]) -> str:
    return circle[0] + "".join(f" -> {b} ({graph[a][b]})"
                               for a, b in zip(circle, circle[1:], strict=False))


# Circles that exist today and are being removed, each by its whole group of modules (a
# new module joining one makes it another group, and fails), with where it is mended.
def test_the_import_graph_has_no_circle():
    graph = import_graph()
    found = [describe(c, graph) for _, c in cycles(graph)]
    assert not found, "import circles (every import counts, in functions too):\n" + "\n".join(found)


def test_the_circle_check_sees_a_circle_through_a_package_and_not_a_re_export():
    graph = {"mpilab.a": {"mpilab.b.x": "a.py:3"}, "mpilab.b": {"mpilab.b.x": "b/__init__.py:1"},
             "mpilab.b.x": {"mpilab.b.y": "b/x.py:2"}, "mpilab.b.y": {"mpilab.c": "b/y.py:9"},
             "mpilab.c": {"mpilab.a": "c.py:4"}}
    assert [describe(c, graph) for _, c in cycles(graph)] == [
        "mpilab.a -> mpilab.b.x (a.py:3) -> mpilab.b.y (b/x.py:2) -> mpilab.c (b/y.py:9) "
        "-> mpilab.a (c.py:4)"]
    graph["mpilab.c"] = {}
    assert cycles(graph) == []  # b's __init__ importing its modules is no circle
    graph["mpilab.b.y"] = {"mpilab.b": "b/y.py:1"}  # ... unless one imports it for names
    assert [sorted(g) for g, _ in cycles(graph)] == [["mpilab.b", "mpilab.b.x", "mpilab.b.y"]]


def test_a_module_importing_its_own_package_for_a_name_is_a_circle():
    """The sim package's __init__ re-exports its modules: one of them taking a name from
    the package (not from the sibling that defines it) closes a circle, in a function too."""
    smpi = PKG / "sim" / "smpi.py"
    graph = import_graph()
    assert not [c for g, c in cycles(graph) if "mpilab.sim.smpi" in g]
    text = smpi.read_text() + "\n\ndef _f():\n    from . import label\n"
    graph["mpilab.sim.smpi"] = {m: f"mpilab/sim/smpi.py:{line}" for line, m in imports(smpi, text)}
    [(group, circle)] = [(g, c) for g, c in cycles(graph) if "mpilab.sim.smpi" in g]
    assert {"mpilab.sim", "mpilab.sim.smpi"} <= group
    assert circle == ["mpilab.sim", "mpilab.sim.smpi", "mpilab.sim"]


def test_every_package_is_in_the_wheel():
    """setup.py lists packages by name: one it forgets is missing from a non-editable
    install (the PyPI MPIs' venvs, a student's pip install) while a checkout works."""
    tree = ast.parse((PKG.parent / "setup.py").read_text())
    [listed] = [ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                and any(getattr(t, "id", None) == "PACKAGES" for t in n.targets)]
    here = {".".join(p.parent.relative_to(PKG.parent).parts) for p in PKG.rglob("__init__.py")}
    assert here - set(listed) == set(), "packages setup.py does not list"


# The rank count has one name in the public API: `ranks` (a second count in the same
# signature a qualified name that ends in it, such as `measuring_ranks`). These names can
# only mean the rank count, so none may come back.
RANK_COUNT_ALIASES = {"n_ranks", "nranks", "cluster_ranks", "procs", "nprocs"}


def rank_count_aliases(path: Path, text: str | None = None) -> list[str]:
    """``module:line function(parameter)`` for each public function or method (no
    underscore in its name or in the names it sits in; ``__init__`` of a public class
    counts) with a parameter named as in :data:`RANK_COUNT_ALIASES`."""
    tree = ast.parse(path.read_text() if text is None else text)
    found = []

    def walk(node: ast.AST, where: str, public: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                walk(child, f"{where}{child.name}.", public and not child.name.startswith("_"))
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                mine = public and (not child.name.startswith("_") or child.name == "__init__")
                a = child.args
                params = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
                params += [p.arg for p in (a.vararg, a.kwarg) if p is not None]
                if mine:
                    found.extend(f"{module_name(path)}:{child.lineno} {where}{child.name}({p})"
                                 for p in params if p in RANK_COUNT_ALIASES)
                walk(child, f"{where}{child.name}.", mine)

    walk(tree, "", True)
    return found


def test_the_rank_count_is_called_ranks_in_the_public_api():
    stubs = sorted(PKG.rglob("*.pyi"))
    bad = [hit for path in SOURCES + stubs for hit in rank_count_aliases(path)]
    assert bad == [], "rename the rank count `ranks` (issue 25)"


def test_the_rank_count_check_sees_each_alias_and_leaves_private_ones():
    text = ("def start(nranks): ...\n"
            "class Pool:\n"
            "    def __init__(self, procs): ...\n"
            "    def call(self, *, cluster_ranks=4): ...\n"
            "    def _request(self, nranks): ...\n"
            "def _pool(n_ranks): ...\n"
            "class _Hidden:\n"
            "    def run(self, nprocs): ...\n"
            "def run(func, ranks, measuring_ranks=2): ...\n")
    got = rank_count_aliases(PKG / "demo.py", text)
    assert [g.split(" ", 1)[1] for g in got] == [
        "start(nranks)", "Pool.__init__(procs)", "Pool.call(cluster_ranks)"]


LABS = sorted((PKG.parent / "labs").glob("lab*/lab*.ipynb"))


def grading_modules(code: str) -> set[str]:
    """The submodules of mpilab.grading that `code` imports (names the package exports,
    such as ``run_on_ranks``, are not modules)."""
    found = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom) and node.module == "mpilab.grading":
            found |= {a.name for a in node.names if (PKG / "grading" / f"{a.name}.py").exists()}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mpilab.grading."):
            found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[2] for a in node.names
                      if a.name.startswith("mpilab.grading.")}
    return found


def notebook_code(path: Path) -> str:
    import json

    cells = json.loads(path.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code"
                     and not "".join(c["source"]).lstrip().startswith("%"))


@pytest.mark.parametrize("path", LABS, ids=lambda p: p.parent.name)
def test_each_lab_imports_one_checks_module(path):
    """A lab's cells (its hidden tests too) import one checks module of mpilab.grading,
    besides the names the package itself exports: where a lab's checks live is one file."""
    used = grading_modules(notebook_code(path))
    assert len(used) <= 1, f"{path.name} imports mpilab.grading's {sorted(used)}"


def test_the_checks_module_count_sees_each_spelling():
    code = ("from mpilab.grading import network as N, run_on_ranks\n"
            "from mpilab.grading.hierarchy import check_bcast_crossings\n"
            "import mpilab.grading.simulated as S\n")
    assert grading_modules(code) == {"network", "hierarchy", "simulated"}
    assert len(LABS) >= 8
