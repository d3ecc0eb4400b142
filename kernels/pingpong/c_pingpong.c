/*
 * c_pingpong.c - point-to-point transfer time between two ranks.
 *
 * Purpose: the latency and bandwidth measurements of lecture 01 and the ping-pong paper.
 * Algorithm: round trip (a sends, b receives then sends back, a receives: time / 2 is the
 * one-way time), or repeated one-way sends as in the paper (a sends `iters` messages,
 * b receives them, then one empty acknowledgement closes the timed loop: time / iters),
 * or OSU's osu_bw window: a posts PP_WINDOW MPI_Isend at once, b as many MPI_Irecv,
 * both MPI_Waitall, b acknowledges each window with 4 bytes (time / iters). As in
 * osu_bw, the window's sends share one send buffer and its receives one receive buffer
 * (the received bytes are then undefined: only the times are wanted).
 * Every rank of comm must call it; ranks other than a and b only join the barriers.
 * Send and receive buffers are always distinct.
 *
 *   comm          - communicator (any size >= 2)
 *   rank_a,rank_b - the two ranks that exchange, distinct
 *   sbuf, rbuf    - nbytes each; a sends sbuf, b receives into rbuf (and, round trip,
 *                   b sends its own sbuf back into a's rbuf)
 *   nbytes        - message size in bytes (>= 0)
 *   mode          - MPILAB_PP_ROUNDTRIP, MPILAB_PP_ONEWAY or MPILAB_PP_WINDOW
 *   warmup, iters, reps, times - the timing protocol (mpilab_timing.h); times are
 *                   seconds per one-way message
 * Returns an MPI error code.
 */
#include "c_pingpong.h"
#include "mpilab_timing.h"

#define PP_TAG 17
#define PP_WINDOW 64 /* osu_bw's window size */

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

/* One step of the window mode: `iters` messages in windows of PP_WINDOW, each window
 * closed by a 4-byte acknowledgement (osu_bw). */
static int window_burst(void *p)
{
    pp_ctx *c = (pp_ctx *)p;
    MPI_Request req[PP_WINDOW];
    char ack[4] = {0, 0, 0, 0};
    int err = MPI_SUCCESS, done, k, w;
    for (done = 0; done < c->iters && err == MPI_SUCCESS; done += w) {
        w = c->iters - done < PP_WINDOW ? c->iters - done : PP_WINDOW;
        if (c->me == c->a) {
            for (k = 0; k < w && err == MPI_SUCCESS; k++)
                err = MPI_Isend(c->sbuf, c->nbytes, MPI_BYTE, c->b, PP_TAG, c->comm, &req[k]);
            if (err == MPI_SUCCESS) err = MPI_Waitall(w, req, MPI_STATUSES_IGNORE);
            if (err == MPI_SUCCESS)
                err = MPI_Recv(ack, 4, MPI_BYTE, c->b, PP_TAG + 1, c->comm, MPI_STATUS_IGNORE);
        } else if (c->me == c->b) {
            for (k = 0; k < w && err == MPI_SUCCESS; k++)
                err = MPI_Irecv(c->rbuf, c->nbytes, MPI_BYTE, c->a, PP_TAG, c->comm, &req[k]);
            if (err == MPI_SUCCESS) err = MPI_Waitall(w, req, MPI_STATUSES_IGNORE);
            if (err == MPI_SUCCESS)
                err = MPI_Send(ack, 4, MPI_BYTE, c->a, PP_TAG + 1, c->comm);
        }
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
    if (mode == MPILAB_PP_ONEWAY || mode == MPILAB_PP_WINDOW) {
        mpilab_step_fn burst = mode == MPILAB_PP_ONEWAY ? oneway_burst : window_burst;
        /* warm-up: one burst of min(iters, warmup) messages */
        if (warmup > 0) {
            c.iters = warmup < iters ? warmup : iters;
            if ((err = burst(&c)) != MPI_SUCCESS) return err;
            c.iters = iters;
        }
        return mpilab_time_steps(comm, burst, &c, 0, 1, reps, (double)iters, times);
    }
    return mpilab_time_steps(comm, roundtrip_step, &c, warmup, iters, reps, 2.0, times);
}
