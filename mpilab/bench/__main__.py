"""python -m mpilab.bench <name> [options]  (python -m mpilab.bench <name> --help)"""

import importlib
import sys

from . import BENCHMARKS


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in BENCHMARKS:
        print(__doc__.strip())
        print("benchmarks: " + ", ".join(sorted(BENCHMARKS)))
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    module = importlib.import_module(BENCHMARKS[argv[0]])
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
