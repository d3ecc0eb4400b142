"""What the memory a large message lives in does to its transfer, on one host.

    python -m mpilab.bench buffers --sizes 1M,4M,16M --json OUT

Two ranks ping-pong the same Cython kernel (one-way time: half a round trip) with three
kinds of buffer (:data:`mpilab.buffers.BUFFER_KINDS`): the course's own (2 MiB aligned,
transparent huge pages asked for), ``np.ones`` as any user's array, and ordinary 4 KiB
pages only; and with the shared-memory transport's two ways of moving a large message:

* ``single-copy``: the receiver copies straight out of the sender's buffer
  (``process_vm_readv``, CMA), which makes the kernel walk and pin the sender's pages:
  a cost per page, so 512 times fewer pages on 2 MiB huge pages matter;
* ``copy-in-out``: the sender copies into the shared segment and the receiver out of
  it, fragment after fragment (``runtime.launch(single_copy=False)``): two copies, but
  of memory that is already mapped, whatever pages the user's buffer has.

Each mechanism is its own job (a launch setting), alternated over ``--rounds``; the kinds
alternate inside each job, so every ratio is measured side by side. Records carry
``buffer``, ``mechanism``, ``huge_page_share`` (how much of the send and receive buffers the kernel
really backed with huge pages) and the usual timing fields; meta says the kernel's
transparent huge page mode. Where the single-copy path cannot work (a container without
ptrace) its records are missing and meta says why.
"""

from __future__ import annotations

import sys

from .. import pingpong, validate
from ..buffers import BUFFER_KINDS
from . import finish, parser


def main(argv=None) -> int:
    p = parser("buffers", __doc__, transport=False, reps=5, rounds=3, min_time=0.01,
               sizes="1M,4M,16M")
    p.add_argument("--kinds", default=",".join(BUFFER_KINDS),
                   help="buffer kinds: " + ", ".join(BUFFER_KINDS))
    p.add_argument("--mechanisms", default=",".join(pingpong.MECHANISMS),
                   help="large-message paths: " + ", ".join(pingpong.MECHANISMS))
    a = p.parse_args(argv)

    def measure():
        return pingpong.run_buffers(validate.sizes(a.sizes), kinds=a.kinds,
                                    mechanisms=a.mechanisms, reps=a.reps, rounds=a.rounds,
                                    min_time=a.min_time, timeout=a.timeout)

    def show(m, recs):
        s = m["settings"]
        return (f"# {m['mpi_library_version']} | shm | 2 ranks on {m['cores']} cores"
                + (" (oversubscribed)" if m.get("oversubscribed") else "")
                + f" | transparent huge pages: {s['transparent_hugepages']}\n"
                + "".join(f"# {k} not measured: {why}\n" for k, why in s["skipped"].items())
                + pingpong.buffers_table(recs))

    return finish("buffers", a.json, measure, show)


if __name__ == "__main__":
    sys.exit(main())
