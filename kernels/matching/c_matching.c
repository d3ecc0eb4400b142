/*
 * c_matching.c - what a message pays to find its receive: a ping-pong past a queue of
 * posted receives or of unexpected messages, and a receiver that posts late.
 *
 * Purpose: lecture 01's section on message matching and lab 01's part E. An MPI library
 * keeps, per communicator, the receives posted before their message (posted queue) and
 * the messages that arrived before their receive (unexpected queue). Open MPI 4.1's ob1
 * walks each list from its head: an arriving message compares itself with every posted
 * receive ahead of its own, and a receive being posted with every queued message ahead
 * of its own (or with all of them, when none matches and it is queued in turn).
 * Algorithm: both ranks first queue `depth` entries the ping-pong's messages never match
 * (tags 1 .. depth, 4 bytes each, carrying their tag):
 *   POSTED     each rank posts `depth` MPI_Irecv from the other, before the ping-pong's
 *              own receives, so every ping-pong message walks past all of them;
 *   UNEXPECTED each rank sends `depth` messages to the other, which it does not receive
 *              yet, so every ping-pong receive walks past all of them;
 * then an MPI_Barrier, and round trips of `nbytes` with tag 0 between rank_a and rank_b,
 * timed by mpilab_timing.h's protocol (seconds per one-way message). Afterwards the
 * queued entries are matched (POSTED: each rank sends the other its `depth` messages;
 * UNEXPECTED: each receives them) and checked.
 *   LATE, LATE_POLLING (depth 0): every step starts from an untimed MPI_Barrier; rank_b
 *              posts its receive `delay_us` later, spinning outside MPI (LATE) or inside
 *              it (LATE_POLLING: MPI_Iprobe for a message that never comes, so its
 *              library makes progress); only rank_a's MPI_Send of `nbytes` is timed:
 *              does it return before the receive is posted (eager) or wait (rendezvous)?
 * wildcard SOURCE: the posted receives (queued and the ping-pong's) use MPI_ANY_SOURCE.
 *
 *   comm          - communicator (any size >= 2); every rank calls, others only join
 *   rank_a,rank_b - the two ranks, distinct
 *   depth         - queued entries per rank, 0 .. MPILAB_MATCH_MAX_DEPTH (0 for LATE*)
 *   nbytes        - bytes of a ping-pong message (>= 0)
 *   queue, wildcard - see c_matching.h
 *   delay_us      - LATE*: microseconds before rank_b posts its receive (>= 0)
 *   sbuf, rbuf    - nbytes each, the same sbuf contents on both ranks
 *   warmup, iters, reps, times - the timing protocol (mpilab_timing.h)
 *   bad           - out: on rank_a and rank_b, the checked messages that arrived wrong: a
 *                   ping-pong message after the timed ones (its bytes) and every queued
 *                   entry (its tag and payload); 0 elsewhere
 * Returns an MPI error code.
 */
#include <stdlib.h>
#include <string.h>

#include "c_matching.h"
#include "mpilab_timing.h"

#define ACK_TAG 32767  /* LATE*: rank_b's acknowledgement */
#define NEVER_TAG 32766 /* LATE_POLLING: what rank_b probes for, never sent */

typedef struct {
    MPI_Comm comm;
    int me, a, b, other, depth, nbytes, wildcard, poll;
    double delay, sent; /* LATE*: the wait, and rank_a's time in MPI_Send, summed */
    const void *sbuf;
    void *rbuf;
    int *fill_out, *fill_in;
    MPI_Request *req;
} match_ctx;

static int src(const match_ctx *c, int from)
{
    return c->wildcard == MPILAB_WILD_SOURCE ? MPI_ANY_SOURCE : from;
}

static int roundtrip_step(void *p)
{
    match_ctx *c = (match_ctx *)p;
    int err = MPI_SUCCESS;
    if (c->me == c->a) {
        err = MPI_Send(c->sbuf, c->nbytes, MPI_BYTE, c->b, 0, c->comm);
        if (err == MPI_SUCCESS)
            err = MPI_Recv(c->rbuf, c->nbytes, MPI_BYTE, src(c, c->b), 0, c->comm,
                           MPI_STATUS_IGNORE);
    } else if (c->me == c->b) {
        err = MPI_Recv(c->rbuf, c->nbytes, MPI_BYTE, src(c, c->a), 0, c->comm,
                       MPI_STATUS_IGNORE);
        if (err == MPI_SUCCESS)
            err = MPI_Send(c->sbuf, c->nbytes, MPI_BYTE, c->a, 0, c->comm);
    }
    return err;
}

static int late_step(void *p)
{
    match_ctx *c = (match_ctx *)p;
    int err = MPI_Barrier(c->comm), flag;
    if (err != MPI_SUCCESS) return err;
    if (c->me == c->a) {
        double t0 = MPI_Wtime();
        err = MPI_Send(c->sbuf, c->nbytes, MPI_BYTE, c->b, 0, c->comm);
        c->sent += MPI_Wtime() - t0;
        if (err == MPI_SUCCESS)
            err = MPI_Recv(NULL, 0, MPI_BYTE, c->b, ACK_TAG, c->comm, MPI_STATUS_IGNORE);
    } else if (c->me == c->b) {
        double t0 = MPI_Wtime();
        while ((MPI_Wtime() - t0) * 1e6 < c->delay) {
            /* LATE spins outside MPI: its library makes no progress meanwhile */
            if (c->poll && (err = MPI_Iprobe(c->a, NEVER_TAG, c->comm, &flag,
                                             MPI_STATUS_IGNORE)) != MPI_SUCCESS)
                return err;
        }
        err = MPI_Recv(c->rbuf, c->nbytes, MPI_BYTE, src(c, c->a), 0, c->comm,
                       MPI_STATUS_IGNORE);
        if (err == MPI_SUCCESS)
            err = MPI_Send(NULL, 0, MPI_BYTE, c->a, ACK_TAG, c->comm);
    }
    return err;
}

/* Queue `depth` entries on this rank (POSTED: receives; UNEXPECTED: messages sent to the
 * other rank, which queues them). */
static int queue_up(match_ctx *c, int posted)
{
    int err = MPI_SUCCESS, k;
    for (k = 0; k < c->depth && err == MPI_SUCCESS; k++) {
        c->fill_out[k] = k + 1;
        c->fill_in[k] = -1;
        if (posted)
            err = MPI_Irecv(&c->fill_in[k], 1, MPI_INT, src(c, c->other), k + 1, c->comm,
                            &c->req[k]);
        else
            err = MPI_Isend(&c->fill_out[k], 1, MPI_INT, c->other, k + 1, c->comm,
                            &c->req[k]);
    }
    return err;
}

int mpilab_matching(MPI_Comm comm, int rank_a, int rank_b, int depth, int nbytes,
                    int queue, int wildcard, double delay_us,
                    const void *sbuf, void *rbuf, int warmup, int iters, int reps,
                    double *times, int *bad)
{
    match_ctx c;
    MPI_Request *queued = NULL;
    int err, k, posted = queue == MPILAB_MATCH_POSTED, wrong = 0;
    int late = queue == MPILAB_MATCH_LATE || queue == MPILAB_MATCH_LATE_POLLING;
    *bad = 0;
    if ((err = MPI_Comm_rank(comm, &c.me)) != MPI_SUCCESS) return err;
    c.comm = comm;
    c.a = rank_a;
    c.b = rank_b;
    c.other = c.me == rank_a ? rank_b : rank_a;
    c.depth = (c.me == rank_a || c.me == rank_b) && !late ? depth : 0;
    c.nbytes = nbytes;
    c.wildcard = wildcard;
    c.poll = queue == MPILAB_MATCH_LATE_POLLING;
    c.delay = delay_us;
    c.sent = 0.0;
    c.sbuf = sbuf;
    c.rbuf = rbuf;
    c.fill_out = malloc(sizeof(int) * (size_t)(c.depth + 1));
    c.fill_in = malloc(sizeof(int) * (size_t)(c.depth + 1));
    c.req = malloc(sizeof(MPI_Request) * (size_t)(c.depth + 1));
    queued = malloc(sizeof(MPI_Request) * (size_t)(c.depth + 1));
    if (!c.fill_out || !c.fill_in || !c.req || !queued) {
        err = MPI_ERR_NO_MEM;
        goto out;
    }
    if ((err = queue_up(&c, posted)) != MPI_SUCCESS) goto out;
    /* keep the queued requests apart: drain() reuses c.req */
    for (k = 0; k < c.depth; k++) queued[k] = c.req[k];
    if ((err = MPI_Barrier(comm)) != MPI_SUCCESS) goto out;

    if (late) {
        int i, r;
        double slowest;
        for (i = 0; i < warmup && err == MPI_SUCCESS; i++) err = late_step(&c);
        for (r = 0; r < reps && err == MPI_SUCCESS; r++) {
            c.sent = 0.0;
            for (i = 0; i < iters && err == MPI_SUCCESS; i++) err = late_step(&c);
            if (err == MPI_SUCCESS) /* rank_a's time per send; the others add 0 */
                err = MPI_Allreduce(&c.sent, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
            times[r] = slowest / (double)iters;
        }
    } else {
        err = mpilab_time_steps(comm, roundtrip_step, &c, warmup, iters, reps, 2.0, times);
    }
    if (err != MPI_SUCCESS) goto out;

    /* one more message each way, checked, with the queues still full */
    if (c.me == rank_a || c.me == rank_b) memset(rbuf, 0, (size_t)nbytes);
    err = late ? late_step(&c) : roundtrip_step(&c);
    /* a round trip's two ranks both received; a late send's only rank_b */
    if (err == MPI_SUCCESS && nbytes > 0 && (c.me == rank_b || (c.me == rank_a && !late)) &&
        memcmp(rbuf, sbuf, (size_t)nbytes) != 0)
        (*bad)++;
    if (err != MPI_SUCCESS) goto out;

    /* the queued entries: matched now, every one checked */
    if (posted) {
        for (k = 0; k < c.depth && err == MPI_SUCCESS; k++)
            err = MPI_Isend(&c.fill_out[k], 1, MPI_INT, c.other, k + 1, comm, &c.req[k]);
        if (err == MPI_SUCCESS) err = MPI_Waitall(c.depth, c.req, MPI_STATUSES_IGNORE);
        if (err == MPI_SUCCESS) err = MPI_Waitall(c.depth, queued, MPI_STATUSES_IGNORE);
    } else {
        if (c.depth > 0) err = MPI_Waitall(c.depth, queued, MPI_STATUSES_IGNORE);
        for (k = 0; k < c.depth && err == MPI_SUCCESS; k++)
            err = MPI_Recv(&c.fill_in[k], 1, MPI_INT, c.other, k + 1, comm,
                           MPI_STATUS_IGNORE);
    }
    for (k = 0; k < c.depth; k++)
        if (c.fill_in[k] != k + 1) wrong++;
    *bad += wrong;
out:
    free(c.fill_out);
    free(c.fill_in);
    free(c.req);
    free(queued);
    return err;
}
