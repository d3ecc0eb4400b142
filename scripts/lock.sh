#!/usr/bin/env bash
# constraints.txt <- one set of versions that installs on every Python the course supports.
#
#   scripts/lock.sh            (make lock)
#
# uv resolves the test environment (pyproject.toml's dependencies with the test and classroom extras, plus
# pip, wheel and the PyPI MPI wheels) once for all supported Pythons (--universal, from the
# oldest that pyproject.toml's requires-python names: Debian 12's 3.11.2) and keeps every
# version already in constraints.txt that still fits, so a lock moves only what it must.
# A package that would need two versions for two Pythons is resolved again without its old
# pin: each package gets one version, the one the suite ran with on every Python.
# Lines with a marker (`; sys_platform == 'win32'`) are for other platforms' Pythons.
# After a lock: `make test` here, then in the stock roots (scripts/stock-root.sh bookworm
# and trixie) before committing it.
set -euo pipefail
cd "$(dirname "$0")/.."
UV_VERSION=0.13.8
uv=.venv/alt/uv/bin/uv
if [[ ! -x $uv ]]; then
  python3 -m venv .venv/alt/uv
  .venv/alt/uv/bin/pip install -q "uv==$UV_VERSION"
fi
oldest=$(python3 - <<'PY'
import re, tomllib
spec = tomllib.load(open("pyproject.toml", "rb"))["project"]["requires-python"]
m = re.fullmatch(r"\s*>=\s*(\d+\.\d+(?:\.\d+)?)\s*", spec)
if not m:
    raise SystemExit(f"lock: requires-python must be '>=X.Y[.Z]', got {spec!r}")
print(m.group(1))
PY
)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'pip\nwheel\nopenmpi\nmpich\n' > "$tmp/tools.in"
# The current pins are uv's preferences (it reads them from the output file).
grep -vE '^\s*(#|$)' constraints.txt > "$tmp/lock.txt" || true
for attempt in 1 2 3 4; do
  "$uv" pip compile pyproject.toml "$tmp/tools.in" --extra test --extra classroom --universal \
    --python-version "$oldest" --fork-strategy fewest --allow-unsafe \
    --no-header --no-annotate --quiet -o "$tmp/lock.txt"
  forked=$(sed -E 's/[ ;].*//; s/==.*//' "$tmp/lock.txt" | sort | uniq -d)
  [[ -z $forked ]] && break
  echo "lock: one version for every Python: resolving again without the old pins of:" $forked
  for name in $forked; do sed -i -E "/^${name}==/d" "$tmp/lock.txt"; done
done
[[ -z $forked ]] || { echo "lock: still two versions of: $forked" >&2; exit 1; }
{
  sed -n '/^#/p;/^#/!q' constraints.txt
  cat "$tmp/lock.txt"
} > constraints.txt.new
mv constraints.txt.new constraints.txt
changed=$(git diff --numstat constraints.txt | awk '{print $1}')
echo "lock: constraints.txt for Python >= $oldest (${changed:-0} line(s) changed; git diff constraints.txt)"
