/*
 * c_pingpong.c - point-to-point transfer time between two ranks.
 *
 * Purpose: the latency and bandwidth measurements of lecture 01 and the ping-pong paper.
 * Algorithm: round trip (a sends, b receives then sends back, a receives: time / 2 is the
 * one-way time), or repeated one-way sends as in the paper (a sends `iters` messages,
 * b receives them, then one empty acknowledgement closes the timed loop: time / iters).
 * Every rank of comm must call it; ranks other than a and b only join the barriers.
 * Send and receive buffers are always distinct.
 *
 *   comm          - communicator (any size >= 2)
 *   rank_a,rank_b - the two ranks that exchange, distinct
 *   sbuf, rbuf    - nbytes each; a sends sbuf, b receives into rbuf (and, round trip,
 *                   b sends its own sbuf back into a's rbuf)
 *   nbytes        - message size in bytes (>= 0)
 *   mode          - MPILAB_PP_ROUNDTRIP or MPILAB_PP_ONEWAY
 *   warmup, iters, reps, times - the timing protocol (mpilab_timing.h); times are
 *                   seconds per one-way message
 * Returns an MPI error code.
 */
#include "c_pingpong.h"
#include "mpilab_timing.h"

#define PP_TAG 17

typedef struct {
    MPI_Comm comm;
    int me, a, b, nbytes;
    const void *sbuf;
    void *rbuf;
    int iters;
} pp_ctx;

static int roundtrip_step(void *p)
{
    pp_ctx *c = (pp_ctx *)p;
    int err = MPI_SUCCESS;
    if (c->me == c->a) {
        err = MPI_Send(c->sbuf, c->nbytes, MPI_BYTE, c->b, PP_TAG, c->comm);
        if (err == MPI_SUCCESS)
            err = MPI_Recv(c->rbuf, c->nbytes, MPI_BYTE, c->b, PP_TAG, c->comm,
                           MPI_STATUS_IGNORE);
    } else if (c->me == c->b) {
        err = MPI_Recv(c->rbuf, c->nbytes, MPI_BYTE, c->a, PP_TAG, c->comm,
                       MPI_STATUS_IGNORE);
        if (err == MPI_SUCCESS)
            err = MPI_Send(c->sbuf, c->nbytes, MPI_BYTE, c->a, PP_TAG, c->comm);
    }
    return err;
}

/* One step of the one-way mode is a whole burst of `iters` messages plus the ack. */
static int oneway_burst(void *p)
{
    pp_ctx *c = (pp_ctx *)p;
    int err = MPI_SUCCESS, i;
    if (c->me == c->a) {
        for (i = 0; i < c->iters && err == MPI_SUCCESS; i++)
            err = MPI_Send(c->sbuf, c->nbytes, MPI_BYTE, c->b, PP_TAG, c->comm);
        if (err == MPI_SUCCESS)
            err = MPI_Recv(NULL, 0, MPI_BYTE, c->b, PP_TAG + 1, c->comm, MPI_STATUS_IGNORE);
    } else if (c->me == c->b) {
        for (i = 0; i < c->iters && err == MPI_SUCCESS; i++)
            err = MPI_Recv(c->rbuf, c->nbytes, MPI_BYTE, c->a, PP_TAG, c->comm,
                           MPI_STATUS_IGNORE);
        if (err == MPI_SUCCESS)
            err = MPI_Send(NULL, 0, MPI_BYTE, c->a, PP_TAG + 1, c->comm);
    }
    return err;
}

int mpilab_pingpong(MPI_Comm comm, int rank_a, int rank_b,
                    const void *sbuf, void *rbuf, int nbytes, int mode,
                    int warmup, int iters, int reps, double *times)
{
    pp_ctx c;
    int err = MPI_Comm_rank(comm, &c.me);
    if (err != MPI_SUCCESS) return err;
    c.comm = comm;
    c.a = rank_a;
    c.b = rank_b;
    c.nbytes = nbytes;
    c.sbuf = sbuf;
    c.rbuf = rbuf;
    c.iters = iters;
    if (mode == MPILAB_PP_ONEWAY) {
        /* warm-up: one burst of min(iters, warmup) messages */
        if (warmup > 0) {
            c.iters = warmup < iters ? warmup : iters;
            if ((err = oneway_burst(&c)) != MPI_SUCCESS) return err;
            c.iters = iters;
        }
        return mpilab_time_steps(comm, oneway_burst, &c, 0, 1, reps, (double)iters, times);
    }
    return mpilab_time_steps(comm, roundtrip_step, &c, warmup, iters, reps, 2.0, times);
}
