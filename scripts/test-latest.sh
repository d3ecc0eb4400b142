#!/usr/bin/env bash
# The test suite on the newest releases of every Python dependency, on purpose and apart.
#
#   scripts/test-latest.sh [pytest arguments]     (make test-latest)
#
# A copy of the tree (tracked and new files, not .venv or build outputs) goes to .latest/,
# gets its own .venv with the newest releases (MPILAB_LATEST=1: no constraints.txt) and its
# own kernels, and runs the tests there, so the locked environment in .venv is untouched.
# It prints which packages differ from constraints.txt, then what pytest says. When the
# newest releases pass, `make lock` in a .venv set up the same way records them.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.latest
rm -rf "$dest"
mkdir -p "$dest"
git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$dest"
cd "$dest"
MPILAB_LATEST=1 scripts/setup.sh --test
MPILAB_LATEST=1 make --no-print-directory kernels
echo "== packages newer (or older) than constraints.txt =="
.venv/bin/python - <<'PY'
import subprocess, sys
from packaging.utils import canonicalize_name as canon
locked = {canon(name): version.strip() for name, version in
          (l.split(";", 1)[0].split("==", 1) for l in open("constraints.txt")
           if "==" in l and not l.startswith("#"))}
now = subprocess.run([sys.executable, "-m", "pip", "freeze", "--all", "--exclude-editable"],
                     capture_output=True, text=True, check=True).stdout
changed = 0
for line in sorted(now.splitlines(), key=str.lower):
    if "==" not in line:
        continue
    name, version = line.split("==", 1)
    if locked.get(canon(name)) != version:
        changed += 1
        print(f"  {name:28} {locked.get(canon(name), '(not locked)'):>14} -> {version}")
print(f"  {changed} package(s) differ from the lock")
PY
echo "== tests on the newest releases =="
if [[ $# -eq 0 ]]; then set -- -q -m "not browser" --durations=10; fi
exec .venv/bin/python -m pytest "$@"
