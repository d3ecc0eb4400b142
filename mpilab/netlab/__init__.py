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

The package's modules: :mod:`.host` (the state folder, running ``ip`` and ``tc``,
:func:`available`), :mod:`.links` (:class:`Link`, the profiles, shaping with ``tc``),
:mod:`.core` (:class:`Fabric` and :class:`Node`; :func:`up`, :func:`fabric`,
:func:`load`, :func:`fabrics`, :func:`remove_stale`), :mod:`.placing` (an experiment's
ranks on this host or on emulated nodes: :func:`placed`, :func:`where_line`) and the
command line (``__main__``). Every name is here as ``netlab.<name>``; a test that replaces a function
the fabric's build calls replaces it in :mod:`.core`, where it is read.
"""

# ruff: noqa: F401 - the names beyond __all__ are the module's API as before the split
from __future__ import annotations

from .core import (
    AGENT,
    Fabric,
    Node,
    _build,
    _dir_owner_alive,
    _free_subnet,
    _locked,
    _owner_alive,
    _teardown,
    fabric,
    fabrics,
    load,
    remove_stale,
    up,
)
from .host import (
    PREFIX,
    STATE,
    SUBNET_BASE,
    NetlabUnavailable,
    _ns,
    _require,
    _run,
    available,
)
from .links import (
    PROFILES,
    Link,
    _burst_bytes,
    _has_netem,
    _shape,
    _tc_rate,
    link_profile,
)
from .placing import placed, where_line

__all__ = ["PROFILES", "Link", "Node", "Fabric", "NetlabUnavailable", "available", "up",
           "fabric", "fabrics", "remove_stale", "link_profile", "placed", "where_line"]
