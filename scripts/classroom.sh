#!/usr/bin/env bash
# A class on this server: JupyterHub, the class's Unix accounts, nbgrader's exchange.
#
#   scripts/classroom.sh start ROSTER   accounts for the roster's logins (new ones only),
#                                       the class's environment, the exchange, then the hub
#   scripts/classroom.sh add ROSTER     accounts for more students (the hub keeps running)
#   scripts/classroom.sh stop           the hub, every user's server and every process of
#                                       the class's accounts and cgroups; nothing of it left
#   scripts/classroom.sh remove         stop, then delete the accounts (and their homes),
#                                       the groups and the state folder (exchange included)
#   scripts/classroom.sh status         is the hub up, and the class's accounts
#   scripts/classroom.sh venv           only the class's Python environment (start makes it)
#
# ROSTER: one login per line; the instructor's line says so in a second word
# (`teacher instructor`); `#` starts a comment. A login that exists already and is not
# the class's is refused. Each new account gets a home (rwx------), a random password
# and membership of mpilab-students or mpilab-instructors (with MPILAB_CLASSROOM_GROUPS=x:
# x-students, x-instructors, for a second class on this machine); the passwords go to
# $STATE/passwords (root's alone: rw-------) for the instructor to hand out. The
# instructor also gets a copy of this course (the instructors' edition: solutions,
# hidden tests) in ~/mpilab, where their JupyterLab and formgrader open; each student a
# copy of the students' edition (lectures, released labs, reference data) in ~/mpilab.
#
# State, all under $MPILAB_CLASSROOM_DIR (default /srv/mpilab), root-owned:
#   venv/       the class's Python (Debian's python3; the course and JupyterHub at the
#               versions of constraints.txt): the hub and every user's server run it,
#               since students cannot run the checkout's .venv nor read the checkout
#   exchange/   nbgrader's exchange (see `exchange` below for who may do what there)
#   jupyter/    the students' JupyterLab configuration (jupyter/student + classroom/student)
#   hub/        the hub's database, cookie secret, pid files and log (hub.log)
#   venv/share/mpilab/student-edition/  what each new student's ~/mpilab is copied from
#   accounts    the class's logins and roles; passwords: their passwords
#
# Limits: each user's server and all it starts run in a cgroup of its own,
# <cgroup mount>/$(basename $STATE)/<login> (v2, or v1's cpu, memory and pids hierarchies),
# on a /dev/shm of its own (mpilab.autograder.limits). Set before `start`, in one place:
#   MPILAB_CLASSROOM_CPUS  CPUs' worth of time (default 2)  MPILAB_CLASSROOM_PIDS  tasks (1024)
#   MPILAB_CLASSROOM_MEM   memory, no swap (2G)             MPILAB_CLASSROOM_SHM   /dev/shm (512M)
# `none` turns one off. `start` tries them before anything else and refuses (2) where
# they cannot be set. While an instructor's grading measures, the servers are frozen
# (MPILAB_CLASSROOM_GRADER=freeze, the default; weight or off), for at most
# MPILAB_CLASSROOM_FREEZE_MAX seconds (30; mpilab.autograder.reserve).
#
# Root on Debian/Ubuntu only (accounts, PAM, ports); the proxy is Debian's
# node-configurable-http-proxy (scripts/setup.sh --classroom installs it). No systemd:
# the hub is started here and runs each user's server as that user.
#
# Exit status: 0 done; 1 a failure (the hub's log is printed); 2 this cannot run here
# (not root, no useradd, no proxy, a login that is not the class's), with the reason on
# stderr; `status`: 3 when the hub is not running.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

STATE=${MPILAB_CLASSROOM_DIR:-/srv/mpilab}
PORT=${MPILAB_CLASSROOM_PORT:-8000}
TIMEOUT=${MPILAB_CLASSROOM_TIMEOUT:-60}  # seconds for the hub to answer, or to stop
# the class's Unix groups (one prefix per class where several share this machine)
STUDENTS=${MPILAB_CLASSROOM_GROUPS:-mpilab}-students
INSTRUCTORS=${MPILAB_CLASSROOM_GROUPS:-mpilab}-instructors
# the class's Python; another folder (MPILAB_CLASSROOM_VENV) outlives `remove`
VENV=${MPILAB_CLASSROOM_VENV:-$STATE/venv}
HUB=$STATE/hub
# the students' edition beside the class's Python: built once per version of the course
# (classes and test runs that share a venv share it)
EDITION=$VENV/share/mpilab/student-edition
EXCHANGE=$STATE/exchange
KLASS=$(basename "$STATE")  # the class's cgroups: <mount>/$KLASS/<login>
COURSE_ID=$(sed -nE 's/^c\.CourseDirectory\.course_id = "([^"]+)".*/\1/p' \
            autograder/nbgrader_config.py)

say() { printf 'classroom: %s\n' "$*"; }
cannot() { echo "classroom: $*" >&2; exit 2; }
fail() {
  echo "classroom: $*" >&2
  [[ -f $HUB/hub.log ]] && { echo "--- last lines of $HUB/hub.log" >&2; tail -n 30 "$HUB/hub.log" >&2; }
  exit 1
}

# 'remove' deletes $STATE: it must be a folder of its own.
[[ $STATE == /?* && $(basename "$STATE") == *mpilab* ]] ||
  cannot "MPILAB_CLASSROOM_DIR must be an absolute path whose last part names mpilab, not $STATE"
[[ -n $COURSE_ID ]] || cannot "no course id in autograder/nbgrader_config.py"
[[ $STUDENTS =~ ^[a-z_][a-z0-9_-]{0,19}-students$ ]] ||
  cannot "MPILAB_CLASSROOM_GROUPS: at most 20 letters, digits, _ or -, not '${STUDENTS%-students}'"

need_root() {
  [[ $(id -u) == 0 ]] || cannot "run as root (it creates accounts and starts the hub)"
  command -v useradd >/dev/null && command -v chpasswd >/dev/null ||
    cannot "no useradd/chpasswd (Debian's passwd package)"
}

# --- accounts --------------------------------------------------------------------------------
in_group() { id -nG "$1" 2>/dev/null | tr ' ' '\n' | grep -qx "$2"; }
ours() { in_group "$1" "$STUDENTS" || in_group "$1" "$INSTRUCTORS"; }
accounts() { [[ -f $STATE/accounts ]] && awk 'NF {print $1}' "$STATE/accounts" || true; }

read_roster() {  # read_roster FILE: "login role" lines, checked
  local file=$1 line login role rest n=0
  [[ -f $file ]] || cannot "no roster file '$file' (one login per line; 'name instructor')"
  while IFS= read -r line || [[ -n $line ]]; do
    n=$((n + 1))
    line=${line%%#*}
    read -r login role rest <<< "$line" || true
    [[ -z ${login:-} ]] && continue
    [[ $login =~ ^[a-z_][a-z0-9_-]{0,31}$ ]] ||
      cannot "$file:$n: '$login' is not a login (lower case letters, digits, _ and -)"
    [[ ${role:-student} == student || $role == instructor ]] ||
      cannot "$file:$n: role must be 'instructor' or nothing, not '$role'"
    [[ -z ${rest:-} ]] || cannot "$file:$n: one login (and a role) per line"
    echo "$login ${role:-student}"
  done < "$file"
}

make_accounts() {  # make_accounts ROSTER
  local entries login role group password home
  entries=$(read_roster "$1")
  [[ -n $entries ]] || cannot "roster '$1' names nobody"
  while read -r login role; do  # every refusal before anything is made
    if id "$login" >/dev/null 2>&1 && ! ours "$login"; then
      cannot "'$login' is an account of this machine, not the class's: pick another login"
    fi
  done <<< "$entries"
  getent group "$STUDENTS" >/dev/null || groupadd "$STUDENTS"
  getent group "$INSTRUCTORS" >/dev/null || groupadd "$INSTRUCTORS"
  install -d -m 755 "$STATE"
  touch "$STATE/accounts" "$STATE/passwords"
  chmod 644 "$STATE/accounts"
  chmod 600 "$STATE/passwords"
  while read -r login role; do
    group=$([[ $role == instructor ]] && echo "$INSTRUCTORS" || echo "$STUDENTS")
    if id "$login" >/dev/null 2>&1; then
      in_group "$login" "$group" || usermod -a -G "$group" "$login"
    else
      useradd --create-home --shell /bin/bash --groups "$group" "$login"
      password=$(head -c 12 /dev/urandom | base64 | tr '+/' '-_')
      echo "$login:$password" | chpasswd
      printf '%s %s %s\n' "$login" "$password" "$role" >> "$STATE/passwords"
      say "account $login ($role) made; password in $STATE/passwords"
    fi
    home=$(getent passwd "$login" | cut -d: -f6)
    chmod 700 "$home"  # useradd's default (Debian: umask 022) lets everyone read it
    grep -q "^$login " "$STATE/accounts" || echo "$login $role" >> "$STATE/accounts"
    if [[ $role == instructor && ! -d $home/mpilab ]]; then
      # the instructors' edition, for the formgrader and nbgrader's commands
      git clone -q --depth 1 "file://$ROOT" "$home/mpilab"
      chown -R "$login:" "$home/mpilab"
    fi
  done <<< "$entries"
}

# --- the class's Python ---------------------------------------------------------------------
make_venv() {
  local want have lock src
  # what decides it: the pins, and the package's tracked files as they are now
  want="$({ cat pyproject.toml constraints.txt; git ls-files -z mpilab kernels setup.py |
            xargs -0 cat; } | sha1sum | cut -c1-12)-${MPILAB_KERNELS:-all}"
  # One install into a venv at a time: a second `start` (another class sharing the venv,
  # a test beside it) waits here, then finds the stamp and returns.
  mkdir -p "$(dirname "$VENV")"
  exec {lock}> "$VENV.lock"
  flock "$lock"
  have=$(cat "$VENV/.mpilab-classroom" 2>/dev/null || true)
  if [[ $want == "$have" ]]; then exec {lock}>&-; return 0; fi
  say "installing the class's Python environment into $VENV (a few minutes)"
  [[ -x $VENV/bin/python ]] || /usr/bin/python3 -m venv "$VENV" ||
    cannot "/usr/bin/python3 -m venv failed (Debian: apt-get install python3-venv)"
  local pip=("$VENV/bin/python" -m pip install -q -c constraints.txt)
  "${pip[@]}" pip "setuptools>=77" wheel "cython>=3.0" "mpi4py>=4.0" "numpy>=1.26"
  # Not editable: the package is copied into the environment, the checkout stays private.
  # Built from a private copy of the tracked files as they are now: pip builds a folder
  # in place, and two builds in one checkout's build/ collide ("File exists").
  src=$(mktemp -d /var/tmp/mpilab-classroom-src.XXXXXX)
  git ls-files -z | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$src"
  "${pip[@]}" --no-build-isolation "$src[classroom]" || { rm -rf "$src"; exit 1; }
  rm -rf "$src"
  install -D -m 644 binder/overrides.json "$VENV/share/jupyter/lab/settings/overrides.json"
  echo "$want" > "$VENV/.mpilab-classroom"
  exec {lock}>&-
}

# --- the students' edition -----------------------------------------------------------------
# What each student gets in their home: the course a student may see (lectures, the labs as
# released, reference data; no solution, hidden test or hidden case: mpilab.autograder.edition
# writes it and scans it), built once per version of the course into $EDITION, then
# copied to ~/mpilab of every student who has none yet (their own copy, to run and change;
# labs are fetched and submitted through the Assignment List as before).
make_edition() {
  local want have lock
  want="$({ git ls-files -z lectures labs reference binder README.md mpilab | xargs -0 cat; } |
          sha1sum | cut -c1-12)"
  mkdir -p "$(dirname "$EDITION")"
  exec {lock}> "$EDITION.lock"  # one build at a time; the others find it done
  flock "$lock"
  have=$(cat "$EDITION/.mpilab-edition" 2>/dev/null || true)
  if [[ $want == "$have" ]]; then exec {lock}>&-; return 0; fi
  say "writing the students' edition of the course into $EDITION"
  PATH="$VENV/bin:$PATH" "$VENV/bin/python" -m mpilab.autograder.edition "$EDITION" --force \
    > "$EDITION.log" 2>&1 || { cat "$EDITION.log" >&2; fail "the students' edition failed"; }
  echo "$want" > "$EDITION/.mpilab-edition"
  chmod -R go-w "$EDITION"
  exec {lock}>&-
}

give_students_the_course() {
  local login role home
  while read -r login role; do
    [[ $role == student ]] || continue
    home=$(getent passwd "$login" | cut -d: -f6)
    [[ -n $home && ! -e $home/mpilab ]] || continue
    cp -a "$EDITION" "$home/mpilab"
    rm -f "$home/mpilab/.mpilab-edition"
    chown -R "$login:" "$home/mpilab"
  done < "$STATE/accounts"
}

# --- nbgrader's exchange --------------------------------------------------------------------
# Root owns every folder. Instructors (group) write the course's folders; students may
#   outbound  r-x  read released assignments          (rwxrwsr-x)
#   inbound   -wx  drop a submission, never list one  (rwxrws-wt: sticky, no renaming others')
#   feedback  --x  open their own file by its name    (rwxrws--x)
# and each submission and feedback file is its student's alone (mpilab.autograder.exchange).
make_exchange() {
  install -d -m 755 -o root -g root "$EXCHANGE"
  install -d -m 2775 -o root -g "$INSTRUCTORS" "$EXCHANGE/$COURSE_ID" "$EXCHANGE/$COURSE_ID/outbound"
  install -d -m 3773 -o root -g "$INSTRUCTORS" "$EXCHANGE/$COURSE_ID/inbound"
  install -d -m 2771 -o root -g "$INSTRUCTORS" "$EXCHANGE/$COURSE_ID/feedback"
  # install -d leaves the modes of folders that exist: set them again
  chmod 755 "$EXCHANGE"
  chmod 2775 "$EXCHANGE/$COURSE_ID" "$EXCHANGE/$COURSE_ID/outbound"
  chmod 3773 "$EXCHANGE/$COURSE_ID/inbound"
  chmod 2771 "$EXCHANGE/$COURSE_ID/feedback"
  mkdir -p "$VENV/etc/jupyter"
  # The exchange: what the user's server says ($MPILAB_EXCHANGE, set by the hub for every
  # server, so its terminals and kernels have it too), else this class's. Two classes that
  # share a venv (MPILAB_CLASSROOM_VENV) each keep their own exchange that way.
  # Written under a name of its own, then renamed into place: two classes starting at once
  # into one venv each rename a whole file (a shared ".new" name was moved away under one).
  local cfg
  cfg=$(mktemp "$VENV/etc/jupyter/.nbgrader_config.py.XXXXXX")
  { cat classroom/nbgrader_config.py
    printf 'c.CourseDirectory.course_id = "%s"\n' "$COURSE_ID"
    printf 'c.Exchange.root = __import__("os").environ.get("MPILAB_EXCHANGE") or "%s"\n' "$EXCHANGE"
  } > "$cfg"
  chmod 644 "$cfg"
  mv -f "$cfg" "$VENV/etc/jupyter/nbgrader_config.py"
}

make_jupyter_config() {  # copies: students read these, not the checkout
  rm -rf "$STATE/jupyter.new"
  mkdir -p "$STATE/jupyter.new"
  cp -r jupyter/student "$STATE/jupyter.new/student"
  cp -r classroom/student "$STATE/jupyter.new/classroom-student"
  chmod -R a+rX,go-w "$STATE/jupyter.new"
  rm -rf "$STATE/jupyter"
  mv "$STATE/jupyter.new" "$STATE/jupyter"
}

# --- the users' limits -----------------------------------------------------------------------
check_limits() {  # the MPILAB_CLASSROOM_* limits parse and can be set here (a group made, ended)
  local said
  # the checkout's module on Debian's python3: before the class's Python exists
  said=$(PYTHONPATH=$ROOT /usr/bin/python3 -m mpilab.autograder.limits check "$KLASS" 2>&1) ||
    cannot "${said#limits: }"
  say "${said#limits: }"
}

end_groups() {  # whatever is still in a cgroup of the class is killed, the folders go
  PYTHONPATH=$ROOT /usr/bin/python3 -m mpilab.autograder.limits end "$KLASS" ||
    fail "processes left in the class's cgroups ($KLASS)"
}

# --- the hub ----------------------------------------------------------------------------------
hub_pid() {  # the pid we started, or the one the hub wrote itself
  local f p
  for f in "$HUB/hub.pid" "$HUB/jupyterhub.pid"; do
    p=$(cat "$f" 2>/dev/null) && [[ -n $p ]] && kill -0 "$p" 2>/dev/null && { echo "$p"; return 0; }
  done
  return 1
}

hub_answers() {
  "$VENV/bin/python" - "$PORT" <<'PY' >/dev/null 2>&1
import sys, urllib.request
urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/hub/api", timeout=2).read()
PY
}

start_hub() {
  if hub_pid >/dev/null; then say "the hub runs already (pid $(hub_pid)), port $PORT"; return 0; fi
  # Debian's proxy finds its modules in /usr/share/nodejs, which a node from elsewhere
  # (NodeSource's) does not search by itself; the hub passes its environment on
  export NODE_PATH=/usr/share/nodejs${NODE_PATH:+:$NODE_PATH}
  configurable-http-proxy --version >/dev/null 2>&1 ||
    cannot "no working configurable-http-proxy (apt-get install node-configurable-http-proxy; make classroom does)"
  install -d -m 700 "$HUB"
  # its own session: the hub and what it starts outlive this shell, and stop with `stop`
  ( cd "$HUB" || exit 1
    MPILAB_CLASSROOM_DIR=$STATE MPILAB_CLASSROOM_PORT=$PORT MPILAB_CLASSROOM_VENV=$VENV \
      MPILAB_CLASSROOM_GROUPS=${STUDENTS%-students} \
      setsid "$VENV/bin/jupyterhub" -f "$ROOT/classroom/jupyterhub_config.py" \
      >> "$HUB/hub.log" 2>&1 < /dev/null &
    echo $! > "$HUB/hub.pid" )
  local waited=0
  until hub_answers; do
    hub_pid >/dev/null || fail "the hub exited"
    (( waited++ < TIMEOUT )) || fail "the hub did not answer on port $PORT in ${TIMEOUT} s"
    sleep 1
  done
  say "the hub runs (pid $(hub_pid)): http://$(hostname -f 2>/dev/null || hostname):$PORT/"
}

stop_pid() {  # stop_pid PID: SIGTERM, then SIGKILL after $TIMEOUT s
  local pid=$1 waited=0
  kill -TERM "$pid" 2>/dev/null || return 0
  while kill -0 "$pid" 2>/dev/null; do
    (( waited++ < TIMEOUT )) || { kill -KILL "$pid" 2>/dev/null || true; sleep 1; return 0; }
    sleep 1
  done
}

stop_all() {
  local pid login
  # the hub stops every user's server, then the proxy (cleanup_servers, cleanup_proxy)
  if pid=$(hub_pid); then say "stopping the hub (pid $pid) and the users' servers"; stop_pid "$pid"; fi
  pid=$(cat "$HUB/proxy.pid" 2>/dev/null || true)
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null && stop_pid "$pid"
  rm -f "$HUB/hub.pid" "$HUB/proxy.pid" "$HUB/jupyterhub.pid"
  # what the users' servers left: kernels, engines, mpiexec started in sessions of their own
  for login in $(accounts); do
    ours "$login" || continue
    pkill -TERM -u "$login" 2>/dev/null || true
  done
  sleep 1
  for login in $(accounts); do
    ours "$login" || continue
    pkill -KILL -u "$login" 2>/dev/null || true
  done
  end_groups
  say "stopped: no hub, proxy or process of the class's accounts left"
}

remove_all() {
  local login
  stop_all
  for login in $(accounts); do
    ours "$login" || continue
    # what the account left in the shared temporary folders (its grading folder
    # mpilab-grading-<uid>, Open MPI's session folder): a later account given the same
    # uid would find it as its own (userdel --remove takes only the home and the mail)
    find /tmp /var/tmp -mindepth 1 -maxdepth 1 -user "$login" -exec rm -rf {} + 2>/dev/null || true
    userdel --remove "$login" 2>/dev/null || userdel "$login"
    say "account $login removed"
  done
  # the groups go with their last member: another class on this machine (another state
  # folder) may share them, and its accounts would stop being the class's
  local group
  for group in "$STUDENTS" "$INSTRUCTORS"; do
    if getent group "$group" >/dev/null; then
      if [[ -z $(getent group "$group" | cut -d: -f4) ]]; then groupdel "$group"
      else say "group $group kept: $(getent group "$group" | cut -d: -f4) still in it"; fi
    fi
  done
  rm -rf "$STATE"
  say "removed $STATE"
}

case "${1:-}" in
  start)
    need_root
    [[ -n ${2:-} ]] || cannot "usage: $0 start ROSTER"
    check_limits
    make_accounts "$2"
    make_venv
    make_edition
    give_students_the_course
    make_exchange
    make_jupyter_config
    start_hub
    ;;
  venv) need_root; make_venv ;;  # ahead of the class: the few minutes it takes
  add)
    need_root
    [[ -n ${2:-} ]] || cannot "usage: $0 add ROSTER"
    make_accounts "$2"
    make_venv  # both return at once when the class's are current
    make_edition
    give_students_the_course
    ;;
  stop) need_root; stop_all ;;
  remove) need_root; remove_all ;;
  status)
    if pid=$(hub_pid); then say "the hub runs (pid $pid), port $PORT"; else say "the hub is not running"; fi
    [[ -f $STATE/accounts ]] && { say "accounts:"; cat "$STATE/accounts"; }
    [[ -n ${pid:-} ]] || exit 3
    ;;
  *) echo "usage: $0 start ROSTER | add ROSTER | stop | remove | status | venv" >&2; exit 2 ;;
esac
