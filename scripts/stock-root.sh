#!/usr/bin/env bash
# Run the course in a stock Debian root, as a new server would have it (root needed).
#
#   scripts/stock-root.sh bookworm|trixie [command ...]      (default: the quick check)
#
# A Debian 12 (bookworm) or 13 (trixie) root made by debootstrap with only what a new
# server has plus what the README asks for (minbase + python3, python3-venv, python3-dev,
# gcc, g++, make, git, ca-certificates): the distribution's own python3 is the only Python
# on PATH and nothing of this machine's set-up is visible. The course is copied in (the
# tracked and new files of this tree, no .venv, no build outputs) to /root/mpilab, where an
# instructor who clones as root gets it, and the command runs there as root.
#
# The default command is the README's set-up (`make setup-test`), then two quick tests:
# lecture 00 executed and lab 00's correct submission graded through nbgrader. Anything
# else is run as given, e.g. `scripts/stock-root.sh trixie make test`.
#
# Every run starts from the pristine root: the run's changes go to an overlay that is
# thrown away, in a mount and PID namespace of its own, so every mount and every process
# it started ends with it. The pristine roots and the downloaded .deb and wheel files are
# kept in $MPILAB_STOCK_ROOTS (default /var/cache/mpilab/stock-roots) for the next run;
# a machine without them makes them (debootstrap, about 2 minutes each).
# MPILAB_STOCK_KEEP=1 keeps the run's overlay (its path is printed) to look at afterwards;
# MPILAB_STOCK_RUN=<that path> runs a command on it again, this tree's files copied in
# (a path that does not exist yet: a new run, kept there; .ci/run sets both roots up
# side by side that way, then tests them one at a time).
# One block, read whole before it runs: editing this file during a run cannot change it.
{
set -euo pipefail
cd "$(dirname "$0")/.."
SUITE="${1:?usage: scripts/stock-root.sh bookworm|trixie [command ...]}"
shift
case "$SUITE" in bookworm|trixie) ;; *) echo "stock-root: bookworm or trixie, got '$SUITE'" >&2; exit 2 ;; esac
[[ "$(id -u)" == 0 ]] || { echo "stock-root: needs root (debootstrap, namespaces, mounts)" >&2; exit 2; }

say() { printf 'stock-root (%s): %s\n' "$SUITE" "$*"; }
STORE="${MPILAB_STOCK_ROOTS:-/var/cache/mpilab/stock-roots}"
BASE="$STORE/$SUITE/base"
CACHE="$STORE/$SUITE/cache"
INCLUDE=python3,python3-venv,python3-dev,gcc,g++,make,git,ca-certificates

# The Debian mirror this machine's apt uses (deb822 or one-line sources), else Debian's.
mirror() {
  local uri
  uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [[ -n $uri ]] || uri=$(awk '$1 == "deb" && $2 ~ /^http/ && $2 !~ /security/ {print $2; exit}' \
                          /etc/apt/sources.list 2>/dev/null || true)
  echo "${uri:-http://deb.debian.org/debian}"
}

# apt-get on this machine, one at a time: the stock roots' set-ups and the tree's own run
# side by side in CI, and on a fresh machine two of them installing at once failed on
# dpkg's lock ("Could not get lock /var/lib/dpkg/lock-frontend"). flock queues the
# course's own calls, DPkg::Lock::Timeout waits for anyone else's.
apt_get() {
  if command -v flock >/dev/null; then
    flock -w 1800 /var/cache/apt/mpilab.lock apt-get -o DPkg::Lock::Timeout=900 "$@"
  else
    apt-get -o DPkg::Lock::Timeout=900 "$@"
  fi
}

# --- the pristine root, made once ------------------------------------------------------
if [[ ! -f $BASE/.mpilab-stock-root ]]; then
  command -v debootstrap >/dev/null || {
    say "installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt_get install -y -qq debootstrap >/dev/null \
      || { apt_get update -qq && DEBIAN_FRONTEND=noninteractive apt_get install -y -qq debootstrap >/dev/null; }
  }
  say "debootstrap --variant=minbase --include=$INCLUDE $SUITE from $(mirror)"
  rm -rf "$BASE"
  mkdir -p "$BASE"
  debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$BASE" "$(mirror)" \
    > "$STORE/$SUITE/debootstrap.log" 2>&1 \
    || { tail -n 20 "$STORE/$SUITE/debootstrap.log" >&2; exit 1; }
  # The machine's own certificate authorities (a proxy's, a site's): part of the
  # machine, not of the course, as on any server that reaches the package registries.
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$BASE/usr/local/share/ca-certificates/"
    chroot "$BASE" update-ca-certificates >/dev/null
  fi
  rm -rf "$BASE/var/cache/apt/archives"/*.deb
  echo "$SUITE $(date -u +%FT%TZ) $(chroot "$BASE" python3 --version)" > "$BASE/.mpilab-stock-root"
fi
mkdir -p "$CACHE/apt" "$CACHE/pip"

# --- one run: an overlay over the pristine root, in namespaces of its own ---------------
if [[ -n "${MPILAB_STOCK_RUN:-}" && -d "${MPILAB_STOCK_RUN}/upper/root/mpilab" ]]; then
  # a kept run again (a second command on one set-up): this tree's files are copied over
  # it, their times kept, so make rebuilds only what changed since
  RUN=$MPILAB_STOCK_RUN
  git ls-files -z --cached --others --exclude-standard \
    | xargs -0 -r cp -p --parents -t "$RUN/upper/root/mpilab"
  MPILAB_STOCK_KEEP=1
else
  if [[ -n "${MPILAB_STOCK_RUN:-}" ]]; then  # a new run to keep, where asked
    RUN=$MPILAB_STOCK_RUN
    MPILAB_STOCK_KEEP=1
    mkdir -p "$RUN"
  else
    RUN=$(mktemp -d "$STORE/$SUITE/run.XXXXXX")
  fi
  mkdir -p "$RUN/upper/root"
  # The course, cloned as an instructor would, with this tree's uncommitted changes on
  # top (none in CI, which runs on a clean clone).
  git clone -q --no-hardlinks "$PWD" "$RUN/upper/root/mpilab"
  git ls-files -z --modified --others --exclude-standard \
    | xargs -0 -r cp --parents -t "$RUN/upper/root/mpilab"
  git ls-files -z --deleted | (cd "$RUN/upper/root/mpilab" && xargs -0 -r rm -f)
fi
cleanup() {
  if [[ "${MPILAB_STOCK_KEEP:-0}" == 1 ]]; then
    say "kept the run (MPILAB_STOCK_RUN=$RUN runs on it again)"
  else
    rm -rf "$RUN"
  fi
}
trap cleanup EXIT
mkdir -p "$RUN/work" "$RUN/root"
# What Debian's installer writes and debootstrap does not: the machine's name in
# /etc/hosts. Without it every lookup of the host's own name (Open MPI's launcher makes
# several) waits for DNS to give up, 5 s a job here.
mkdir -p "$RUN/upper/etc"
cp /etc/resolv.conf "$RUN/upper/etc/resolv.conf"
hostname > "$RUN/upper/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' \
  "$(hostname)" > "$RUN/upper/etc/hosts"

if [[ $# -eq 0 ]]; then
  set -- bash -c 'make setup-test && .venv/bin/python -m pytest -q -p no:cacheprovider \
    "tests/test_lectures.py::test_lecture_runs_cleanly[00-mpi-in-a-notebook]" \
    tests/test_labs.py::test_lab00_correct_gets_full_marks'
fi
printf -v CMD '%q ' "$@"
say "$(cat "$BASE/.mpilab-stock-root"); running: $*"

# Inside new mount and PID namespaces: the overlay, /proc, /sys, /dev and the caches are
# mounted there only, and when the command ends the namespace's init goes and takes every
# process of the run with it (no engine, mpiexec or daemon outlives it).
export BASE RUN CACHE CMD
unshare --mount --pid --fork --propagation private bash -euo pipefail -c '
  R=$RUN/root
  mount -t overlay overlay -o "lowerdir=$BASE,upperdir=$RUN/upper,workdir=$RUN/work" "$R"
  mount -t proc proc "$R/proc"
  mount --rbind /sys "$R/sys"
  mount --rbind /dev "$R/dev"
  # a /dev/shm of its own, as large as the machine gives one
  shm=$(df -k --output=size /dev/shm | tail -n 1 | tr -d " ")
  mount -t tmpfs -o "size=${shm}k,mode=1777" tmpfs "$R/dev/shm"
  mount -t tmpfs -o mode=755 tmpfs "$R/run"
  mkdir -p "$R/var/cache/apt/archives" "$R/root/.cache/pip"
  mount --bind "$CACHE/apt" "$R/var/cache/apt/archives"
  mount --bind "$CACHE/pip" "$R/root/.cache/pip"
  # The root becomes the namespace'"'"'s own root (pivot_root), not a chroot inside the
  # machine'"'"'s: Linux refuses a user namespace to a chrooted process, and the sandbox
  # (bubblewrap as an unprivileged user: an instructor grading on a class server) needs one.
  mkdir -p "$R/.oldroot"
  cd "$R"
  pivot_root . .oldroot
  umount -l /.oldroot
  rmdir /.oldroot
  exec /usr/bin/env -i HOME=/root USER=root LOGNAME=root LANG=C.UTF-8 \
    TERM=dumb CI="${CI:-}" PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    bash -c "cd /root/mpilab && $CMD"
'
exit
}
