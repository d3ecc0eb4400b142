"""Answer cells that cheat, for every lab's hostile submission (labs 01-07).

Lab 00's corpus (tests/test_grading_hostile.py) attacks the grading machinery: crashes,
hangs, floods, the sandbox. These attack the *verdicts*: each is an answer a student could
hand in to earn points without doing the part, one attack per cell, beside honest cells
of the same notebook. The lab's own test module grades them with its other submissions
(tests/grading_batch.py) and asserts what an honest grader gives: nothing for the cheated
part, full marks for the honest ones, a message that names what was refused.

The kinds of attack, and where each is used:

* **tampering on the ranks**: a student's function patches the course's modules in the
  process of the grader's MPI ranks, which run the checks' harnesses after it
  (:data:`LAB01_PINGPONG_PATCHES_THE_REFERENCE`);
* **answer lookup**: a function that calls the course's own answer, shipped in the
  package: the reference models of ``mpilab.grading``, the cost models of
  ``mpilab.collectives``, the course's compiled kernels (:func:`lookup`);
* **hard-coded outputs**: the numbers the visible test expects
  (:func:`lab01_fit_hard_coded`), the reference link's numbers (:func:`lab07_predict_hard_coded`);
* **a prediction that calls the measurement** (:data:`LAB03_EPOCH_MEASURES`) or ignores
  what it is given (:data:`LAB01_PREDICT_IGNORES_SIZE`);
* **reading the grader's files** from the ranks (:func:`reads_the_graders_files`);
* each lab's own cheat: a halo that gathers the whole field (lab 02), a one-sided
  exchange by Sendrecv (lab 03), a coarray push that is a Put + Fence (lab 04), a
  hand-written collective that calls the library's (labs 05 and 06), a link model with
  the reference link's numbers (lab 07).
"""

from __future__ import annotations

import json

import numpy as np

from mpilab.autograder.course import REPO


def lookup(name: str, params: str, call: str, doc: str) -> str:
    """A graded function that returns what the course's own code returns: `call` (an
    expression of `params`), imported inside the function as a student would."""
    return f'''
def {name}({params}):
    """{doc}"""
    {call}
'''


def reads_the_graders_files(code: str, name: str) -> str:
    """`code` (a correct function `name`) that first tries to read the grader's files
    from the ranks: the labs' sources, the grader's measurements kept under /tmp, the
    gradebook, the instructors' side (autograder/, its hidden cases' saved simulations).
    What it can read, it reports by raising (so the part fails naming it, and an honest
    grader's full marks for the part show it read nothing). The course's reference/ is
    not among them: it is every student's (the students' edition), and the sandbox binds
    it for the labs' own cells."""
    head = f"def {name}("
    assert head in code, name
    probe = '''
    import glob as _glob

    _read = []
    for _pattern in ("/work/*/labs/*/*.ipynb", "/tmp/mpilab-grading-*/*", "/root/*",
                     "/home/*/*", "/srv/*/autograder/gradebook.db", "/work/*/autograder/*",
                     "/work/*/autograder/reference/*"):
        for _path in _glob.glob(_pattern):
            try:
                with open(_path, "rb") as _f:
                    _read.append((_path, _f.read(100)))
            except OSError:
                pass
    if _read:
        raise RuntimeError(f"READ the grader's files: {_read[:3]}")
'''
    start = code.index(head)
    body = code.index(":\n", start) + 2
    # after the docstring, when there is one
    rest = code[body:]
    lines = rest.splitlines(keepends=True)
    i = 0
    if lines and lines[0].strip().startswith('"""'):
        i = 1 if lines[0].strip().count('"""') == 2 else next(
            k for k in range(1, len(lines)) if '"""' in lines[k]) + 1
    return code[:body] + "".join(lines[:i]) + probe + "".join(lines[i:])


# -- lab 01 ------------------------------------------------------------------------------

#: One round trip whatever `iters` says, a made-up time, and the course's ping-pong on the
#: ranks replaced by one that agrees with it: the grader's ranks keep their modules from
#: one call to the next, and the test cell measures its reference there after the
#: student's runs.
LAB01_PINGPONG_PATCHES_THE_REFERENCE = '''
def pingpong(comm, nbytes, iters):
    """One round trip, a time of 0.001 µs, and the course's reference made to agree."""
    import mpilab.pingpong as _pp

    def _agrees(comm, sizes, impls=("mpi4py",), iters=1, reps=1, **kwargs):
        return [{"t_us_min": 1e-3, "size_bytes": int(n)} for n in sizes]

    _pp.measure_pingpong = _agrees
    rank = comm.Get_rank()
    sbuf, rbuf = payload(nbytes), np.zeros(nbytes, dtype=np.uint8)
    if rank == 0:
        comm.Send(sbuf, dest=1)
        comm.Recv(rbuf, source=1)
    elif rank == 1:
        comm.Recv(rbuf, source=0)
        comm.Send(rbuf, dest=0)
    return 1e-3, rbuf
'''


def lab01_visible_fit() -> tuple[float, float]:
    """(α, β) the visible test of ``fit_alpha_beta`` expects: its own reference fit of the
    lab's measured data, as a student can compute it when writing the notebook."""
    doc = json.loads((REPO / "labs" / "lab01-pingpong" / "pingpong_measured.json").read_text())
    recs = [r for r in doc["records"] if r["impl"] == "kernel"]
    n = np.array([r["size_bytes"] for r in recs], dtype=float)
    t = np.array([r["t_us_min"] for r in recs])
    (a, inv_b), *_ = np.linalg.lstsq(np.stack([1 / t, n / t], axis=1), np.ones_like(t),
                                     rcond=None)
    return float(a), float(1 / inv_b)


def lab01_fit_hard_coded() -> str:
    a, b = lab01_visible_fit()
    return f'''
def fit_alpha_beta(n_bytes, t_us):
    """The numbers the visible test expects, whatever the data."""
    return {a!r}, {b!r}
'''


#: The held-out size's prediction for every size: right for the measured case only.
LAB01_PREDICT_IGNORES_SIZE = '''
def predict_us(n_bytes, alpha_us, beta_MBps):
    """α + 4 MiB / β: the held-out message, whatever size is asked."""
    return alpha_us + (4 << 20) / beta_MBps


def half_bandwidth_bytes(alpha_us, beta_MBps):
    """n½ = α·β (honest)."""
    return alpha_us * beta_MBps
'''

#: Part E's model as the grader's own reference, which ships in the students' edition
#: (one of ``mpilab.autograder.edition.KNOWN``: the lab's text states the formula).
LAB01_PREDICT_BEHIND_LOOKUP = lookup(
    "predict_behind_us", "depth, t0_us, cost_ns",
    "from mpilab.grading.pingpong import reference_behind_us\n"
    "    return reference_behind_us(depth, t0_us, cost_ns)",
    "The grader's own model, from the course's package.")

# -- lab 02 ------------------------------------------------------------------------------

#: Every rank gathers every block and cuts its ghost cells out of the whole field.
LAB02_GATHERS_THE_FIELD = '''
def exchange_sendrecv(cart, u):
    """Gather all blocks everywhere, then copy the neighbours' edges from them."""
    py, px = cart.Get_topo()[0]
    cy, cx = cart.Get_coords(cart.Get_rank())
    blocks = dict(cart.allgather(((cy, cx), u[1:-1, 1:-1].copy())))
    if cy > 0:
        u[0, 1:-1] = blocks[(cy - 1, cx)][-1, :]
    if cy < py - 1:
        u[-1, 1:-1] = blocks[(cy + 1, cx)][0, :]
    if cx > 0:
        u[1:-1, 0] = blocks[(cy, cx - 1)][:, -1]
    if cx < px - 1:
        u[1:-1, -1] = blocks[(cy, cx + 1)][:, 0]
'''

LAB02_EXCHANGE_US_LOOKUP = lookup(
    "exchange_us", "nx, ny, dims, alpha_us, beta_MBps",
    "from mpilab.grading.halo_model import reference_exchange_us\n"
    "    return reference_exchange_us(nx, ny, dims, alpha_us, beta_MBps)",
    "The grader's own model, from the course's package.")

# -- lab 03 ------------------------------------------------------------------------------

#: A window and two fences for show; the edges travel by Sendrecv, fetched by a name the
#: source check cannot read.
LAB03_PUT_IS_SENDRECV = '''
def exchange_put(cart, u):
    """Dressed as one-sided (Win.Create, Fence, a Put never made); moved by Sendrecv."""
    from mpi4py import MPI

    win = MPI.Win.Create(u, comm=cart)
    win.Fence()
    if u.size < 0:
        win.Put(u, 0)
    move = getattr(cart, "Send" + "recv")
    north, south = cart.Shift(0, 1)
    west, east = cart.Shift(1, 1)
    rows, cols = u.shape[0] - 2, u.shape[1] - 2
    got = np.zeros(cols)
    move(np.ascontiguousarray(u[1, 1:-1]), dest=north, recvbuf=got, source=south)
    if south != MPI.PROC_NULL:
        u[-1, 1:-1] = got
    move(np.ascontiguousarray(u[-2, 1:-1]), dest=south, recvbuf=got, source=north)
    if north != MPI.PROC_NULL:
        u[0, 1:-1] = got
    got = np.zeros(rows)
    move(np.ascontiguousarray(u[1:-1, 1]), dest=west, recvbuf=got, source=east)
    if east != MPI.PROC_NULL:
        u[1:-1, -1] = got
    move(np.ascontiguousarray(u[1:-1, -2]), dest=east, recvbuf=got, source=west)
    if west != MPI.PROC_NULL:
        u[1:-1, 0] = got
    win.Fence()
    win.Free()
'''

#: The prediction is the grader's own measurement, made when it is called.
LAB03_EPOCH_MEASURES = lookup(
    "epoch_us", "n_bytes, empty_epoch_us, beta_MBps",
    "from mpilab.grading.onesided_model import epoch_now\n"
    "    return epoch_now(4)[\"epoch_us\"]",
    "Not a model: the epoch measured now, as the check measures it.")

# -- lab 04 ------------------------------------------------------------------------------

#: A coarray made, stored into and synchronised for show; the edges travel by a window's
#: Put + Fence in a helper the exchange calls (so its own source reads like a push).
LAB04_PUSH_IS_PUT_AND_FENCE = '''
def _edges_by_put(cart, u):
    from mpi4py import MPI

    north, south = cart.Shift(0, 1)
    west, east = cart.Shift(1, 1)
    rows, cols = u.shape[0] - 2, u.shape[1] - 2
    shapes = cart.allgather(u.shape)
    win = MPI.Win.Create(u, disp_unit=u.itemsize, comm=cart)
    win.Fence()
    if south != MPI.PROC_NULL:
        win.Put(np.ascontiguousarray(u[-2, 1:-1]), south, target=(1, cols, MPI.DOUBLE))
    if north != MPI.PROC_NULL:
        last = shapes[north][0] - 1
        win.Put(np.ascontiguousarray(u[1, 1:-1]), north,
                target=(last * (cols + 2) + 1, cols, MPI.DOUBLE))
    win.Fence()
    win.Free()
    for dest, src, mine, theirs in ((east, west, -2, 0), (west, east, 1, -1)):
        got = np.zeros(rows)
        win = MPI.Win.Create(got, disp_unit=got.itemsize, comm=cart)
        win.Fence()
        if dest != MPI.PROC_NULL:
            win.Put(np.ascontiguousarray(u[1:-1, mine]), dest)
        win.Fence()
        win.Free()
        if src != MPI.PROC_NULL:
            u[1:-1, theirs] = got


def exchange_push(cart, u):
    """Reads like a push (CoArray, a store, sync_all); the edges move by Put + Fence."""
    from mpilab.coarray_view import CoArray

    x = CoArray(cart, (1, 1))
    x[cart.Get_rank() + 1][0, :1] = 0.0
    x.sync_all()
    _edges_by_put(cart, u)
    x.free()
'''

LAB04_PUSH_US_LOOKUP = lookup(
    "push_us", "n_bytes, tiny_push_us, copy_MBps",
    "from mpilab.grading.coarrays import reference_push_us\n"
    "    return reference_push_us(n_bytes, tiny_push_us, copy_MBps)",
    "The grader's own model, from the course's package.")

# -- lab 05 ------------------------------------------------------------------------------

#: The library's broadcast on the communicator under the tracer, and a binomial tree's
#: messages written into the tracer's log by its own (private) methods.
LAB05_BCAST_LIBRARY_FORGED_TRACE = '''
def bcast_binomial(comm, buf, root):
    """comm.Bcast underneath, and the binomial tree's messages logged by hand."""
    comm._comm.Bcast(buf, root=root)
    p = comm.Get_size()
    me = (comm.Get_rank() - root) % p
    mask = 1
    while mask < p:
        if me < mask and me + mask < p:
            comm._send((me + mask + root) % p, buf.nbytes)
        elif mask <= me < 2 * mask:
            comm._recv(None, (me - mask + root) % p, buf.nbytes)
        mask <<= 1
'''

#: The library's allreduce on the communicator under the tracer: no message is traced.
LAB05_ALLREDUCE_LIBRARY = '''
def allreduce_butterfly(comm, sendbuf, recvbuf):
    """comm.Allreduce on the communicator underneath the tracer."""
    comm._comm.Allreduce(sendbuf, recvbuf)
'''

LAB05_BCAST_US_LOOKUP = lookup(
    "bcast_us", "alg, p, n_bytes, alpha_us, beta_MBps",
    "from mpilab import collectives\n"
    "    return collectives.algorithm(\"bcast\", alg).time_us(p, n_bytes, alpha_us, beta_MBps)",
    "The course's own cost model of the broadcast.")

# -- lab 06 ------------------------------------------------------------------------------

#: The course's compiled ring (mpilab.kernels.collectives) on the communicator under the
#: tracer.
LAB06_RING_IS_THE_COURSES_KERNEL = '''
def allgather_ring(comm, sendbuf, recvbuf):
    """The course's own compiled ring allgather, underneath the tracer."""
    from mpilab.kernels import collectives as _k

    _k.run(comm._comm, "allgather", "ring", sendbuf, recvbuf)
'''

LAB06_ALLGATHER_US_LOOKUP = lookup(
    "allgather_us", "alg, p, block_bytes, alpha_us, beta_MBps",
    "from mpilab import collectives\n"
    "    return collectives.predict(\"allgather\", alg, p, block_bytes, alpha_us,\n"
    "                               beta_MBps).t_us",
    "The course's own cost model of the allgather.")

# -- lab 07 ------------------------------------------------------------------------------


def lab07_reference_link() -> tuple[float, float]:
    """(α µs, β MB/s) of the reference link shipped in reference/, fitted as the grader
    fits it: what a student can copy into the notebook."""
    from mpilab import network
    from mpilab.grading import network as checks

    n, t = checks._series(network.reference())
    return checks.reference_fit(n, t, checks.BIG_BYTES)


def lab07_predict_hard_coded() -> str:
    a, b = lab07_reference_link()
    return f'''
def predict_ms(schedule, hosts, alpha_us, beta_MBps):
    """The reference link's α and β, copied when the notebook was written, whatever link
    the prediction is asked for."""
    return sum({a!r} + load / {b!r} for load in link_loads(schedule, hosts) if load) / 1e3
'''


#: Part A's fit as the grader's own, which ships in the students' edition (one of
#: ``mpilab.autograder.edition.KNOWN``: the lab's text states the recipe).
LAB07_FIT_LINK_LOOKUP = lookup(
    "fit_link", "n_bytes, t_us, big_bytes",
    "from mpilab.grading.network import reference_fit\n"
    "    return reference_fit(n_bytes, t_us, big_bytes)",
    "The grader's own fit, from the course's package.")

LAB07_BEST_PLACEMENT_LOOKUP = lookup(
    "best_placement", "schedule, nodes",
    "from mpilab.grading.network import reference_best\n"
    "    return reference_best(schedule, nodes)[1]",
    "The grader's own search, from the course's package.")


def lab02_step_with_forged_source(solution: str) -> str:
    """A step that waits for the whole halo before computing (no overlap), and a cell that
    makes ``inspect.getsource`` in the student's kernel return the lab's solution for it:
    the structure check would read the forged text if it trusted that kernel."""
    return f'''
import inspect as _inspect

_real_getsource = _inspect.getsource
_FORGED = {solution!r}


def _getsource(obj):
    if getattr(obj, "__name__", "") == "step_overlap":
        return _FORGED
    return _real_getsource(obj)


_inspect.getsource = _getsource


def step_overlap(cart, old, new):
    """The whole halo first, then the whole step: nothing overlaps."""
    exchange_nonblocking(cart, old)
    halo.heat_step(old, new)
'''
