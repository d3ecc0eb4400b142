"""CoArray (mpilab.coarray_view) checks run under mpiexec at an explicit rank count.

Run by tests/test_coarray_view.py. Puts and Gets, contiguous and strided, land where the
index says after sync_all and nowhere else; a halo exchange on a ring of blocks with
CoArray equals the same exchange done with Sendrecv; bad images, indices and value
shapes raise on the calling image before any MPI call; free is collective and final.
"""

import numpy as np
from mpicheck import check, comm, expect, finish, raises, rank, size

from mpilab.coarray_view import CoArray

me = rank + 1
right, left = me % size + 1, (me - 2) % size + 1


@check
def put_into_right_neighbour_lands_after_sync_all():
    with CoArray(comm, 4) as a:
        expect(a.this_image == me and a.num_images == size, "image numbering")
        expect(np.array_equal(a.local, np.zeros(4)), "block not zeroed")
        a.sync_all()  # nobody puts before everybody has looked at its zeroed block
        a[right][1:3] = [10.0 * me, 10.0 * me + 1]
        a.sync_all()
        expect(np.array_equal(a.local, [0, 10.0 * left, 10.0 * left + 1, 0]),
               f"after sync_all: {a.local}")


@check
def get_from_left_neighbour_is_defined_after_sync_all():
    with CoArray(comm, (3,), np.int64) as a:
        a.local[:] = [me, 2 * me, 3 * me]
        a.sync_all()
        got = a[left][0:3:2]
        a.sync_all()
        expect(got.dtype == np.int64 and got.tolist() == [left, 3 * left], f"got {got}")
        one = a[left][1]
        a.sync_all()
        expect(one.shape == () and int(one) == 2 * left, f"scalar get {one!r}")


@check
def strided_column_put_and_get():
    """A column of a C-order block is strided: it must go with an indexed datatype."""
    with CoArray(comm, (5, 4)) as a:
        a.local[:] = -1.0
        a.sync_all()
        col = np.arange(5.0) + 100 * me
        a[right][:, 0] = col                 # column 0 of my right neighbour
        a[right][0:5:2, 3] = 7.0             # every other row, last column (broadcast)
        a.sync_all()
        want = np.full((5, 4), -1.0)
        want[:, 0] = np.arange(5.0) + 100 * left
        want[0:5:2, 3] = 7.0
        expect(np.array_equal(a.local, want), f"strided puts:\n{a.local}")
        g = a[left][1:4, 0]
        a.sync_all()
        expect(np.array_equal(g, np.arange(1.0, 4.0) + 100 * ((left - 2) % size + 1)),
               f"strided get {g}")


@check
def sections_in_any_order_land_where_their_index_says():
    """Whole rows go as one contiguous Put or Get; a reversed row or column, or a block of
    columns, is not contiguous in the target and needs the indexed datatype."""
    def put_by(k):
        want = np.full((4, 5), -1.0)
        want[1:3, :] = np.arange(10.0).reshape(2, 5) + 100 * k
        want[3, ::-1] = np.arange(5.0) + 200 * k
        want[::-1, 4] = np.arange(4.0) + 300 * k
        want[0, 1:3] = 400.0 * k
        return want

    with CoArray(comm, (4, 5)) as a:
        a.local[:] = -1.0
        a.sync_all()
        a[right][1:3, :] = np.arange(10.0).reshape(2, 5) + 100 * me  # contiguous rows
        a[right][3, ::-1] = np.arange(5.0) + 200 * me                # a row, reversed
        a.sync_all()
        a[right][::-1, 4] = np.arange(4.0) + 300 * me                # a column, reversed
        a[right][0, 1:3] = 400.0 * me
        a.sync_all()
        expect(np.array_equal(a.local, put_by(left)), f"puts:\n{a.local}")
        got = [a[left][1:3, :], a[left][3, ::-1], a[left][::-1, 1:3], a[left][2:3, 0:5]]
        a.sync_all()
        theirs = put_by((left - 2) % size + 1)
        for g, want in zip(got, [theirs[1:3, :], theirs[3, ::-1], theirs[::-1, 1:3],
                                 theirs[2:3, 0:5]], strict=True):
            expect(np.array_equal(g, want), f"get {g} expected {want}")


@check
def ring_halo_equals_sendrecv():
    """Each image puts its edge rows into its neighbours' ghost rows (lecture 04's ring)."""
    n = 6
    block = np.arange(n * 3, dtype=float).reshape(n, 3) + 1000 * me
    with CoArray(comm, (n + 2, 3)) as u:
        u.local[1:-1] = block
        u.sync_all()
        u[right][0] = u.local[n]       # my last row -> right's top ghost
        u[left][n + 1] = u.local[1]    # my first row -> left's bottom ghost
        u.sync_all()
        top, bottom = np.empty(3), np.empty(3)
        comm.Sendrecv(block[-1].copy(), right - 1, 1, top, left - 1, 1)
        comm.Sendrecv(block[0].copy(), left - 1, 2, bottom, right - 1, 2)
        expect(np.array_equal(u.local[0], top) and np.array_equal(u.local[n + 1], bottom),
               f"ghosts {u.local[0]}, {u.local[n + 1]} vs {top}, {bottom}")
        expect(np.array_equal(u.local[1:-1], block), "interior changed")


@check
def put_to_self_and_to_every_image():
    with CoArray(comm, size, np.int32) as a:
        for k in range(1, size + 1):
            a[k][rank] = me          # element `rank` of every image: no two puts collide
        a.sync_all()
        expect(a.local.tolist() == list(range(1, size + 1)), f"{a.local}")


@check
def bad_arguments_raise_before_any_mpi_call():
    with CoArray(comm, (2, 3)) as a:
        raises(ValueError, a.__getitem__, 0)
        raises(ValueError, a.__getitem__, size + 1)
        raises(TypeError, a.__getitem__, 1.0)
        raises(TypeError, a.__getitem__, True)
        img = a[me]
        raises(IndexError, img.__getitem__, (2, 0))
        raises(IndexError, img.__getitem__, (0, 0, 0))
        raises(IndexError, img.__getitem__, [0, 1])
        raises(ValueError, img.__setitem__, (0, slice(None)), [1.0, 2.0])
        a.sync_all()
        expect(np.array_equal(a.local, np.zeros((2, 3))), "a refused put wrote something")
    raises(RuntimeError, a.sync_all)
    raises(RuntimeError, a.__getitem__, 1)
    a.free()  # idempotent, no MPI call
    raises(ValueError, CoArray, comm, (0,))
    raises(ValueError, CoArray, comm, ())
    raises(TypeError, CoArray, comm, 3, object)
    raises(TypeError, CoArray, "comm", 3)


finish()
