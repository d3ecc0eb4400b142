"""``python -m mpilab.netlab up|status|down|exec``: emulated nodes from a shell."""

from __future__ import annotations

import argparse
import subprocess
import sys

from .core import fabrics, load, remove_stale, up
from .host import NetlabUnavailable
from .links import PROFILES

# ---------------------------------------------------------------------------------------
# command line

def main(argv: list[str] | None = None) -> int:
    """Run one ``up``, ``status``, ``down`` or ``exec`` command; its exit status.

    Parameters
    ----------
    argv : list of str, optional
        The command line without the program name (default ``sys.argv[1:]``), e.g.
        ``["up", "--nodes", "4", "--link", "gige"]``.

    Returns
    -------
    int
        0 on success; 2 when nodes cannot be made here or an id, node or value is wrong
        (the reason on stderr); for ``exec``, the command's own exit status.
    """
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
