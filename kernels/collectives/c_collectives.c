/*
 * c_collectives.c - collective operations built from point-to-point messages only.
 *
 * Purpose: the algorithms of lectures 05-06 (the DECK and allgather papers; alltoall and
 * reduce-scatter), next to the library's own collective, timed with the one protocol
 * (mpilab_timing.h) and traced.
 * Algorithm: every operation is a fixed schedule of MPI_Send / MPI_Recv / MPI_Sendrecv /
 * MPI_Isend between ranks (trees, rings, butterflies); reductions are applied here in C on
 * typed data. Traces record a send when posted and a receive when complete.
 *
 *   comm          - communicator; every rank calls (collective)
 *   op, alg       - MPILAB_COLL_* and the algorithm (0 = the library's collective)
 *   sbuf, rbuf    - send / receive buffers (bcast works in rbuf; sizes as MPI's collective,
 *                   count elements per rank block; root-only buffers may be NULL elsewhere;
 *                   alltoall: p blocks each; reduce_scatter_block: p blocks in, one out)
 *   count         - elements per block; dtype - MPILAB_FLOAT64 ...; redop - MPILAB_OP_*
 *   root          - root rank (bcast, reduce, scatter, gather)
 *   work          - scratch of mpilab_coll_work_bytes() bytes (NULL when that is 0)
 *   trace, trace_cap, trace_n - when trace != NULL, events (kind, peer, nbytes) in program
 *                   order, 3 long longs each, at most trace_cap; *trace_n = events made
 *   warmup, iters, reps, times - the timing protocol (mpilab_timing.h), seconds per call
 * Returns an MPI error code. Arguments are checked by the Cython wrapper, not here.
 */
#include <stdlib.h>
#include <string.h>
#include "c_collectives.h"
#include "mpilab_timing.h"

#define COLL_TAG 7100

typedef struct {
    MPI_Comm comm;
    int me, p, tag;
    long long *trace;
    int cap, n;
} cx;

/* ------------------------------------------------------------------ messages + trace */

static void record(cx *c, int kind, int peer, int nbytes)
{
    if (c->n < c->cap) {
        c->trace[3 * c->n] = kind;
        c->trace[3 * c->n + 1] = peer;
        c->trace[3 * c->n + 2] = nbytes;
    }
    c->n++;
}

static int x_send(cx *c, const void *buf, int nbytes, int peer)
{
    if (c->trace) record(c, MPILAB_EV_SEND, peer, nbytes);
    return MPI_Send(buf, nbytes, MPI_BYTE, peer, c->tag, c->comm);
}

/* Nonblocking send: traced when posted. */
static int x_isend(cx *c, const void *buf, int nbytes, int peer, MPI_Request *req)
{
    if (c->trace) record(c, MPILAB_EV_SEND, peer, nbytes);
    return MPI_Isend(buf, nbytes, MPI_BYTE, peer, c->tag, c->comm, req);
}

static int x_recv(cx *c, void *buf, int nbytes, int peer)
{
    int err = MPI_Recv(buf, nbytes, MPI_BYTE, peer, c->tag, c->comm, MPI_STATUS_IGNORE);
    if (c->trace && err == MPI_SUCCESS) record(c, MPILAB_EV_RECV, peer, nbytes);
    return err;
}

static int x_sendrecv(cx *c, const void *sb, int sn, int dst, void *rb, int rn, int src)
{
    int err;
    if (c->trace) record(c, MPILAB_EV_SEND, dst, sn);
    err = MPI_Sendrecv(sb, sn, MPI_BYTE, dst, c->tag, rb, rn, MPI_BYTE, src, c->tag,
                       c->comm, MPI_STATUS_IGNORE);
    if (c->trace && err == MPI_SUCCESS) record(c, MPILAB_EV_RECV, src, rn);
    return err;
}

static void cp(void *dst, const void *src, size_t n)
{
    if (n && dst != src) memcpy(dst, src, n);
}

#define TRY(call) do { if ((err = (call)) != MPI_SUCCESS) return err; } while (0)

/* ------------------------------------------------------------------ typed reduction */

int mpilab_coll_elem_size(int dtype)
{
    switch (dtype) {
    case MPILAB_FLOAT64: return 8;
    case MPILAB_FLOAT32: return 4;
    case MPILAB_INT32: return 4;
    case MPILAB_INT64: return 8;
    case MPILAB_UINT8: return 1;
    }
    return 0;
}

#define REDUCE_LOOP(T)                                                          \
    do {                                                                        \
        T *a = (T *)acc;                                                        \
        const T *b = (const T *)in;                                             \
        switch (redop) {                                                        \
        case MPILAB_OP_SUM: for (i = 0; i < count; i++) a[i] += b[i]; break;   \
        case MPILAB_OP_PROD: for (i = 0; i < count; i++) a[i] *= b[i]; break;  \
        case MPILAB_OP_MAX:                                                     \
            for (i = 0; i < count; i++) if (b[i] > a[i]) a[i] = b[i];           \
            break;                                                              \
        case MPILAB_OP_MIN:                                                     \
            for (i = 0; i < count; i++) if (b[i] < a[i]) a[i] = b[i];           \
            break;                                                              \
        }                                                                       \
    } while (0)

/* acc[i] = acc[i] (op) in[i] for count elements of dtype */
static void reduce_into(void *acc, const void *in, int count, int dtype, int redop)
{
    int i;
    switch (dtype) {
    case MPILAB_FLOAT64: REDUCE_LOOP(double); break;
    case MPILAB_FLOAT32: REDUCE_LOOP(float); break;
    case MPILAB_INT32: REDUCE_LOOP(int); break;
    case MPILAB_INT64: REDUCE_LOOP(long long); break;
    case MPILAB_UINT8: REDUCE_LOOP(unsigned char); break;
    }
}

static MPI_Datatype mpi_type(int dtype)
{
    switch (dtype) {
    case MPILAB_FLOAT64: return MPI_DOUBLE;
    case MPILAB_FLOAT32: return MPI_FLOAT;
    case MPILAB_INT32: return MPI_INT32_T;
    case MPILAB_INT64: return MPI_INT64_T;
    default: return MPI_UINT8_T;
    }
}

static MPI_Op mpi_op(int redop)
{
    switch (redop) {
    case MPILAB_OP_MAX: return MPI_MAX;
    case MPILAB_OP_MIN: return MPI_MIN;
    case MPILAB_OP_PROD: return MPI_PROD;
    default: return MPI_SUM;
    }
}

/* ------------------------------------------------------------------ helpers */

static int pof2_floor(int p)
{
    int q = 1;
    while (q * 2 <= p) q *= 2;
    return q;
}

static int highbit(int v)
{
    int h = 1;
    while (h * 2 <= v) h *= 2;
    return h;
}

static int lowbit(int v) { return v & -v; }

/* p blocks of `count` elements split as evenly as possible: block i's offset and size */
static int chunk_disp(int i, int count, int parts)
{
    int q = count / parts, r = count % parts;
    return i * q + (i < r ? i : r);
}

static int chunk_count(int i, int count, int parts)
{
    return count / parts + (i < count % parts ? 1 : 0);
}

#define REAL(vr) (((vr) + root) % c->p)

/* ------------------------------------------------------------------ broadcast */

/* Root posts a send of the whole buffer to every other rank (nonblocking, in rank
 * order, as MPI libraries' linear broadcast), then waits for all of them. */
static int bcast_linear(cx *c, char *buf, int nb, int root)
{
    int err = MPI_SUCCESS, i, n = 0;
    MPI_Request local[64], *req = local;
    if (c->me != root) return x_recv(c, buf, nb, root);
    if (c->p - 1 > 64 && !(req = malloc((size_t)(c->p - 1) * sizeof *req))) return MPI_ERR_NO_MEM;
    for (i = 1; i < c->p && err == MPI_SUCCESS; i++)
        if ((err = x_isend(c, buf, nb, REAL(i), &req[n])) == MPI_SUCCESS) n++;
    if (n) {
        int werr = MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
        if (err == MPI_SUCCESS) err = werr;
    }
    if (req != local) free(req);
    return err;
}

/* DECK's binary tree: vr receives from (vr-1)/2 and forwards to 2vr+1 and 2vr+2. */
static int bcast_binary_tree(cx *c, char *buf, int nb, int root)
{
    int err, k, vr = (c->me - root + c->p) % c->p;
    if (vr > 0) TRY(x_recv(c, buf, nb, REAL((vr - 1) / 2)));
    for (k = 1; k <= 2; k++)
        if (2 * vr + k < c->p) TRY(x_send(c, buf, nb, REAL(2 * vr + k)));
    return MPI_SUCCESS;
}

/* Binomial tree by stages: at stage k every rank vr < 2^k that has the data sends it to
 * vr + 2^k (0->1; 0->2, 1->3; 0->4, 1->5, 2->6, 3->7), so ceil(log2 p) stages. */
static int bcast_binomial(cx *c, char *buf, int nb, int root)
{
    int err, mask = 1, vr = (c->me - root + c->p) % c->p;
    if (vr > 0) {
        int h = highbit(vr);
        TRY(x_recv(c, buf, nb, REAL(vr - h)));
        mask = h << 1;
    }
    for (; mask < c->p; mask <<= 1)
        if (vr + mask < c->p) TRY(x_send(c, buf, nb, REAL(vr + mask)));
    return MPI_SUCCESS;
}

/* ------------------------------------------------------------------ reduce */

/* DECK: every rank sends its vector to the root, which reduces them all once. */
static int reduce_gather_reduce(cx *c, const char *sbuf, char *rbuf, int count, int dtype,
                                int redop, int root, char *work)
{
    int err, i, nb = count * mpilab_coll_elem_size(dtype);
    if (c->me != root) return x_send(c, sbuf, nb, root);
    for (i = 1; i < c->p; i++) TRY(x_recv(c, work + (size_t)(i - 1) * nb, nb, REAL(i)));
    cp(rbuf, sbuf, nb);
    for (i = 1; i < c->p; i++) reduce_into(rbuf, work + (size_t)(i - 1) * nb, count, dtype, redop);
    return MPI_SUCCESS;
}

/* Binomial tree: at step 2^k a rank with bit k set sends its partial result to vr - 2^k
 * and leaves; the others receive from vr + 2^k and reduce. */
static int reduce_binomial(cx *c, const char *sbuf, char *rbuf, int count, int dtype,
                           int redop, int root, char *work)
{
    int err, mask, nb = count * mpilab_coll_elem_size(dtype);
    int vr = (c->me - root + c->p) % c->p;
    char *acc = vr == 0 ? rbuf : work, *tmp = vr == 0 ? work : work + nb;
    cp(acc, sbuf, nb);
    for (mask = 1; mask < c->p; mask <<= 1) {
        if (vr & mask) return x_send(c, acc, nb, REAL(vr - mask));
        if (vr + mask < c->p) {
            TRY(x_recv(c, tmp, nb, REAL(vr + mask)));
            reduce_into(acc, tmp, count, dtype, redop);
        }
    }
    return MPI_SUCCESS;
}

/* Butterfly: reduce-scatter by recursive halving among the largest power of two pof2
 * (the first 2*(p - pof2) ranks fold pairwise into it first), then a binomial gather of
 * the reduced pieces to the root. */
static int reduce_recursive_halving(cx *c, const char *sbuf, char *rbuf, int count,
                                    int dtype, int redop, int root, char *work)
{
    int err, mask, es = mpilab_coll_elem_size(dtype), nb = count * es;
    int vr = (c->me - root + c->p) % c->p, pof2 = pof2_floor(c->p), rem = c->p - pof2;
    int nr, lo = 0;
    char *acc = work, *tmp = work + nb;
    cp(acc, sbuf, nb);
    if (vr < 2 * rem) {
        if (vr & 1) return x_send(c, acc, nb, REAL(vr - 1));
        TRY(x_recv(c, tmp, nb, REAL(vr + 1)));
        reduce_into(acc, tmp, count, dtype, redop);
        nr = vr / 2;
    } else {
        nr = vr - rem;
    }
#define NR2REAL(q) REAL((q) < rem ? 2 * (q) : (q) + rem)
    for (mask = pof2 >> 1; mask > 0; mask >>= 1) {
        int keep = (nr & mask) ? lo + mask : lo, give = (nr & mask) ? lo : lo + mask;
        int kd = chunk_disp(keep, count, pof2), kn = chunk_disp(keep + mask, count, pof2) - kd;
        int gd = chunk_disp(give, count, pof2), gn = chunk_disp(give + mask, count, pof2) - gd;
        TRY(x_sendrecv(c, acc + (size_t)gd * es, gn * es, NR2REAL(nr ^ mask),
                       tmp + (size_t)kd * es, kn * es, NR2REAL(nr ^ mask)));
        reduce_into(acc + (size_t)kd * es, tmp + (size_t)kd * es, kn, dtype, redop);
        lo = keep;
    }
    /* acc holds the reduced piece nr; gather pieces [nr, nr + mask) upwards */
    for (mask = 1; mask < pof2; mask <<= 1) {
        if (nr & mask) {
            int d = chunk_disp(nr, count, pof2), e = chunk_disp(nr + mask, count, pof2);
            return x_send(c, acc + (size_t)d * es, (e - d) * es, NR2REAL(nr - mask));
        } else {
            int d = chunk_disp(nr + mask, count, pof2);
            int e = chunk_disp(nr + 2 * mask, count, pof2);
            TRY(x_recv(c, acc + (size_t)d * es, (e - d) * es, NR2REAL(nr + mask)));
        }
    }
#undef NR2REAL
    cp(rbuf, acc, nb); /* only vr 0 (the root) gets here */
    return MPI_SUCCESS;
}

/* ------------------------------------------------------------------ allreduce */

/* Recursive doubling: log2(pof2) pairwise exchanges of the whole vector; with p not a
 * power of two, even ranks among the first 2*rem hand their data to the next odd rank
 * before and get the result back after. */
static int allreduce_recursive_doubling(cx *c, const char *sbuf, char *rbuf, int count,
                                        int dtype, int redop, char *work)
{
    int err, mask, nb = count * mpilab_coll_elem_size(dtype);
    int pof2 = pof2_floor(c->p), rem = c->p - pof2, me = c->me, nr;
    cp(rbuf, sbuf, nb);
    if (me < 2 * rem) {
        if (me % 2 == 0) {
            TRY(x_send(c, rbuf, nb, me + 1));
            nr = -1;
        } else {
            TRY(x_recv(c, work, nb, me - 1));
            reduce_into(rbuf, work, count, dtype, redop);
            nr = me / 2;
        }
    } else {
        nr = me - rem;
    }
    if (nr >= 0) {
        for (mask = 1; mask < pof2; mask <<= 1) {
            int q = nr ^ mask, partner = q < rem ? 2 * q + 1 : q + rem;
            TRY(x_sendrecv(c, rbuf, nb, partner, work, nb, partner));
            reduce_into(rbuf, work, count, dtype, redop);
        }
    }
    if (me < 2 * rem) {
        if (me % 2) TRY(x_send(c, rbuf, nb, me - 1));
        else TRY(x_recv(c, rbuf, nb, me + 1));
    }
    return MPI_SUCCESS;
}

/* Ring: reduce-scatter (p-1 steps, each rank passes a reduced piece to its right) then
 * allgather (p-1 steps passing the finished pieces round). */
static int allreduce_ring(cx *c, const char *sbuf, char *rbuf, int count, int dtype,
                          int redop, char *work)
{
    int err, k, es = mpilab_coll_elem_size(dtype), p = c->p, me = c->me;
    int right = (me + 1) % p, left = (me - 1 + p) % p;
    cp(rbuf, sbuf, (size_t)count * es);
    for (k = 0; k < p - 1; k++) {
        int s = (me - k + p) % p, r = (me - k - 1 + 2 * p) % p;
        TRY(x_sendrecv(c, rbuf + (size_t)chunk_disp(s, count, p) * es,
                       chunk_count(s, count, p) * es, right,
                       work, chunk_count(r, count, p) * es, left));
        reduce_into(rbuf + (size_t)chunk_disp(r, count, p) * es, work,
                    chunk_count(r, count, p), dtype, redop);
    }
    for (k = 0; k < p - 1; k++) {
        int s = (me + 1 - k + p) % p, r = (me - k + p) % p;
        TRY(x_sendrecv(c, rbuf + (size_t)chunk_disp(s, count, p) * es,
                       chunk_count(s, count, p) * es, right,
                       rbuf + (size_t)chunk_disp(r, count, p) * es,
                       chunk_count(r, count, p) * es, left));
    }
    return MPI_SUCCESS;
}

/* ------------------------------------------------------------------ barrier */

/* Everyone reports to rank 0 with an empty message; rank 0 then releases everyone. */
static int barrier_linear(cx *c)
{
    int err, i;
    if (c->me == 0) {
        for (i = 1; i < c->p; i++) TRY(x_recv(c, NULL, 0, i));
        for (i = 1; i < c->p; i++) TRY(x_send(c, NULL, 0, i));
        return MPI_SUCCESS;
    }
    TRY(x_send(c, NULL, 0, 0));
    return x_recv(c, NULL, 0, 0);
}

/* DECK: empty messages up the binary tree to rank 0, then the release down the tree. */
static int barrier_tree(cx *c)
{
    int err, k, me = c->me;
    for (k = 1; k <= 2; k++)
        if (2 * me + k < c->p) TRY(x_recv(c, NULL, 0, 2 * me + k));
    if (me > 0) {
        TRY(x_send(c, NULL, 0, (me - 1) / 2));
        TRY(x_recv(c, NULL, 0, (me - 1) / 2));
    }
    for (k = 1; k <= 2; k++)
        if (2 * me + k < c->p) TRY(x_send(c, NULL, 0, 2 * me + k));
    return MPI_SUCCESS;
}

/* Dissemination: in round k, send to me + 2^k and receive from me - 2^k (mod p). */
static int barrier_dissemination(cx *c)
{
    int err, d;
    for (d = 1; d < c->p; d <<= 1)
        TRY(x_sendrecv(c, NULL, 0, (c->me + d) % c->p, NULL, 0, (c->me - d + c->p) % c->p));
    return MPI_SUCCESS;
}

/* ------------------------------------------------------------------ scatter, gather */

static int scatter_linear(cx *c, const char *sbuf, char *rbuf, int nb, int root)
{
    int err, i;
    if (c->me != root) return x_recv(c, rbuf, nb, root);
    for (i = 1; i < c->p; i++) TRY(x_send(c, sbuf + (size_t)REAL(i) * nb, nb, REAL(i)));
    cp(rbuf, sbuf + (size_t)root * nb, nb);
    return MPI_SUCCESS;
}

static int subtree(int vr, int p)
{
    int lb = lowbit(vr);
    return vr == 0 ? p : (lb < p - vr ? lb : p - vr);
}

/* Binomial tree: vr receives the blocks of its subtree [vr, vr + lowbit(vr)) from
 * vr - lowbit(vr), then hands the upper halves on, largest first. */
static int scatter_binomial(cx *c, const char *sbuf, char *rbuf, int nb, int root,
                            char *work)
{
    int err, j, mask, p = c->p, vr = (c->me - root + p) % p;
    const char *base;
    if (vr == 0) {
        if (root == 0) {
            base = sbuf;
        } else { /* blocks in virtual-rank order */
            cp(work, sbuf + (size_t)root * nb, (size_t)(p - root) * nb);
            cp(work + (size_t)(p - root) * nb, sbuf, (size_t)root * nb);
            base = work;
        }
        mask = p > 1 ? highbit(p - 1) : 0;
    } else {
        TRY(x_recv(c, work, subtree(vr, p) * nb, REAL(vr - lowbit(vr))));
        base = work;
        mask = lowbit(vr) >> 1;
    }
    for (; mask > 0; mask >>= 1) {
        j = vr + mask;
        if (j < p) TRY(x_send(c, base + (size_t)mask * nb, subtree(j, p) * nb, REAL(j)));
    }
    cp(rbuf, base, nb);
    return MPI_SUCCESS;
}

static int gather_linear(cx *c, const char *sbuf, char *rbuf, int nb, int root)
{
    int err, i;
    if (c->me != root) return x_send(c, sbuf, nb, root);
    for (i = 1; i < c->p; i++) TRY(x_recv(c, rbuf + (size_t)REAL(i) * nb, nb, REAL(i)));
    cp(rbuf + (size_t)root * nb, sbuf, nb);
    return MPI_SUCCESS;
}

/* The scatter tree run backwards: collect the subtree's blocks, pass them up. */
static int gather_binomial(cx *c, const char *sbuf, char *rbuf, int nb, int root,
                           char *work)
{
    int err, mask, p = c->p, vr = (c->me - root + p) % p;
    char *base = (vr == 0 && root == 0) ? rbuf : work;
    cp(base, sbuf, nb);
    for (mask = 1; mask < p; mask <<= 1) {
        if (vr & mask) return x_send(c, base, subtree(vr, p) * nb, REAL(vr - mask));
        if (vr + mask < p)
            TRY(x_recv(c, base + (size_t)mask * nb, subtree(vr + mask, p) * nb,
                       REAL(vr + mask)));
    }
    if (root != 0) { /* virtual-rank order back to rank order */
        cp(rbuf + (size_t)root * nb, work, (size_t)(p - root) * nb);
        cp(rbuf, work + (size_t)(p - root) * nb, (size_t)root * nb);
    }
    return MPI_SUCCESS;
}

/* ------------------------------------------------------------------ allgather */

/* Linear gather to rank 0, then linear broadcast of all p blocks from rank 0. */
static int allgather_linear(cx *c, const char *sbuf, char *rbuf, int nb)
{
    int err;
    TRY(gather_linear(c, sbuf, rbuf, nb, 0));
    return bcast_linear(c, rbuf, c->p * nb, 0);
}

/* Bruck: in round k send the first min(2^k, p - 2^k) blocks gathered so far to me - 2^k
 * and append those of me + 2^k; ceil(log2 p) rounds, then rotate the blocks into place. */
static int allgather_bruck(cx *c, const char *sbuf, char *rbuf, int nb, char *work)
{
    int err, d, p = c->p, me = c->me;
    char *tmp = me == 0 ? rbuf : work;
    cp(tmp, sbuf, nb);
    for (d = 1; d < p; d <<= 1) {
        int blocks = d < p - d ? d : p - d;
        TRY(x_sendrecv(c, tmp, blocks * nb, (me - d + p) % p,
                       tmp + (size_t)d * nb, blocks * nb, (me + d) % p));
    }
    if (me != 0) { /* tmp[i] is block me + i */
        cp(rbuf + (size_t)me * nb, tmp, (size_t)(p - me) * nb);
        cp(rbuf, tmp + (size_t)(p - me) * nb, (size_t)me * nb);
    }
    return MPI_SUCCESS;
}

/* Recursive doubling (p a power of two): exchange the 2^k blocks held with me ^ 2^k. */
static int allgather_recursive_doubling(cx *c, const char *sbuf, char *rbuf, int nb)
{
    int err, mask, me = c->me;
    cp(rbuf + (size_t)me * nb, sbuf, nb);
    for (mask = 1; mask < c->p; mask <<= 1) {
        int partner = me ^ mask, mine = me & ~(mask - 1), theirs = partner & ~(mask - 1);
        TRY(x_sendrecv(c, rbuf + (size_t)mine * nb, mask * nb, partner,
                       rbuf + (size_t)theirs * nb, mask * nb, partner));
    }
    return MPI_SUCCESS;
}

/* Ring: p-1 steps, each passing to the right the block received in the step before. */
static int allgather_ring(cx *c, const char *sbuf, char *rbuf, int nb)
{
    int err, k, p = c->p, me = c->me;
    cp(rbuf + (size_t)me * nb, sbuf, nb);
    for (k = 0; k < p - 1; k++) {
        int s = (me - k + p) % p, r = (me - k - 1 + p) % p;
        TRY(x_sendrecv(c, rbuf + (size_t)s * nb, nb, (me + 1) % p,
                       rbuf + (size_t)r * nb, nb, (me - 1 + p) % p));
    }
    return MPI_SUCCESS;
}

/* Neighbor exchange (Chen et al., p even): first swap one block with one neighbour,
 * then p/2 - 1 steps alternating between the two neighbours, each passing on the pair
 * of blocks received in the step before. */
static int allgather_neighbor_exchange(cx *c, const char *sbuf, char *rbuf, int nb)
{
    int err, i, p = c->p, me = c->me, even = me % 2 == 0;
    int nbr[2], from[2], step[2], send_from;
    if (even) {
        nbr[0] = (me + 1) % p;
        nbr[1] = (me - 1 + p) % p;
        from[0] = from[1] = me;
        step[0] = 2;
        step[1] = -2;
    } else {
        nbr[0] = (me - 1 + p) % p;
        nbr[1] = (me + 1) % p;
        from[0] = from[1] = nbr[0];
        step[0] = -2;
        step[1] = 2;
    }
    cp(rbuf + (size_t)me * nb, sbuf, nb);
    TRY(x_sendrecv(c, rbuf + (size_t)me * nb, nb, nbr[0],
                   rbuf + (size_t)nbr[0] * nb, nb, nbr[0]));
    send_from = even ? me : from[0];
    for (i = 1; i < p / 2; i++) {
        int par = i % 2;
        from[par] = (from[par] + step[par] + p) % p;
        TRY(x_sendrecv(c, rbuf + (size_t)send_from * nb, 2 * nb, nbr[par],
                       rbuf + (size_t)from[par] * nb, 2 * nb, nbr[par]));
        send_from = from[par];
    }
    return MPI_SUCCESS;
}

/* Two processes: one exchange, straight from the send buffer; the own block is copied
 * into place after it, off the exchange's critical path. */
static int allgather_two_proc(cx *c, const char *sbuf, char *rbuf, int nb)
{
    int err, other = 1 - c->me;
    TRY(x_sendrecv(c, sbuf, nb, other, rbuf + (size_t)other * nb, nb, other));
    cp(rbuf + (size_t)c->me * nb, sbuf, nb);
    return MPI_SUCCESS;
}

/* ------------------------------------------------------------------ alltoall */

/* Pairwise exchange (Open MPI's "pairwise"): in step k = 1 .. p-1 send the block for
 * me + k to it and receive from me - k the block it holds for me; one block a step. */
static int alltoall_pairwise(cx *c, const char *sbuf, char *rbuf, int nb)
{
    int err, k, p = c->p, me = c->me;
    cp(rbuf + (size_t)me * nb, sbuf + (size_t)me * nb, nb);
    for (k = 1; k < p; k++) {
        int to = (me + k) % p, from = (me - k + p) % p;
        TRY(x_sendrecv(c, sbuf + (size_t)to * nb, nb, to, rbuf + (size_t)from * nb, nb, from));
    }
    return MPI_SUCCESS;
}

/* Bruck: rotate so that slot i holds the block for rank me + i; in round k (d = 2^k)
 * pack every slot whose index has bit k set, send it to me + d and unpack the same
 * slots from me - d. A block moves by the bits of its distance and keeps its slot, so
 * after ceil(log2 p) rounds slot i holds rank me - i's block for me: rotate back. */
static int alltoall_bruck(cx *c, const char *sbuf, char *rbuf, int nb, char *work)
{
    int err, d, i, k, p = c->p, me = c->me;
    char *tmp = work, *out = work + (size_t)p * nb, *in = out + (size_t)((p + 1) / 2) * nb;
    cp(tmp, sbuf + (size_t)me * nb, (size_t)(p - me) * nb);
    cp(tmp + (size_t)(p - me) * nb, sbuf, (size_t)me * nb);
    for (d = 1; d < p; d <<= 1) {
        for (i = 1, k = 0; i < p; i++)
            if (i & d) cp(out + (size_t)(k++) * nb, tmp + (size_t)i * nb, nb);
        TRY(x_sendrecv(c, out, k * nb, (me + d) % p, in, k * nb, (me - d + p) % p));
        for (i = 1, k = 0; i < p; i++)
            if (i & d) cp(tmp + (size_t)i * nb, in + (size_t)(k++) * nb, nb);
    }
    for (i = 0; i < p; i++) cp(rbuf + (size_t)((me - i + p) % p) * nb, tmp + (size_t)i * nb, nb);
    return MPI_SUCCESS;
}

/* ------------------------------------------------------------------ reduce-scatter */

/* Ring (MPI_Reduce_scatter_block's result, p-1 steps): in step k receive from the left
 * the partial result of block me - k - 2, add this rank's own block to it and pass it to
 * the right in the next step (step 0 sends the own block me - 1); the block that arrives
 * in the last step is block me, with every rank's contribution. */
static int reduce_scatter_block_ring(cx *c, const char *sbuf, char *rbuf, int count,
                                     int dtype, int redop, char *work)
{
    int err, k, p = c->p, me = c->me, nb = count * mpilab_coll_elem_size(dtype);
    const char *send = sbuf + (size_t)((me - 1 + p) % p) * nb;
    char *partial[2];
    partial[0] = work;
    partial[1] = work + nb;
    if (p == 1) {
        cp(rbuf, sbuf, nb);
        return MPI_SUCCESS;
    }
    for (k = 0; k < p - 1; k++) {
        int r = (me - k - 2 + 2 * p) % p;
        char *got = k == p - 2 ? rbuf : partial[k % 2];
        TRY(x_sendrecv(c, send, nb, (me + 1) % p, got, nb, (me - 1 + p) % p));
        reduce_into(got, sbuf + (size_t)r * nb, count, dtype, redop);
        send = got;
    }
    return MPI_SUCCESS;
}

/* Recursive halving (p a power of two): the blocks a rank answers for start as all p; in
 * round k it and me ^ p/2^(k+1) split them, each sending the half the other keeps and
 * adding in the half it receives; after log2 p rounds only block me is left. */
static int reduce_scatter_block_recursive_halving(cx *c, const char *sbuf, char *rbuf,
                                                  int count, int dtype, int redop,
                                                  char *work)
{
    int err, mask, lo = 0, p = c->p, me = c->me, nb = count * mpilab_coll_elem_size(dtype);
    char *acc = work, *in = work + (size_t)p * nb;
    cp(acc, sbuf, (size_t)p * nb);
    for (mask = p >> 1; mask > 0; mask >>= 1) {
        int keep = me & mask ? lo + mask : lo, give = me & mask ? lo : lo + mask;
        TRY(x_sendrecv(c, acc + (size_t)give * nb, mask * nb, me ^ mask, in, mask * nb,
                       me ^ mask));
        reduce_into(acc + (size_t)keep * nb, in, mask * count, dtype, redop);
        lo = keep;
    }
    cp(rbuf, acc + (size_t)me * nb, nb);
    return MPI_SUCCESS;
}

/* ------------------------------------------------------------------ the library */

static int library(MPI_Comm comm, int op, const void *sbuf, void *rbuf, int count,
                   int dtype, int redop, int root)
{
    MPI_Datatype t = mpi_type(dtype);
    switch (op) {
    case MPILAB_COLL_BCAST: return MPI_Bcast(rbuf, count, t, root, comm);
    case MPILAB_COLL_REDUCE:
        return MPI_Reduce(sbuf, rbuf, count, t, mpi_op(redop), root, comm);
    case MPILAB_COLL_ALLREDUCE:
        return MPI_Allreduce(sbuf, rbuf, count, t, mpi_op(redop), comm);
    case MPILAB_COLL_BARRIER: return MPI_Barrier(comm);
    case MPILAB_COLL_SCATTER: return MPI_Scatter(sbuf, count, t, rbuf, count, t, root, comm);
    case MPILAB_COLL_GATHER: return MPI_Gather(sbuf, count, t, rbuf, count, t, root, comm);
    case MPILAB_COLL_ALLGATHER: return MPI_Allgather(sbuf, count, t, rbuf, count, t, comm);
    case MPILAB_COLL_ALLTOALL: return MPI_Alltoall(sbuf, count, t, rbuf, count, t, comm);
    case MPILAB_COLL_REDUCE_SCATTER_BLOCK:
        return MPI_Reduce_scatter_block(sbuf, rbuf, count, t, mpi_op(redop), comm);
    }
    return MPI_ERR_ARG;
}

/* ------------------------------------------------------------------ entry points */

long long mpilab_coll_work_bytes(int op, int alg, int p, int count, int dtype)
{
    long long nb = (long long)count * mpilab_coll_elem_size(dtype);
    switch (op) {
    case MPILAB_COLL_REDUCE:
        if (alg == MPILAB_REDUCE_GATHER_REDUCE) return (p - 1) * nb;
        if (alg != MPILAB_ALG_LIBRARY) return 2 * nb;
        return 0;
    case MPILAB_COLL_ALLREDUCE: return alg != MPILAB_ALG_LIBRARY ? nb : 0;
    case MPILAB_COLL_SCATTER:
        return alg == MPILAB_SCATTER_BINOMIAL ? p * nb : 0;
    case MPILAB_COLL_GATHER:
        return alg == MPILAB_GATHER_BINOMIAL ? p * nb : 0;
    case MPILAB_COLL_ALLGATHER:
        return alg == MPILAB_ALLGATHER_BRUCK ? p * nb : 0;
    case MPILAB_COLL_ALLTOALL: /* slots, and one round's packed slots out and in */
        return alg == MPILAB_ALLTOALL_BRUCK ? (p + 2 * ((p + 1) / 2)) * nb : 0;
    case MPILAB_COLL_REDUCE_SCATTER_BLOCK:
        if (alg == MPILAB_REDUCE_SCATTER_BLOCK_RING) return 2 * nb;
        if (alg == MPILAB_REDUCE_SCATTER_BLOCK_RECURSIVE_HALVING) return (p + p / 2) * nb;
        return 0;
    }
    return 0;
}

static int dispatch(cx *c, int op, int alg, const char *s, char *r, int count, int dtype,
                    int redop, int root, char *w)
{
    int nb = count * mpilab_coll_elem_size(dtype);
    c->tag = COLL_TAG + op;
    switch (op * 16 + alg) {
    case MPILAB_COLL_BCAST * 16 + MPILAB_BCAST_LINEAR: return bcast_linear(c, r, nb, root);
    case MPILAB_COLL_BCAST * 16 + MPILAB_BCAST_BINARY_TREE:
        return bcast_binary_tree(c, r, nb, root);
    case MPILAB_COLL_BCAST * 16 + MPILAB_BCAST_BINOMIAL: return bcast_binomial(c, r, nb, root);
    case MPILAB_COLL_REDUCE * 16 + MPILAB_REDUCE_GATHER_REDUCE:
        return reduce_gather_reduce(c, s, r, count, dtype, redop, root, w);
    case MPILAB_COLL_REDUCE * 16 + MPILAB_REDUCE_BINOMIAL:
        return reduce_binomial(c, s, r, count, dtype, redop, root, w);
    case MPILAB_COLL_REDUCE * 16 + MPILAB_REDUCE_RECURSIVE_HALVING:
        return reduce_recursive_halving(c, s, r, count, dtype, redop, root, w);
    case MPILAB_COLL_ALLREDUCE * 16 + MPILAB_ALLREDUCE_RECURSIVE_DOUBLING:
        return allreduce_recursive_doubling(c, s, r, count, dtype, redop, w);
    case MPILAB_COLL_ALLREDUCE * 16 + MPILAB_ALLREDUCE_RING:
        return allreduce_ring(c, s, r, count, dtype, redop, w);
    case MPILAB_COLL_BARRIER * 16 + MPILAB_BARRIER_LINEAR: return barrier_linear(c);
    case MPILAB_COLL_BARRIER * 16 + MPILAB_BARRIER_TREE: return barrier_tree(c);
    case MPILAB_COLL_BARRIER * 16 + MPILAB_BARRIER_DISSEMINATION:
        return barrier_dissemination(c);
    case MPILAB_COLL_SCATTER * 16 + MPILAB_SCATTER_LINEAR:
        return scatter_linear(c, s, r, nb, root);
    case MPILAB_COLL_SCATTER * 16 + MPILAB_SCATTER_BINOMIAL:
        return scatter_binomial(c, s, r, nb, root, w);
    case MPILAB_COLL_GATHER * 16 + MPILAB_GATHER_LINEAR: return gather_linear(c, s, r, nb, root);
    case MPILAB_COLL_GATHER * 16 + MPILAB_GATHER_BINOMIAL:
        return gather_binomial(c, s, r, nb, root, w);
    case MPILAB_COLL_ALLGATHER * 16 + MPILAB_ALLGATHER_LINEAR:
        return allgather_linear(c, s, r, nb);
    case MPILAB_COLL_ALLGATHER * 16 + MPILAB_ALLGATHER_BRUCK:
        return allgather_bruck(c, s, r, nb, w);
    case MPILAB_COLL_ALLGATHER * 16 + MPILAB_ALLGATHER_RECURSIVE_DOUBLING:
        return allgather_recursive_doubling(c, s, r, nb);
    case MPILAB_COLL_ALLGATHER * 16 + MPILAB_ALLGATHER_RING: return allgather_ring(c, s, r, nb);
    case MPILAB_COLL_ALLGATHER * 16 + MPILAB_ALLGATHER_NEIGHBOR_EXCHANGE:
        return allgather_neighbor_exchange(c, s, r, nb);
    case MPILAB_COLL_ALLGATHER * 16 + MPILAB_ALLGATHER_TWO_PROC:
        return allgather_two_proc(c, s, r, nb);
    case MPILAB_COLL_ALLTOALL * 16 + MPILAB_ALLTOALL_PAIRWISE:
        return alltoall_pairwise(c, s, r, nb);
    case MPILAB_COLL_ALLTOALL * 16 + MPILAB_ALLTOALL_BRUCK:
        return alltoall_bruck(c, s, r, nb, w);
    case MPILAB_COLL_REDUCE_SCATTER_BLOCK * 16 + MPILAB_REDUCE_SCATTER_BLOCK_RING:
        return reduce_scatter_block_ring(c, s, r, count, dtype, redop, w);
    case MPILAB_COLL_REDUCE_SCATTER_BLOCK * 16 + MPILAB_REDUCE_SCATTER_BLOCK_RECURSIVE_HALVING:
        return reduce_scatter_block_recursive_halving(c, s, r, count, dtype, redop, w);
    }
    return MPI_ERR_ARG;
}

static int setup(cx *c, MPI_Comm comm, long long *trace, int cap)
{
    int err;
    c->comm = comm;
    c->trace = trace;
    c->cap = cap;
    c->n = 0;
    if ((err = MPI_Comm_rank(comm, &c->me)) != MPI_SUCCESS) return err;
    return MPI_Comm_size(comm, &c->p);
}

int mpilab_coll_run(MPI_Comm comm, int op, int alg, const void *sbuf, void *rbuf,
                    int count, int dtype, int redop, int root, void *work,
                    long long *trace, int trace_cap, int *trace_n)
{
    cx c;
    int err = setup(&c, comm, trace, trace_cap);
    if (err != MPI_SUCCESS) return err;
    if (alg == MPILAB_ALG_LIBRARY)
        err = library(comm, op, sbuf, rbuf, count, dtype, redop, root);
    else
        err = dispatch(&c, op, alg, (const char *)sbuf, (char *)rbuf, count, dtype, redop,
                       root, (char *)work);
    if (trace_n) *trace_n = c.n;
    return err;
}

typedef struct {
    cx c;
    int op, alg, count, dtype, redop, root;
    const char *s;
    char *r, *w;
} step_ctx;

static int one_call(void *p)
{
    step_ctx *x = (step_ctx *)p;
    if (x->alg == MPILAB_ALG_LIBRARY)
        return library(x->c.comm, x->op, x->s, x->r, x->count, x->dtype, x->redop, x->root);
    return dispatch(&x->c, x->op, x->alg, x->s, x->r, x->count, x->dtype, x->redop, x->root,
                    x->w);
}

static int coll_time(MPI_Comm comm, int op, int alg, const void *sbuf, void *rbuf,
                     int count, int dtype, int redop, int root, void *work,
                     int warmup, int iters, int reps, double *times, int separated)
{
    step_ctx x;
    int err = setup(&x.c, comm, NULL, 0);
    if (err != MPI_SUCCESS) return err;
    x.op = op;
    x.alg = alg;
    x.count = count;
    x.dtype = dtype;
    x.redop = redop;
    x.root = root;
    x.s = (const char *)sbuf;
    x.r = (char *)rbuf;
    x.w = (char *)work;
    if (separated)
        return mpilab_time_steps_separated(comm, one_call, &x, warmup, iters, reps, 1.0,
                                           times);
    return mpilab_time_steps(comm, one_call, &x, warmup, iters, reps, 1.0, times);
}

int mpilab_coll_time(MPI_Comm comm, int op, int alg, const void *sbuf, void *rbuf,
                     int count, int dtype, int redop, int root, void *work,
                     int warmup, int iters, int reps, double *times)
{
    return coll_time(comm, op, alg, sbuf, rbuf, count, dtype, redop, root, work, warmup,
                     iters, reps, times, 0);
}

int mpilab_coll_time_separated(MPI_Comm comm, int op, int alg, const void *sbuf,
                               void *rbuf, int count, int dtype, int redop, int root,
                               void *work, int warmup, int iters, int reps, double *times)
{
    return coll_time(comm, op, alg, sbuf, rbuf, count, dtype, redop, root, work, warmup,
                     iters, reps, times, 1);
}

/* ------------------------------------------------------------------ overlap */

/* The computation a nonblocking allreduce may hide behind: `passes` sweeps of
 * a[i] = 0.5 a[i] + b[i] over m doubles, from pass `from` to pass `to` (exclusive). */
static void overlap_compute(double *restrict a, const double *restrict b, size_t m, int from,
                            int to)
{
    size_t i;
    int k;
    for (k = from; k < to; k++) {
        for (i = 0; i < m; i++)
            a[i] = 0.5 * a[i] + b[i];
        __asm__ __volatile__("" ::: "memory");
    }
}

/*
 * OSU's overlap test for MPI_Iallreduce (MPI_SUM of n doubles), iteration by iteration:
 *   mode 0 - MPI_Allreduce, then the computation (the two alone, one after the other);
 *   mode 1 - MPI_Iallreduce, the computation, MPI_Wait;
 *   mode 2 - the same with MPI_Test after each of `parts` equal parts of the passes
 *            (until the allreduce is complete): the library's chance to progress.
 * Every iteration follows an untimed MPI_Barrier; out gets, per iteration of this rank,
 * (total, time inside MPI calls, computing) in seconds, after `warmup` untimed ones.
 * *wrong counts the iterations whose result is not the sum expected: every rank sends
 * sbuf, so rbuf[i] must equal p * sbuf[i] (sbuf holds small integers: exact).
 */
int mpilab_iallreduce_overlap(MPI_Comm comm, int mode, const double *sbuf, double *rbuf,
                              int n, double *a, const double *b, int m, int passes,
                              int parts, int warmup, int iters, double *out, int *wrong)
{
    int err, it, k, p, done, i;
    MPI_Request req;
    if ((err = MPI_Comm_size(comm, &p)) != MPI_SUCCESS) return err;
    if (parts < 1) parts = 1;
    *wrong = 0;
    for (it = -warmup; it < iters; it++) {
        double t0, t, mpi = 0.0, work = 0.0, total;
        if ((err = MPI_Barrier(comm)) != MPI_SUCCESS) return err;
        t0 = MPI_Wtime();
        if (mode == 0) {
            TRY(MPI_Allreduce(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, comm));
            t = MPI_Wtime();
            mpi = t - t0;
            overlap_compute(a, b, (size_t)m, 0, passes);
            work = MPI_Wtime() - t;
        } else {
            TRY(MPI_Iallreduce(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, comm, &req));
            mpi = MPI_Wtime() - t0;
            done = 0;
            for (k = 0; k < parts; k++) {
                t = MPI_Wtime();
                overlap_compute(a, b, (size_t)m, (int)((long long)passes * k / parts),
                                (int)((long long)passes * (k + 1) / parts));
                work += MPI_Wtime() - t;
                if (mode == 2 && !done) {
                    t = MPI_Wtime();
                    TRY(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
                    mpi += MPI_Wtime() - t;
                }
            }
            t = MPI_Wtime();
            TRY(MPI_Wait(&req, MPI_STATUS_IGNORE));
            mpi += MPI_Wtime() - t;
        }
        total = MPI_Wtime() - t0;
        for (i = 0; i < n; i++)
            if (rbuf[i] != (double)p * sbuf[i]) {
                (*wrong)++;
                break;
            }
        if (it >= 0) {
            out[3 * it] = total;
            out[3 * it + 1] = mpi;
            out[3 * it + 2] = work;
        }
    }
    return MPI_SUCCESS;
}

/* ------------------------------------------------------------------ MPI_T control */

/* Write an integer control variable by name through the MPI tool interface (Open MPI
 * exposes its MCA parameters there, e.g. coll_tuned_allgather_algorithm, read again by
 * each new communicator). Returns MPI_SUCCESS, or an MPI_T error code (e.g.
 * MPI_T_ERR_INVALID_NAME when the library has no such variable). */
int mpilab_coll_set_cvar_int(const char *name, int value)
{
#ifdef SMPI_H
    /* SimGrid's SMPI (mpilab.sim) has no MPI_T: its algorithms are chosen by --cfg */
    (void)name;
    (void)value;
    return MPI_ERR_OTHER;
#else
    int provided, err, index, count;
    MPI_T_cvar_handle handle;
    if ((err = MPI_T_init_thread(MPI_THREAD_SINGLE, &provided)) != MPI_SUCCESS) return err;
    err = MPI_T_cvar_get_index(name, &index);
    if (err == MPI_SUCCESS) err = MPI_T_cvar_handle_alloc(index, NULL, &handle, &count);
    if (err == MPI_SUCCESS) {
        err = count == 1 ? MPI_T_cvar_write(handle, &value) : MPI_T_ERR_INVALID;
        MPI_T_cvar_handle_free(&handle);
    }
    MPI_T_finalize();
    return err;
#endif
}
