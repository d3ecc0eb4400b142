"""``python -m mpilab.pingpong --worker ARGS.json OUT.json``: the ranks of the ping-pong's
jobs (:func:`mpilab.jobs.python_worker`). ARGS's ``what`` names the experiment; rank 0
writes what its worker returned to OUT."""

from __future__ import annotations

import argparse
import json
import sys

from .experiments import buffers_worker, pingpong_worker
from .matching import matching_worker
from .sharing import contention_worker, forwarding_worker

WORKERS = {"pingpong": pingpong_worker, "buffers": buffers_worker,
           "contention": contention_worker, "forwarding": forwarding_worker,
           "matching": matching_worker}


def main(argv=None) -> int:
    """Run one worker on this rank.

    Parameters
    ----------
    argv : list of str, optional
        ``--worker ARGS.json OUT.json`` (default: this process's arguments).

    Returns
    -------
    int
        0.
    """
    p = argparse.ArgumentParser(prog="python -m mpilab.pingpong", description=__doc__)
    p.add_argument("--worker", nargs=2, required=True, metavar=("ARGS", "OUT"))
    args_path, out_path = p.parse_args(argv).worker
    a = json.loads(open(args_path).read())
    doc = WORKERS[a["what"]](a)
    if doc is not None:
        with open(out_path, "w") as f:
            json.dump(doc, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
