"""Fabrics: nodes on one bridge, made, launched on, found, and removed (with every process
on them), under the machine-wide lock."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from .. import runtime
from .host import PREFIX, STATE, SUBNET_BASE, NetlabUnavailable, _ns, _require, _run
from .links import Link, _has_netem, _shape, link_profile


@dataclass(frozen=True)
class Node:
    index: int
    hostname: str  # what processes on it see (UTS namespace)
    netns: str
    address: str
    port: str  # the switch's end of its veth pair, in the host's namespace


# ---------------------------------------------------------------------------------------
# fabrics

@dataclass
class Fabric:
    """N emulated nodes on one bridge; use :func:`up` / :func:`fabric` to make one."""

    id: str
    link: Link
    nodes: list[Node]
    subnet: str  # CIDR
    switch_address: str  # the bridge's address: the host's end, where mpiexec listens
    bridge: str
    owner: int  # pid whose death makes the fabric stale; 0: lasts until `down`
    shaping: dict = field(default_factory=dict)

    @property
    def state_dir(self) -> Path:
        return STATE / self.id

    @property
    def agent(self) -> Path:
        """Open MPI's launch agent (``plm_rsh_agent``): ``agent HOST COMMAND...`` runs
        COMMAND through ``sh -c`` on HOST's node, as ``ssh`` would on a real cluster."""
        return self.state_dir / "agent"

    def node(self, which: int | str) -> Node:
        """One of the fabric's nodes, by index, hostname, address or namespace.

        Parameters
        ----------
        which : int or str
            Its index (``0``), hostname (``"node0"``), address (``"10.98.1.1"``) or
            network namespace.

        Returns
        -------
        Node
            The node.

        Raises
        ------
        KeyError
            The fabric has no such node.
        """
        for n in self.nodes:
            if which in (n.index, n.hostname, n.address, n.netns):
                return n
        raise KeyError(f"fabric {self.id} has no node {which!r}")

    def exec_argv(self, which: int | str, argv: list[str]) -> list[str]:
        """`argv` made to run on a node: its network namespace and its hostname.

        Parameters
        ----------
        which : int or str
            The node (see :meth:`node`).
        argv : list of str
            The command and its arguments.

        Returns
        -------
        list of str
            An ``ip netns exec ... unshare --uts`` command line that sets the node's
            hostname and then runs `argv` (root needed to run it).
        """
        n = self.node(which)
        return ["ip", "netns", "exec", n.netns, "unshare", "--uts", "/bin/sh", "-c",
                'hostname "$0" && exec "$@"', n.hostname, *argv]

    def run(self, which: int | str, argv: list[str], timeout: float = 60
            ) -> subprocess.CompletedProcess:
        """Run `argv` on a node to completion; its output.

        Parameters
        ----------
        which, argv
            As for :meth:`exec_argv`.
        timeout : float, optional
            Seconds before it is killed and ``subprocess.TimeoutExpired`` raised
            (default 60).

        Returns
        -------
        subprocess.CompletedProcess
            Its exit status, ``stdout`` and ``stderr`` as text (a non-zero status does
            not raise).
        """
        return subprocess.run(self.exec_argv(which, argv), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def hostfile(self, slots: int) -> Path:
        """A hostfile with `slots` slots on each node (Open MPI syntax).

        Parameters
        ----------
        slots : int
            Ranks each node may take.

        Returns
        -------
        pathlib.Path
            ``hostfile-<slots>`` in the fabric's state folder, (re)written now.
        """
        path = self.state_dir / f"hostfile-{slots}"
        path.write_text("".join(f"{n.hostname} slots={slots}\n" for n in self.nodes))
        return path

    def launch(self, ranks: int, *, ranks_per_node: int | None = None, map_by: str = "node",
               transport: str = "shm", lib: str | None = None,
               thread_level: str = "single") -> runtime.Launch:
        """How to start `ranks` MPI processes spread over the nodes.

        `map_by` ``node`` deals ranks round-robin (rank 0 on node0, rank 1 on node1, ...:
        the allgather paper's cyclic placement); ``slot`` fills node0 first (block
        placement), `ranks_per_node` at a time (default: as many as needed, evenly).
        `transport` ``shm`` lets ranks of one node use shared memory (TCP between
        nodes); ``tcp`` makes every message go through TCP, inside a node too.
        Ranks are not bound to cores: the nodes share this host's cores.

        Parameters
        ----------
        ranks : int
            MPI processes to start, over all nodes.
        ranks_per_node : int, optional
            Slots per node (default ``ceil(ranks / nodes)``).
        map_by : {"node", "slot"}, optional
            Cyclic (default) or block placement.
        transport : {"shm", "tcp"}, optional
            ``shm`` (default): shared memory inside a node, TCP between nodes; ``tcp``:
            TCP everywhere.
        lib : {"openmpi", "mpich"}, optional
            As :func:`mpilab.runtime.launch`; only Open MPI's launcher works here.
        thread_level : str, optional
            The ``MPI_Init_thread`` level, as :func:`mpilab.runtime.launch`.

        Returns
        -------
        mpilab.runtime.Launch
            The launch with the fabric's hostfile, agent and subnet added; its
            ``placement`` is :meth:`placement`'s record.

        Raises
        ------
        ValueError
            `ranks` is not a positive integer, `map_by` is unknown, or the ranks do not
            fit at `ranks_per_node`.
        NetlabUnavailable
            The launcher is not Open MPI's.
        """
        if not isinstance(ranks, int) or ranks < 1:
            raise ValueError(f"ranks must be a positive integer, got {ranks!r}")
        if map_by not in ("node", "slot"):
            raise ValueError(f"map_by must be 'node' or 'slot', got {map_by!r}")
        per = ranks_per_node or -(-ranks // len(self.nodes))
        if per * len(self.nodes) < ranks:
            raise ValueError(f"{ranks} ranks do not fit on {len(self.nodes)} nodes with "
                             f"{per} ranks per node")
        base = runtime.launch(ranks, transport, lib, thread_level=thread_level)
        if base.family != "openmpi":
            raise NetlabUnavailable("emulated nodes are wired for Open MPI's launcher "
                                    f"(hostfile + rsh agent); {base.exe} is {base.family}")
        args = [a for a in base.args]
        if "--bind-to" not in args:
            args += ["--bind-to", "none"]
        if transport == "tcp":  # replace the loopback restriction by the fabric's subnet
            i = args.index("btl_tcp_if_include")
            args[i + 1] = self.subnet
        else:
            args += ["--mca", "btl_tcp_if_include", self.subnet]
        args += ["--hostfile", str(self.hostfile(per)), "--map-by", map_by,
                 "--mca", "plm_rsh_agent", str(self.agent),
                 "--mca", "plm_rsh_no_tree_spawn", "1",
                 "--mca", "oob_tcp_if_include", self.subnet]
        return dataclasses.replace(base, args=tuple(args), placement=self.placement(
            ranks, per, map_by))

    def placement(self, ranks: int, per: int, map_by: str) -> dict:
        """What :meth:`launch` records about where ranks run.

        Parameters
        ----------
        ranks : int
            MPI processes.
        per : int
            Ranks per node (the hostfile's slots).
        map_by : {"node", "slot"}
            Cyclic or block placement.

        Returns
        -------
        dict
            ``nodes``, ``ranks_per_node``, ``map_by``, ``node_of_rank`` (the node index of
            each rank), ``link`` (its name), ``fabric`` (the id), ``shaping`` and
            ``emulated`` (True).
        """
        nodes = len(self.nodes)
        if map_by == "node":
            where = [r % nodes for r in range(ranks)]
        else:
            where = [r // per for r in range(ranks)]
        return {"nodes": nodes, "ranks_per_node": per, "map_by": map_by,
                "node_of_rank": where, "link": self.link.name, "fabric": self.id,
                "shaping": self.shaping, "emulated": True}

    def describe(self) -> dict:
        """The fabric as plain data: what ``fabric.json`` in its state folder records.

        Returns
        -------
        dict
            ``id``, ``nodes`` and ``link`` (as dicts), ``subnet``, ``switch_address``,
            ``bridge``, ``owner`` and ``shaping``.
        """
        return {"id": self.id, "nodes": [dataclasses.asdict(n) for n in self.nodes],
                "link": dataclasses.asdict(self.link), "subnet": self.subnet,
                "switch_address": self.switch_address, "bridge": self.bridge,
                "owner": self.owner, "shaping": self.shaping}

    def down(self) -> None:
        """Remove the fabric: every process on its nodes, its namespaces, links, state."""
        _teardown(self.id, [n.netns for n in self.nodes], self.bridge)

    def __enter__(self) -> Fabric:
        return self

    def __exit__(self, *exc) -> None:
        self.down()


def _teardown(fid: str, namespaces: list[str], bridge: str | None) -> None:
    for ns in namespaces:
        res = _run(["ip", "netns", "pids", ns], check=False)
        for pid in res.stdout.split():
            with contextlib.suppress(OSError):
                os.kill(int(pid), signal.SIGKILL)
    for ns in namespaces:  # the veths go with their namespace
        deadline = time.monotonic() + 10
        while _run(["ip", "netns", "pids", ns], check=False).stdout.split():
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        _run(["ip", "netns", "delete", ns], check=False)
    # A namespace's veths go when the kernel destroys it, which it does later, on a
    # workqueue (seen still there under load right after `ip netns delete`): the host's
    # ends (the switch ports) are deleted here, which takes each pair with it.
    ports = re.compile(rf"^{PREFIX}{fid}h\d+$")
    for line in _run(["ip", "-o", "link", "show"], check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if ports.match(name):
            _run(["ip", "link", "delete", name], check=False)
    if bridge:
        _run(["ip", "link", "delete", bridge], check=False)
    shutil.rmtree(STATE / fid, ignore_errors=True)


@contextlib.contextmanager
def _locked():
    """Hold the machine-wide netlab lock (subnets, building, stale clean-up). Not
    reentrant: a second ``flock`` on a new descriptor in the same process waits forever,
    so nothing called while it is held may take it again."""
    STATE.mkdir(parents=True, exist_ok=True)
    with open(STATE / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _owner_alive(state: dict) -> bool:
    pid, started = state.get("owner", 0), state.get("owner_started")
    if not pid:
        return True  # made to last until `down`
    try:
        import psutil

        return abs(psutil.Process(pid).create_time() - started) < 1.0
    except Exception:  # noqa: BLE001 - gone, or not readable
        return False


def fabrics() -> list[dict]:
    """The fabrics on this machine (their state), whoever made them.

    Returns
    -------
    list of dict
        Each fabric's ``fabric.json`` (see :meth:`Fabric.describe`, plus
        ``owner_started`` and ``made``) with ``alive``: False when its owner is gone (it
        is stale); sorted by id.
    """
    found = []
    if STATE.is_dir():
        for f in sorted(STATE.glob("*/fabric.json")):
            with contextlib.suppress(OSError, ValueError):
                state = json.loads(f.read_text())
                state["alive"] = _owner_alive(state)
                found.append(state)
    return found


def remove_stale() -> list[str]:
    """Remove the fabrics whose owner is gone, and namespaces or bridges of the course's
    that no fabric claims (a crash between making them and writing the state); their ids
    or names.

    Returns
    -------
    list of str
        The ids of the fabrics removed and the names of the leftover namespaces and
        bridges removed (empty when nothing was stale).
    """
    # under the lock up() builds under: a fabric being made (its bridge and namespaces
    # up, its fabric.json not yet written) is never taken for a crashed one. up() calls
    # this before it takes the lock; nothing calls it with the lock held.
    with _locked():
        removed = []
        known_ns, known_br = set(), set()
        for state in fabrics():
            if state["alive"]:
                known_ns.update(n["netns"] for n in state["nodes"])
                known_br.add(state["bridge"])
                continue
            _teardown(state["id"], [n["netns"] for n in state["nodes"]], state["bridge"])
            removed.append(state["id"])
        making = {p.name for p in STATE.glob("*")
                  if p.is_dir() and not (p / "fabric.json").exists()
                  and _dir_owner_alive(p)} if STATE.is_dir() else set()
        pattern = re.compile(rf"^{PREFIX}-([0-9a-f]{{6}})-n\d+$")
        for line in _run(["ip", "netns", "list"], check=False).stdout.splitlines():
            name = line.split()[0] if line.split() else ""
            m = pattern.match(name)
            if m and name not in known_ns and m.group(1) not in making:
                _teardown(m.group(1), [name], None)
                removed.append(name)
        br = re.compile(rf"^{PREFIX}br([0-9a-f]{{6}})$")
        for line in _run(["ip", "-o", "link", "show", "type", "bridge"], check=False
                         ).stdout.splitlines():
            name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
            m = br.match(name)
            if m and name not in known_br and m.group(1) not in making:
                _run(["ip", "link", "delete", name], check=False)
                removed.append(name)
        return removed


def _dir_owner_alive(d: Path) -> bool:
    with contextlib.suppress(OSError, ValueError):
        return _owner_alive(json.loads((d / "owner.json").read_text()))
    return False


def _free_subnet() -> int:
    used = set()
    for state in fabrics():
        used.add(int(state["subnet"].split(".")[2]))
    out = _run(["ip", "-o", "-4", "addr", "show"], check=False).stdout
    for m in re.finditer(rf"inet {re.escape(SUBNET_BASE)}\.(\d+)\.", out):
        used.add(int(m.group(1)))
    for k in range(1, 251):
        if k not in used:
            return k
    raise NetlabUnavailable(f"all 250 subnets {SUBNET_BASE}.k.0/24 are in use: run "
                            "`python -m mpilab.netlab down --all`")


AGENT = """#!/bin/sh
# Open MPI's launch agent for emulated fabric {id} (made by mpilab.netlab).
# Called as ssh would be: agent HOST COMMAND...; runs COMMAND with sh -c on HOST's node.
host="$1"; shift
case "$host" in
{cases}
  *) echo "mpilab.netlab agent: fabric {id} has no node $host" >&2; exit 255 ;;
esac
exec ip netns exec "$ns" unshare --uts /bin/sh -c 'hostname "$0" && exec /bin/sh -c "$1"' \\
  "$name" "$*"
"""


def up(nodes: int = 2, link: str | Link = "fast-ethernet", *, persistent: bool = False
       ) -> Fabric:
    """Make `nodes` emulated nodes joined by `link`; the :class:`Fabric`.

    The fabric belongs to this process (removed by the next :func:`up` once this process
    is gone) unless `persistent`. Call :meth:`Fabric.down`, or use :func:`fabric`.

    Parameters
    ----------
    nodes : int, optional
        Emulated nodes, 1 to 64 (default 2).
    link : str or Link, optional
        A profile name of :data:`mpilab.netlab.PROFILES` or a :class:`Link` (default
        ``"fast-ethernet"``).
    persistent : bool, optional
        Keep the fabric after this process ends, until ``down`` (default False).

    Returns
    -------
    Fabric
        The fabric, built and shaped (``shaping`` says what could not be emulated).

    Raises
    ------
    ValueError
        `nodes` is out of range or `link` is not a profile.
    NetlabUnavailable
        Emulated nodes cannot be made here (see :func:`mpilab.netlab.available`), or a
        command failed.
    """
    if not isinstance(nodes, int) or isinstance(nodes, bool) or not 1 <= nodes <= 64:
        raise ValueError(f"nodes must be an integer from 1 to 64, got {nodes!r}")
    link = link_profile(link)
    _require()
    remove_stale()
    import psutil

    fid = uuid.uuid4().hex[:6]
    owner = 0 if persistent else os.getpid()
    started = psutil.Process(owner).create_time() if owner else None
    with _locked():
        k = _free_subnet()
        d = STATE / fid
        d.mkdir(parents=True)
        (d / "owner.json").write_text(json.dumps({"owner": owner, "owner_started": started}))
        subnet, net = f"{SUBNET_BASE}.{k}.0/24", f"{SUBNET_BASE}.{k}"
        bridge = f"{PREFIX}br{fid}"
        fab = Fabric(fid, link, [Node(i, f"node{i}", f"{PREFIX}-{fid}-n{i}",
                                      f"{net}.{i + 1}", f"{PREFIX}{fid}h{i}")
                                 for i in range(nodes)],
                     subnet, f"{net}.254", bridge, owner)
        try:
            _build(fab, net)
        except BaseException:
            fab.down()
            raise
        state = {**fab.describe(), "owner_started": started, "made": time.time()}
        (d / "fabric.json").write_text(json.dumps(state, indent=1))
    return fab


def _build(fab: Fabric, net: str) -> None:
    _run(["ip", "link", "add", fab.bridge, "type", "bridge"])
    _run(["ip", "addr", "add", f"{fab.switch_address}/24", "dev", fab.bridge])
    _run(["ip", "link", "set", fab.bridge, "up"])
    for n in fab.nodes:
        peer = f"{PREFIX}{fab.id}p{n.index}"
        _run(["ip", "netns", "add", n.netns])
        _run(["ip", "link", "add", n.port, "type", "veth", "peer", "name", peer])
        _run(["ip", "link", "set", peer, "netns", n.netns])
        _ns(n.netns, ["ip", "link", "set", peer, "name", "eth0"])
        _ns(n.netns, ["ip", "addr", "add", f"{n.address}/24", "dev", "eth0"])
        _ns(n.netns, ["ip", "link", "set", "eth0", "up"])
        _ns(n.netns, ["ip", "link", "set", "lo", "up"])
        _run(["ip", "link", "set", n.port, "master", fab.bridge])
        _run(["ip", "link", "set", n.port, "up"])
    link = fab.link
    wants_netem = link.delay_us > 0 or link.jitter_us > 0 or link.loss_pct > 0
    netem = _has_netem(fab.nodes[0].netns) if wants_netem else False
    applied: list[str] = []
    for n in fab.nodes:
        applied = _shape("eth0", link, netem, n.netns)  # node -> switch
        _shape(n.port, link, netem, None)  # switch -> node
    missing = []
    if wants_netem and not netem:
        what = [w for w, v in (("delay", link.delay_us), ("jitter", link.jitter_us),
                               ("loss", link.loss_pct)) if v]
        missing.append(f"{', '.join(what)} not emulated: this kernel has no sch_netem")
    if not link.delay_us and not wants_netem:
        missing.append("no delay added: latency is the host's TCP stack and veth, not a "
                       "wire and a switch")
    missing.append("nodes share this host's cores and memory (ranks not bound)")
    fab.shaping = {"link": link.name, "rate_bit_s": link.rate_bit_s,
                   "applied": applied or ["nothing (unshaped)"], "not_emulated": missing,
                   "both_directions": True, "emulated": True}
    cases = []
    for n in fab.nodes:
        cases.append(f"  {n.hostname}|{n.address}) ns={shlex.quote(n.netns)}; "
                     f"name={n.hostname} ;;")
    fab.agent.write_text(AGENT.format(id=fab.id, cases="\n".join(cases)))
    fab.agent.chmod(0o755)


@contextlib.contextmanager
def fabric(nodes: int = 2, link: str | Link = "fast-ethernet"):
    """``with netlab.fabric(2, "gige") as fab:`` ... the fabric is gone afterwards.

    Parameters
    ----------
    nodes : int, optional
        Emulated nodes, 1 to 64 (default 2).
    link : str or Link, optional
        A profile name or a :class:`Link` (default ``"fast-ethernet"``).

    Yields
    ------
    Fabric
        The fabric made by :func:`up`; removed with everything on it when the block
        ends.
    """
    fab = up(nodes, link)
    try:
        yield fab
    finally:
        fab.down()


def load(fid: str) -> Fabric:
    """The fabric with id `fid` (made by this or another process).

    Parameters
    ----------
    fid : str
        The fabric's id (six hex digits, as ``python -m mpilab.netlab status`` lists).

    Returns
    -------
    Fabric
        The fabric as its state folder records it.

    Raises
    ------
    KeyError
        No fabric has that id.
    """
    path = STATE / fid / "fabric.json"
    if not path.exists():
        raise KeyError(f"no fabric {fid!r} (see `python -m mpilab.netlab status`)")
    s = json.loads(path.read_text())
    fab = Fabric(s["id"], Link(**s["link"]), [Node(**n) for n in s["nodes"]], s["subnet"],
                 s["switch_address"], s["bridge"], s["owner"], s["shaping"])
    return fab
