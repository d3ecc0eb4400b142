"""This host: where fabrics keep their state, running ``ip`` and ``tc`` (in a node's
namespace too), and whether emulated nodes can be made here at all."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

STATE = Path(os.environ.get("MPILAB_NETLAB_DIR", "/run/mpilab-netlab"))
PREFIX = "mpl"
SUBNET_BASE = "10.98"  # fabrics use 10.98.<k>.0/24, k = 1 ... 250; nothing leaves them


class NetlabUnavailable(RuntimeError):
    """Emulated nodes cannot be made here (say why: no root, no ``ip``, no namespaces)."""


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

    Returns
    -------
    str or None
        None where they can be made (a network namespace was made and removed as a
        test); else the reason: turned off, not Linux, a missing command, not root, or
        the kernel's refusal.
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
