/* Private to store/: the store handle, the prepared-statement table, and the helpers the store's
 * files share (SQLite error translation, group insertion, the writer queue). */
#ifndef GRPO_STORE_INT_H
#define GRPO_STORE_INT_H

#include "common/common_int.h"
#include "grpo/store.h"

#include <pthread.h>
#include <sqlite3.h>

/* Prepared statements, created on first use and kept for the store's life. */
typedef enum {
    ST_GROUP_INSERT,
    ST_COMPLETION_INSERT,
    ST_REWARD_INSERT,
    ST_GV_INSERT,
    ST_GROUP_EXISTS,
    ST_LAST_STEP,
    ST_PROMPT_INSERT,
    ST_PROMPT_FIND,
    ST_POLICY_UPSERT,
    ST_BATCH_INSERT,
    ST_BATCH_PUBLISH,
    ST_BATCH_ACK,
    ST_BATCH_STATUS,
    ST_TURN_INSERT,
    ST_COUNT
} store_stmt;

/* One queued group: a deep copy in a single allocation. */
typedef struct store_item {
    struct store_item *next;
    grpo_group_rec g;
} store_item;

struct grpo_store {
    sqlite3 *db;
    char *path;
    grpo_store_opts opts;
    int32_t version;
    int last_rc, last_errno; /* of the last SQLite failure, to tell transient ones at open */
    pthread_mutex_t mu;      /* guards db and st[] */
    sqlite3_stmt *st[ST_COUNT];

    /* async writer */
    int writer_started;
    pthread_t writer;
    pthread_mutex_t qmu;
    pthread_cond_t q_nonempty, q_progress;
    store_item *head, *tail;
    int32_t queued; /* queued + being written */
    int stop;
    grpo_err werr; /* first writer error, sticky */
    char werr_msg[512];
};

/* Translates a SQLite failure into a grpo_err with a message "store: PATH: WHAT: sqlite message".
 * Call with s->mu held (the message is read from the connection). */
grpo_err grpo_store__db_fail(grpo_store *s, int rc, const char *what);
/* Column i of st as a malloc'd string, NULL when the column is NULL (*oom = 1 when out of memory;
 * store/lookup.c). */
char *grpo_store__col_str(sqlite3_stmt *st, int i, int *oom);
/* GRPO_OK (after flushing queued groups) when s may be written; else a message naming what. */
grpo_err grpo_store__writable(grpo_store *s, const char *what);
/* Wall-clock seconds since the epoch, as the store records times. */
double grpo_store__wall_now(void);
/* Runs SQL text with no results. */
grpo_err grpo_store__exec(grpo_store *s, const char *sql, const char *what);
/* Returns the prepared statement `which`, reset and with bindings cleared (s->mu held). */
grpo_err grpo_store__stmt(grpo_store *s, store_stmt which, sqlite3_stmt **out);

/* Inserts one group in the current transaction (s->mu held). */
grpo_err grpo_store__insert_group(grpo_store *s, const grpo_group_rec *g);
/* Validates a group record before it is queued or written. */
grpo_err grpo_store__check_group(const grpo_group_rec *g);
/* Deep copy of a group into one allocation (free() it). NULL on ENOMEM, with a message. */
store_item *grpo_store__copy_group(const grpo_group_rec *g);

/* Writer thread lifecycle (async mode). */
grpo_err grpo_store__writer_start(grpo_store *s);
void grpo_store__writer_stop(grpo_store *s);
/* Returns the sticky writer error, re-raised on this thread, or GRPO_OK. */
grpo_err grpo_store__writer_error(grpo_store *s);

/* Registers SQL functions used by the stats queries (grpo_pass_at_k, sqrt if missing). */
grpo_err grpo_store__register_functions(grpo_store *s);

/* The SQL of a report query (by >= GRPO_STATS_BY_FINISH; store/stats_report.c), to follow
 * "WITH RECURSIVE <stats_* inputs>": *is_select says whether it is a SELECT (else more CTEs,
 * then the SELECT). NULL for the other groupings. */
const char *grpo_store__report_sql(grpo_stats_by by, int *is_select);
/* The example query's text column cut to text_bytes at a character boundary, text_cut set. */
grpo_err grpo_store__cut_texts(grpo_stats_table *t, int32_t text_bytes);

/* Inserts a batch row (s->mu held, inside or outside a transaction). */
grpo_err grpo_store__insert_batch(grpo_store *s, int64_t batch_id, int64_t run_id, int64_t step,
                                  int32_t n_groups, const void *bytes, size_t len);

/* Routes (routes.c): bytes of n tokens' ids; the group's routes written beside group gid. */
size_t grpo_store__route_bytes(const grpo_routes_rec *r, int32_t n_tokens);
grpo_err grpo_store__check_routes(const grpo_group_rec *g);
grpo_err grpo_store__insert_routes(grpo_store *s, const grpo_group_rec *g, int64_t gid);

/* Turns (turns.c): validation of completion i's, insertion beside completion cid, reading a
 * stored completion's (record_json malloc'd; *oom set when out of memory) and freeing them. */
extern const char grpo_store__turn_insert_sql[];
grpo_err grpo_store__check_turns(const grpo_completion_rec *c, int32_t i);
grpo_err grpo_store__insert_turns(grpo_store *s, const grpo_group_rec *g,
                                  const grpo_completion_rec *c, int64_t cid);
grpo_err grpo_store__read_turns(grpo_store *s, grpo_stored_completion *c, int *oom);
void grpo_store__free_turns(grpo_stored_completion *c);

#endif
