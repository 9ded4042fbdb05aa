/* The coordinator's state, shared by run/coord.c (the run, the loop) and run/coord_req.c (the
 * requests). */
#ifndef GRPO_RUN_COORD_INT_H
#define GRPO_RUN_COORD_INT_H

#include "run/run_int.h"

#define GRPO_COORD_MAX_WORKERS 4096 /* distinct worker ids remembered for the stats */
#define GRPO_COORD_MAX_CONNS 65536

typedef struct worker_info {
    char id[GRPO_WORKERS_MAX_ID + 1];
    double last_seen, tokens_per_s;
    uint64_t groups;
} worker_info;

typedef struct conn {
    uint32_t pipe;
    uint32_t worker; /* index in workers[] */
} conn;

/* A batch already stored (with its group) that waits for room in the publisher's window. */
typedef struct held_batch {
    void *bytes;
    size_t len;
} held_batch;

struct grpo_coord {
    grpo_coord_opts o;
    const grpo_coord_opts *a; /* = &o */
    grpo_prompt_set ps;
    int64_t *prompt_ids; /* store ids, per item */
    double *issued_at;   /* wall clock of the current lease, per item */
    grpo_store *store;
    int64_t run_id;
    char run_id_str[32];
    int resumed;
    size_t already;
    grpo_lease_table *leases;
    grpo_wserver *srv;
    grpo_bridge_publisher *pub;
    grpo_run_persist persist;
    grpo_run_lock *lock; /* the run is this process's */
    grpo_wpolicy policy;
    char weights_path[4096], weights_sha[65];
    char base_dir[4096], base_path[4200], base_sha[65]; /* version 0 (opts.model), or "" */
    grpo_wparams params;
    worker_info *workers;
    size_t n_workers;
    conn *conns; /* open connections and the worker on each */
    size_t n_conns;
    uint64_t recorded, duplicates, stale, refused, requests;
    held_batch *held; /* recorded groups' batches the publisher's full window did not take yet */
    size_t n_held, cap_held;
    uint64_t held_total; /* batches that waited in held[] */
    volatile sig_atomic_t cancel;
    double t0, secs;
};

/* One request answered; a failure of the coordinator itself is returned (and told the worker). */
grpo_err grpo_coord__handle(grpo_coord *c, const grpo_wmsg *req);
/* Leases of workers whose every connection closed are issued again. */
void grpo_coord__reap_connections(grpo_coord *c);
/* grpo_lease_table_expire's callback: the lease ends "expired" in the store. */
void grpo_coord__on_expired(void *ctx, size_t item, int32_t attempt, const char *worker,
                            int64_t row);
/* Hands held batches to the publisher, oldest first, while its window has room. */
grpo_err grpo_coord__flush_held(grpo_coord *c);
/* New weights from the trainer: recorded, then announced to the workers in every reply. */
grpo_err grpo_coord__poll_weights(grpo_coord *c);

#endif
