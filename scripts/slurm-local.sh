#!/usr/bin/env bash
# A one-host Slurm cluster for trying and testing mpilab's launcher="slurm" path.
#
#   scripts/slurm-local.sh start    install Debian's slurm-wlm and munge if missing, write a
#                                   slurm.conf for this host, start munged, slurmctld and
#                                   slurmd, and wait until the node is idle
#   scripts/slurm-local.sh stop     cancel every job, stop the daemons, remove their state
#   scripts/slurm-local.sh status   are the daemons up, and what sinfo says
#
# Root only (it installs packages and starts daemons). No systemd is needed: the daemons
# are started here, each with its pid, log and state under $MPILAB_SLURM_DIR
# (default /var/lib/mpilab-slurm), and munged on its own socket and key there, so a
# munge the machine may run is left alone. /etc/slurm/slurm.conf becomes a symbolic link
# to our file, so sbatch, squeue and friends find it; a slurm.conf that is not ours is
# never replaced (exit 2).
#
# Exit status: 0 done; 1 a failure (the daemons' logs are printed); 2 this cannot run here
# (not root, no apt-get and no Slurm, or a Slurm of the machine's own), with the reason on
# stderr; `status`: 3 when not running.
set -euo pipefail

DIR=${MPILAB_SLURM_DIR:-/var/lib/mpilab-slurm}
TIMEOUT=${MPILAB_SLURM_TIMEOUT:-90}  # seconds to wait for the node, or for jobs to end
PACKAGES=(slurm-wlm munge)  # slurm-wlm brings slurmctld, slurmd and slurm-client
PARTITION=mpilab
CONF=$DIR/slurm.conf
ETC_CONF=/etc/slurm/slurm.conf
SOCKET=$DIR/run/munge.socket.2  # its folder must be searchable by all; the key's not
HOST=$(hostname -s)

cannot() { echo "slurm-local: $*" >&2; exit 2; }
fail() { echo "slurm-local: $*" >&2; show_logs; exit 1; }

# 'stop' removes $DIR: it must be a folder of its own.
[[ $DIR == /?*/* && $(basename "$DIR") == *slurm* ]] ||
    cannot "MPILAB_SLURM_DIR must be an absolute path whose last part names slurm, not $DIR"

show_logs() {
    local f
    for f in "$DIR"/log/*.log; do
        [[ -f $f ]] || continue
        echo "--- last lines of $f" >&2
        tail -n 20 "$f" >&2
    done
}

alive() {  # alive NAME: the daemon whose pid file is $DIR/run/NAME.pid runs
    local pid
    pid=$(cat "$DIR/run/$1.pid" 2>/dev/null) || return 1
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null
}

node_state() { sinfo -h -N -n "$HOST" -o %t 2>/dev/null | head -n 1; }

ours() {  # /etc/slurm/slurm.conf is absent or our link
    [[ ! -e $ETC_CONF && ! -L $ETC_CONF ]] || [[ $(readlink "$ETC_CONF") == "$CONF" ]]
}

install_packages() {
    local missing=0 cmd
    for cmd in slurmctld slurmd sbatch sinfo squeue scancel munged mungekey; do
        command -v "$cmd" >/dev/null || missing=1
    done
    ((missing)) || return 0
    command -v apt-get >/dev/null || cannot "Slurm is not installed and there is no apt-get to install it"
    echo "slurm-local: installing ${PACKAGES[*]} with apt-get" >&2
    # Services must not start from the packages' scripts: this script starts its own.
    local policy=/usr/sbin/policy-rc.d added=0
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && added=1
    fi
    local ok=0
    for attempt in install update-and-install; do
        # one apt-get at a time with the course's other scripts (scripts/setup.sh), and
        # waiting for anyone else's dpkg lock
        [[ $attempt == update-and-install ]] && flock -w 1800 /var/cache/apt/mpilab.lock \
            apt-get -o DPkg::Lock::Timeout=900 update -qq >&2
        if DEBIAN_FRONTEND=noninteractive flock -w 1800 /var/cache/apt/mpilab.lock \
            apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends \
            "${PACKAGES[@]}" >&2; then
            ok=1
            break
        fi
    done
    ((added)) && rm -f "$policy"
    ((ok)) || fail "apt-get install ${PACKAGES[*]} failed"
}

write_conf() {
    # This host as slurmd sees it: CPUs, sockets, cores, threads and RealMemory.
    local node
    node=$(slurmd -C | head -n 1)
    [[ $node == NodeName=* ]] || fail "slurmd -C did not describe this host: $node"
    cat >"$CONF" <<EOF
# A one-host Slurm for mpilab, written by scripts/slurm-local.sh; removed by its 'stop'.
ClusterName=mpilab
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCKET
StateSaveLocation=$DIR/ctld
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
# No systemd and no cgroup delegation in a container: track job processes through /proc.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
# A cancelled job gets SIGKILL 5 s after SIGTERM (the default is 30 s).
KillWait=5
$node NodeAddr=127.0.0.1 State=UNKNOWN
# OverSubscribe: a controller job and an engine job (and a second course's) share the cores.
PartitionName=$PARTITION Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
}

start_munge() {
    alive munged && return 0
    mkdir -p "$DIR/munge"
    chmod 700 "$DIR/munge"
    chmod 755 "$DIR/run"
    [[ -s $DIR/munge/munge.key ]] || mungekey --create --keyfile="$DIR/munge/munge.key"
    chmod 400 "$DIR/munge/munge.key"
    munged --socket="$SOCKET" --key-file="$DIR/munge/munge.key" \
        --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" \
        --seed-file="$DIR/munge/munged.seed" || fail "munged did not start"
}

start_daemon() {  # start_daemon NAME: in the foreground (-D) of its own session, in the
    # background here, so the pid is known at once ($!) and no daemonizing fork can fail
    # or race with the pid file; what it prints goes to log/NAME.stderr.log
    setsid "$1" -D -f "$CONF" </dev/null >>"$DIR/log/$1.stderr.log" 2>&1 &
    echo $! >"$DIR/run/$1.pid"
    sleep 0.2
    alive "$1" || fail "$1 did not start"
}

wait_idle() {
    local deadline=$((SECONDS + TIMEOUT)) grace=$((SECONDS + 15)) state="" name
    while ((SECONDS < deadline)); do
        for name in slurmctld slurmd; do
            # a daemon writes its pid file after it forks: a missing one, just after the
            # start, is a daemon still starting, not a dead one
            alive "$name" || { [[ ! -s $DIR/run/$name.pid ]] && ((SECONDS < grace)); } ||
                fail "$name is not running"
        done
        state=$(node_state)
        case $state in
        idle | mix | alloc) echo "slurm-local: node $HOST is $state (partition $PARTITION)"; return 0 ;;
        esac
        sleep 0.5
    done
    fail "node $HOST was not idle within ${TIMEOUT} s (state: ${state:-unknown})"
}

do_start() {
    [[ $(id -u) == 0 ]] || cannot "needs root (it installs Slurm and starts its daemons)"
    ours || cannot "$ETC_CONF belongs to this machine's own Slurm: use that one"
    install_packages
    if alive slurmctld && alive slurmd && alive munged; then
        wait_idle
        return 0
    fi
    do_stop >/dev/null  # whatever half is left of an earlier run
    mkdir -p "$DIR"/{run,log,ctld,spool}
    chmod 755 "$DIR"
    write_conf
    mkdir -p /etc/slurm
    ln -sfn "$CONF" "$ETC_CONF"
    start_munge
    start_daemon slurmctld
    start_daemon slurmd
    wait_idle
}

stop_daemon() {  # stop_daemon NAME: SIGTERM, then SIGKILL after 10 s
    local pid i
    pid=$(cat "$DIR/run/$1.pid" 2>/dev/null) || return 0
    [[ -n $pid ]] || return 0
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
}

do_stop() {
    [[ $(id -u) == 0 ]] || cannot "needs root"
    if alive slurmctld; then
        # Every job ends first, while slurmd can still end its processes.
        scancel --partition="$PARTITION" 2>/dev/null || true
        local deadline=$((SECONDS + TIMEOUT))
        while ((SECONDS < deadline)) && [[ -n $(squeue -h -o %i 2>/dev/null) ]]; do
            sleep 0.5
        done
        [[ -z $(squeue -h -o %i 2>/dev/null) ]] || echo "slurm-local: jobs still listed after ${TIMEOUT} s" >&2
    fi
    stop_daemon slurmd
    stop_daemon slurmctld
    stop_daemon munged
    if [[ -L $ETC_CONF && $(readlink "$ETC_CONF") == "$CONF" ]]; then
        rm -f "$ETC_CONF"
    fi
    rm -rf "$DIR"
    echo "slurm-local: stopped"
}

do_status() {
    local name up=1
    for name in munged slurmctld slurmd; do
        if alive "$name"; then echo "$name: running (pid $(cat "$DIR/run/$name.pid"))"
        else echo "$name: not running"; up=0; fi
    done
    ((up)) || return 3
    sinfo
    squeue
}

case ${1:-} in
start) do_start ;;
stop) do_stop ;;
status) do_status ;;
*) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
