"""``python -m mpilab.tuning --worker|--observe ARGS.json OUT.json``: the measuring job's
and the observing job's ranks (started by :func:`mpilab.tuning.measure` and
:func:`mpilab.tuning.observe_library` through :mod:`mpilab.jobs`)."""

import sys

from .measuring import _worker
from .observing import _observe_worker

if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        sys.exit(_worker(sys.argv[2], sys.argv[3]))
    if len(sys.argv) == 4 and sys.argv[1] == "--observe":
        sys.exit(_observe_worker(sys.argv[2], sys.argv[3]))
    sys.exit("usage: python -m mpilab.tuning --worker|--observe ARGS.json OUT.json")
