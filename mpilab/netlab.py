"""Emulated nodes on one machine: network namespaces joined by shaped links.

A :class:`Fabric` is N "nodes" on this Linux host. Each node is a network namespace with
one interface, ``eth0``, the end of a veth pair whose other end hangs on a bridge in the
host's namespace (the "switch"); every process started on a node also gets a UTS
namespace of its own with the node's hostname (``node0``, ``node1`` ...), because MPI
libraries decide which ranks share a node by their hostname. Open MPI then uses shared
memory between the ranks of one node and TCP, through the veth and the bridge, between
nodes: a real network stack and a real wire protocol, on a wire that does not exist.

What the emulation gives and what it leaves out (every result says it, see
:attr:`Fabric.shaping`):

* **rate**: ``tc`` shapes each port in both directions (the node's ``eth0`` towards the
  switch, the switch's port towards the node) with a token bucket (``tbf``), so a link
  carries at most its profile's bit rate, full duplex, like a NIC on a switch;
* **delay, jitter, loss** need ``sch_netem``; where the kernel lacks it (the machines
  this course was written on do) they are not emulated, and the record says so. The
  latency measured across an emulated link is then the TCP stack's and the veth's, a few
  microseconds, not the tens of microseconds of a real NIC and switch;
* **CPU**: the nodes share this machine's cores and memory. Ranks on "different nodes"
  compete for the same cores, and a node's rank is not bound (binding would put every
  node's first rank on the same core 0); the processor time TCP spends is the host's.

Names carry a per-fabric id (namespaces ``mpl-<id>-n<i>``, bridge ``mplbr<id>``, host
ports ``mpl<id>h<i>``) and the fabric's state lives in ``/run/mpilab-netlab/<id>``, with
the id of the process that owns it: a fabric whose owner is gone (a killed notebook or
test) is removed by the next :func:`up`, processes and all. ``python -m mpilab.netlab up
--nodes 2 --link fast-ethernet`` makes one that lasts until ``down`` (for a live demo).

Root (CAP_NET_ADMIN) is needed; :func:`available` says why not where it is missing (a
laptop without sudo, Binder), and the course shows reference data there instead.
"""

from __future__ import annotations

import argparse
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
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from . import runtime

__all__ = ["PROFILES", "Link", "Node", "Fabric", "NetlabUnavailable", "available", "up",
           "fabric", "fabrics", "remove_stale", "link_profile"]

STATE = Path(os.environ.get("MPILAB_NETLAB_DIR", "/run/mpilab-netlab"))
PREFIX = "mpl"
SUBNET_BASE = "10.98"  # fabrics use 10.98.<k>.0/24, k = 1 ... 250; nothing leaves them


class NetlabUnavailable(RuntimeError):
    """Emulated nodes cannot be made here (say why: no root, no ``ip``, no namespaces)."""


@dataclass(frozen=True)
class Link:
    """What one node's link to the switch carries (a profile, or one of your own).

    `rate_bit_s` None leaves the rate alone (as fast as the host moves bytes). `delay_us`,
    `jitter_us` and `loss_pct` are one way, and applied only where ``sch_netem`` exists.
    """

    name: str
    rate_bit_s: float | None
    delay_us: float = 0.0
    jitter_us: float = 0.0
    loss_pct: float = 0.0
    about: str = ""

    def __post_init__(self):
        if self.rate_bit_s is not None and not self.rate_bit_s > 0:
            raise ValueError(f"rate_bit_s must be positive or None, got {self.rate_bit_s!r}")
        for name in ("delay_us", "jitter_us", "loss_pct"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)!r}")
        if self.loss_pct > 100:
            raise ValueError(f"loss_pct is a percentage, got {self.loss_pct!r}")


PROFILES: dict[str, Link] = {
    "fast-ethernet": Link("fast-ethernet", 100e6, about="100 Mbit/s Fast Ethernet, the "
                          "network of the ping-pong paper's cluster"),
    "gige": Link("gige", 1e9, about="1 Gbit/s Gigabit Ethernet"),
    "10gbe": Link("10gbe", 10e9, about="10 Gbit/s Ethernet (above what one host's TCP "
                  "stack may move across a veth: check the measured rate)"),
    "unshaped": Link("unshaped", None, about="no shaping: as fast as this host's TCP stack "
                     "moves bytes between namespaces"),
}


def link_profile(link: str | Link) -> Link:
    """A :class:`Link` from a profile name (``fast-ethernet``, ``gige``, ``10gbe``,
    ``unshaped``) or a Link."""
    if isinstance(link, Link):
        return link
    if link not in PROFILES:
        raise ValueError(f"unknown link profile {link!r}; the profiles are "
                         f"{', '.join(PROFILES)} (or pass a netlab.Link)")
    return PROFILES[link]


@dataclass(frozen=True)
class Node:
    index: int
    hostname: str  # what processes on it see (UTS namespace)
    netns: str
    address: str
    port: str  # the switch's end of its veth pair, in the host's namespace


# ---------------------------------------------------------------------------------------
# running commands

def _run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    if check and res.returncode != 0:
        raise NetlabUnavailable(f"{' '.join(argv)} failed: "
                                f"{(res.stderr or res.stdout).strip()}")
    return res


def _ns(netns: str, argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
    return _run(["ip", "netns", "exec", netns, *argv], check=check)


def available() -> str | None:
    """None if emulated nodes can be made here, else why not (one plain sentence).

    ``MPILAB_NETLAB=off`` turns them off (a shared classroom machine, or to see what a
    notebook shows without them).
    """
    if os.environ.get("MPILAB_NETLAB", "").lower() == "off":
        return "emulated nodes are turned off (MPILAB_NETLAB=off)"
    if sys.platform != "linux":
        return "emulated nodes need Linux network namespaces"
    for tool in ("ip", "tc", "unshare"):
        if shutil.which(tool) is None:
            return f"emulated nodes need the `{tool}` command (Debian: iproute2, util-linux)"
    if os.geteuid() != 0:
        return ("emulated nodes need root (CAP_NET_ADMIN) to make network namespaces "
                "and links; this session runs as an ordinary user")
    probe = f"{PREFIX}-probe-{os.getpid()}"
    res = _run(["ip", "netns", "add", probe], check=False)
    if res.returncode != 0:
        return f"this kernel refused a network namespace: {res.stderr.strip()}"
    _run(["ip", "netns", "delete", probe], check=False)
    return None


def _require() -> None:
    why = available()
    if why:
        raise NetlabUnavailable(why)


# ---------------------------------------------------------------------------------------
# shaping

def _tc_rate(bits: float) -> str:
    return f"{int(round(bits))}bit"


def _burst_bytes(rate_bit_s: float) -> int:
    """Token-bucket depth: what the link may send at once, before it meters.

    A wire has no bucket: every byte takes 8 / rate seconds. Up to 200 Mbit/s the bucket
    holds one millisecond at the rate (12.5 KB for Fast Ethernet; at least two frames),
    so a message larger than that is metered at the link's rate, as on a wire; tbf then
    splits veth's 64 KiB segments into frames, which costs little at such rates. Faster
    links get one 64 KiB segment and its frame (or half a millisecond at the rate), as
    splitting every segment there costs more processor time than this host has
    (measured here: 1 Gbit/s capped at 0.4-0.7 of its rate with a 62.5 KB bucket), at
    the price of up to 64 KiB passing unmetered when the link was idle.
    """
    if rate_bit_s <= 200e6:
        return int(max(2 * 1514, rate_bit_s / 8 * 0.001))
    return int(max(64 * 1024 + 1514, rate_bit_s / 8 * 0.0005))


def _shape(dev: str, link: Link, netem: bool, netns: str | None) -> list[str]:
    """Shape egress of `dev` (in `netns`, or the host's namespace); what was applied."""
    run = (lambda argv: _ns(netns, argv)) if netns else _run
    applied = []
    delay = link.delay_us > 0 or link.jitter_us > 0 or link.loss_pct > 0
    parent = ["root"]
    if netem and delay:
        em = ["netem"]
        if link.delay_us or link.jitter_us:
            em += ["delay", f"{link.delay_us:g}us"]
            if link.jitter_us:
                em += [f"{link.jitter_us:g}us"]
        if link.loss_pct:
            em += ["loss", f"{link.loss_pct:g}%"]
        run(["tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", *em])
        applied.append(" ".join(em[1:]) + " (netem)")
        parent = ["parent", "1:1", "handle", "10:"]
    if link.rate_bit_s:
        burst = _burst_bytes(link.rate_bit_s)
        run(["tc", "qdisc", "replace", "dev", dev, *parent, "tbf", "rate",
             _tc_rate(link.rate_bit_s), "burst", str(burst), "latency", "100ms"])
        applied.append(f"rate {link.rate_bit_s / 1e6:g} Mbit/s (tbf, burst {burst} B)")
    return applied


def _has_netem(netns: str) -> bool:
    """Whether this kernel accepts a netem qdisc (tried on a dummy device in `netns`)."""
    _ns(netns, ["ip", "link", "add", "probe0", "type", "dummy"], check=False)
    ok = _ns(netns, ["tc", "qdisc", "add", "dev", "probe0", "root", "netem", "delay", "1ms"],
             check=False).returncode == 0
    _ns(netns, ["ip", "link", "delete", "probe0"], check=False)
    return ok


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
        for n in self.nodes:
            if which in (n.index, n.hostname, n.address, n.netns):
                return n
        raise KeyError(f"fabric {self.id} has no node {which!r}")

    def exec_argv(self, which: int | str, argv: list[str]) -> list[str]:
        """`argv` made to run on a node: its network namespace and its hostname."""
        n = self.node(which)
        return ["ip", "netns", "exec", n.netns, "unshare", "--uts", "/bin/sh", "-c",
                'hostname "$0" && exec "$@"', n.hostname, *argv]

    def run(self, which: int | str, argv: list[str], timeout: float = 60
            ) -> subprocess.CompletedProcess:
        """Run `argv` on a node to completion; its output."""
        return subprocess.run(self.exec_argv(which, argv), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def hostfile(self, slots: int) -> Path:
        """A hostfile with `slots` slots on each node (Open MPI syntax)."""
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
        """What :meth:`launch` records about where ranks run."""
        nodes = len(self.nodes)
        if map_by == "node":
            where = [r % nodes for r in range(ranks)]
        else:
            where = [r // per for r in range(ranks)]
        return {"nodes": nodes, "ranks_per_node": per, "map_by": map_by,
                "node_of_rank": where, "link": self.link.name, "fabric": self.id,
                "shaping": self.shaping, "emulated": True}

    def describe(self) -> dict:
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
    """The fabrics on this machine (their state), whoever made them."""
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
    or names."""
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
    """``with netlab.fabric(2, "gige") as fab:`` ... the fabric is gone afterwards."""
    fab = up(nodes, link)
    try:
        yield fab
    finally:
        fab.down()


def load(fid: str) -> Fabric:
    """The fabric with id `fid` (made by this or another process)."""
    path = STATE / fid / "fabric.json"
    if not path.exists():
        raise KeyError(f"no fabric {fid!r} (see `python -m mpilab.netlab status`)")
    s = json.loads(path.read_text())
    fab = Fabric(s["id"], Link(**s["link"]), [Node(**n) for n in s["nodes"]], s["subnet"],
                 s["switch_address"], s["bridge"], s["owner"], s["shaping"])
    return fab


# ---------------------------------------------------------------------------------------
# command line

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mpilab.netlab", description=(
        "Emulated nodes on this machine (network namespaces + shaped veth links)."))
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up", help="make a fabric that lasts until `down`")
    u.add_argument("--nodes", type=int, default=2)
    u.add_argument("--link", default="fast-ethernet", choices=list(PROFILES))
    sub.add_parser("status", help="list the fabrics on this machine")
    d = sub.add_parser("down", help="remove a fabric (and everything on its nodes)")
    d.add_argument("id", nargs="?")
    d.add_argument("--all", action="store_true")
    e = sub.add_parser("exec", help="run a command on a node: exec ID NODE -- CMD ...")
    e.add_argument("id")
    e.add_argument("node")
    e.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    try:
        if a.cmd == "up":
            fab = up(a.nodes, a.link, persistent=True)
            print(f"fabric {fab.id}: {len(fab.nodes)} nodes on {fab.link.name} "
                  f"({fab.subnet}); remove it with: python -m mpilab.netlab down {fab.id}")
            for n in fab.nodes:
                print(f"  {n.hostname}  {n.address}  netns {n.netns}")
            print("  shaping: " + "; ".join(fab.shaping["applied"]))
            for w in fab.shaping["not_emulated"]:
                print(f"  not emulated: {w}")
        elif a.cmd == "status":
            states = fabrics()
            if not states:
                print("no fabrics")
            for s in states:
                life = "until down" if not s["owner"] else (
                    f"owner {s['owner']}" + ("" if s["alive"] else " (gone: stale)"))
                print(f"{s['id']}: {len(s['nodes'])} nodes, {s['link']['name']}, "
                      f"{s['subnet']}, {life}")
        elif a.cmd == "down":
            if not a.all and not a.id:
                ap.error("down needs a fabric id, or --all")
            ids = [s["id"] for s in fabrics()] if a.all else [a.id]
            for fid in ids:
                load(fid).down()
                print(f"removed fabric {fid}")
            if a.all:
                for name in remove_stale():
                    print(f"removed leftover {name}")
        elif a.cmd == "exec":
            cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
            if not cmd:
                ap.error("exec needs a command after the node")
            return subprocess.call(load(a.id).exec_argv(a.node, cmd))
    except (NetlabUnavailable, KeyError, ValueError) as exc:
        print(f"mpilab.netlab: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
