"""The simulated machines: platform files (``mpilab/platforms/*.xml`` and the calibrated
``this-machine``), their hosts, and where ranks go on them (the hostfile)."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from .. import validate
from .smpi import SimUnavailable, _cache_dir

PLATFORM_DIR = Path(__file__).resolve().parent.parent / "platforms"


SPEED = "1Gf"  # every platform's core speed and smpi/host-speed: simulated = measured


# --------------------------------------------------------------------------- platforms


@dataclass(frozen=True)
class Platform:
    """A simulated machine: ``nodes`` hosts of ``cores`` cores, from an XML file.

    ``params`` are the cluster's attributes as SimGrid reads them (``bw``, ``lat``,
    ``loopback_bw``, ``loopback_lat``, ...); ``info`` the ``mpilab:*`` properties of the
    file (``description``, ``machine``, ``source:<attribute>``, ``assumed``).
    """

    name: str
    path: Path
    nodes: int
    cores: int
    prefix: str
    params: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)

    @property
    def description(self) -> str:
        return self.info.get("description", self.name)

    def host(self, i: int) -> str:
        """The SimGrid name of node `i`: the cluster's prefix and the number.

        Parameters
        ----------
        i : int
            The node's index, from 0.

        Returns
        -------
        str
            The host name the hostfile uses (``"cervino-1"`` on ``allgather-paper``).
        """
        return f"{self.prefix}{i}"

    @property
    def label(self) -> str:
        return label(self.name)

    def sources(self) -> dict:
        """Where each number comes from: ``{attribute: source}``.

        Returns
        -------
        dict of str to str
            For each attribute with an ``mpilab:source:<attribute>`` property in the
            file (``bw``, ``lat``, ...), where its value comes from (a paper, a
            calibration).
        """
        return {k.split(":", 1)[1]: v for k, v in self.info.items() if k.startswith("source:")}


def label(name: str) -> str:
    """The label every simulated record, table and figure carries.

    Parameters
    ----------
    name : str
        The platform's name.

    Returns
    -------
    str
        ``"simulated (SMPI, platform <name>)"``.
    """
    return f"simulated (SMPI, platform {name})"


def _this_machine_path() -> Path:
    return _cache_dir() / "this-machine.xml"


def platforms() -> list[str]:
    """Names of the platforms: the papers' machines and ``this-machine``.

    Returns
    -------
    list of str
        The XML files of ``mpilab/platforms/`` by name (sorted), then ``"this-machine"``
        (listed whether or not it is calibrated yet).
    """
    return sorted(p.stem for p in PLATFORM_DIR.glob("*.xml")) + ["this-machine"]


def _parse(path: Path, name: str) -> Platform:
    root = ET.parse(path).getroot()
    cluster = root.find("cluster")
    if cluster is None:
        raise ValueError(f"{path}: a course platform is one <cluster>")
    lo, hi = (int(x) for x in cluster.get("radical", "0-0").split("-"))
    info = {p.get("id")[len("mpilab:"):]: p.get("value") for p in cluster.findall("prop")
            if p.get("id", "").startswith("mpilab:")}
    return Platform(name, path, hi - lo + 1, int(cluster.get("core", "1")),
                    cluster.get("prefix", ""), dict(cluster.attrib), info)


def platform(name: str | Platform) -> Platform:
    """The platform called `name` (see :func:`platforms`), or a clear error.

    Parameters
    ----------
    name : str or Platform
        A name from :func:`platforms`; a :class:`Platform` is returned as it is.

    Returns
    -------
    Platform
        The platform read from its XML file.

    Raises
    ------
    ValueError
        `name` is not a platform.
    SimUnavailable
        ``this-machine`` was asked for and :func:`mpilab.sim.calibrate` has not run.
    """
    if isinstance(name, Platform):
        return name
    if name == "this-machine":
        path = _this_machine_path()
        if not path.exists():
            raise SimUnavailable("this-machine is not calibrated yet: run "
                                 "mpilab.sim.calibrate() (a real ping-pong on this machine)")
        return _parse(path, name)
    path = PLATFORM_DIR / f"{name}.xml"
    if not isinstance(name, str) or not path.exists():
        raise ValueError(f"platform must be one of {platforms()}, got {name!r}")
    return _parse(path, name)


def hostfile(plat: Platform, ranks: int, map_by: str = "slot",
             per_node: int | None = None) -> tuple[str, list[int]]:
    """SMPI hostfile text for `ranks` ranks, and the node of each rank.

    ``map_by="slot"`` fills node 0 first, then node 1 (block placement), with
    `per_node` ranks per node (default: the node's cores; the SHM paper ran 36 of 44);
    ``"node"`` deals ranks round the nodes (cyclic: the allgather paper's placement).
    More ranks than cores: the cores are dealt again (oversubscribed, as the paper's 128
    processes on 64 cores).

    Parameters
    ----------
    plat : Platform
        The simulated machine.
    ranks : int
        MPI processes.
    map_by : {"slot", "node"}, optional
        Block (default) or cyclic placement.
    per_node : int, optional
        Ranks per node with ``map_by="slot"`` (default: the node's cores, or more where
        the ranks outnumber the cores).

    Returns
    -------
    text : str
        The hostfile, one ``<host>:1`` line per rank in rank order.
    nodes : list of int
        The node index of each rank.

    Raises
    ------
    ValueError
        `map_by` is unknown, `per_node` is given with ``map_by="node"``, or the ranks at
        `per_node` need more nodes than the platform has.
    """
    validate.names(map_by, ("slot", "node"), "map_by")
    if per_node is not None:
        per_node = validate.count(per_node, "per_node")
        if map_by != "slot":
            raise ValueError("per_node applies to map_by='slot' (block placement)")
        if math.ceil(ranks / per_node) > plat.nodes:
            raise ValueError(f"{ranks} ranks at {per_node} per node need "
                             f"{math.ceil(ranks / per_node)} nodes; {plat.name} has "
                             f"{plat.nodes}")
    slots = plat.nodes * plat.cores
    if map_by == "slot":
        per = per_node or (math.ceil(ranks / plat.nodes) if ranks > slots else plat.cores)
        nodes = [min(r // per, plat.nodes - 1) for r in range(ranks)]
    else:
        nodes = [r % plat.nodes for r in range(ranks)]
    return "".join(f"{plat.host(n)}:1\n" for n in nodes), nodes
