/* The coordinator's lease table: which prompt group is pending, leased (to whom, until when) or
 * done. Lapsed and refused leases go to a re-issue queue that is served before fresh items, so a
 * dead worker's groups are the next ones handed out. */
#include "common/common_int.h"
#include "grpo/workers.h"

#include <stdlib.h>
#include <string.h>

enum { ST_PENDING = 0, ST_LEASED = 1, ST_DONE = 2 };

#define ITEM_BITS 40
#define ITEM_MASK ((UINT64_C(1) << ITEM_BITS) - 1)

typedef struct item {
    uint8_t state;
    uint8_t queued;  /* in the re-issue queue */
    int32_t attempt; /* of the current (or last) lease; -1 before the first */
    double deadline;
    char worker[GRPO_WORKERS_MAX_ID + 1];
} item;

struct grpo_lease_table {
    item *it;
    size_t n, next_fresh; /* items below next_fresh were issued at least once (or done) */
    size_t *requeue;      /* ring of items to re-issue */
    size_t rq_head, rq_len;
    double timeout_s;
    grpo_lease_counts c;
};

grpo_err
grpo_lease_table_create(grpo_lease_table **out, size_t n_items, double timeout_s)
{
    grpo_lease_table *t = calloc(1, sizeof *t);
    *out = NULL;
    if (n_items > ITEM_MASK)
        return grpo__fail(GRPO_EINVAL, "workers: %zu items is more than a lease id can name",
                          n_items);
    if (t == NULL || (t->it = calloc(n_items ? n_items : 1, sizeof *t->it)) == NULL ||
        (t->requeue = calloc(n_items ? n_items : 1, sizeof *t->requeue)) == NULL) {
        grpo_lease_table_destroy(t);
        return grpo__fail(GRPO_ENOMEM, "workers: out of memory for %zu leases", n_items);
    }
    for (size_t i = 0; i < n_items; i++)
        t->it[i].attempt = -1;
    t->n = n_items, t->timeout_s = timeout_s;
    t->c.items = t->c.pending = n_items;
    *out = t;
    return GRPO_OK;
}

void
grpo_lease_table_destroy(grpo_lease_table *t)
{
    if (t == NULL)
        return;
    free(t->it), free(t->requeue), free(t);
}

static void
set_state(grpo_lease_table *t, size_t i, uint8_t st)
{
    size_t *from[3] = {&t->c.pending, &t->c.leased, &t->c.done};
    (*from[t->it[i].state])--;
    (*from[st])++;
    t->it[i].state = st;
}

void
grpo_lease_table_mark_done(grpo_lease_table *t, size_t item)
{
    if (item < t->n && t->it[item].state != ST_DONE)
        set_state(t, item, ST_DONE);
}

static void
requeue(grpo_lease_table *t, size_t i)
{
    if (t->it[i].queued || i >= t->next_fresh)
        return; /* a fresh item is found by next_fresh */
    t->requeue[(t->rq_head + t->rq_len) % t->n] = i;
    t->rq_len++;
    t->it[i].queued = 1;
}

/* The next item to hand out, or n. */
static size_t
next_item(grpo_lease_table *t)
{
    while (t->rq_len > 0) {
        size_t i = t->requeue[t->rq_head];
        t->rq_head = (t->rq_head + 1) % t->n, t->rq_len--;
        t->it[i].queued = 0;
        if (t->it[i].state == ST_PENDING)
            return i;
    }
    while (t->next_fresh < t->n && t->it[t->next_fresh].state != ST_PENDING)
        t->next_fresh++;
    return t->next_fresh < t->n ? t->next_fresh++ : t->n;
}

int
grpo_lease_table_issue(grpo_lease_table *t, const char *worker, double now, size_t *item_out,
                       uint64_t *lease_id, int32_t *attempt)
{
    size_t i = next_item(t);
    if (i >= t->n)
        return 0;
    item *x = &t->it[i];
    x->attempt++;
    if (x->attempt > 0)
        t->c.reissued++;
    t->c.issued++;
    x->deadline = now + t->timeout_s;
    snprintf(x->worker, sizeof x->worker, "%s", worker ? worker : "");
    set_state(t, i, ST_LEASED);
    *item_out = i;
    *attempt = x->attempt;
    *lease_id = (((uint64_t)x->attempt << ITEM_BITS) | (uint64_t)i) + 1;
    return 1;
}

static int
decode_id(const grpo_lease_table *t, uint64_t lease_id, size_t *i, int32_t *attempt)
{
    if (lease_id == 0)
        return 0;
    uint64_t v = lease_id - 1;
    if ((v & ITEM_MASK) >= t->n || (v >> ITEM_BITS) > INT32_MAX)
        return 0;
    *i = (size_t)(v & ITEM_MASK);
    *attempt = (int32_t)(v >> ITEM_BITS);
    return 1;
}

int
grpo_lease_table_heartbeat(grpo_lease_table *t, uint64_t lease_id, const char *worker, double now)
{
    size_t i;
    int32_t a;
    if (!decode_id(t, lease_id, &i, &a))
        return 0;
    item *x = &t->it[i];
    if (x->state != ST_LEASED || x->attempt != a || strcmp(x->worker, worker ? worker : "") != 0)
        return 0;
    x->deadline = now + t->timeout_s;
    return 1;
}

size_t
grpo_lease_table_expire(grpo_lease_table *t, double now,
                        void (*fn)(void *ctx, size_t item, int32_t attempt, const char *worker),
                        void *ctx)
{
    size_t n = 0;
    if (t->c.leased == 0)
        return 0;
    for (size_t i = 0; i < t->next_fresh; i++) {
        item *x = &t->it[i];
        if (x->state != ST_LEASED || !(x->deadline < now))
            continue;
        set_state(t, i, ST_PENDING);
        requeue(t, i);
        t->c.expired++, n++;
        if (fn)
            fn(ctx, i, x->attempt, x->worker);
    }
    return n;
}

size_t
grpo_lease_table_expire_worker(grpo_lease_table *t, const char *worker,
                               void (*fn)(void *ctx, size_t item, int32_t attempt,
                                          const char *worker),
                               void *ctx)
{
    size_t n = 0;
    for (size_t i = 0; i < t->next_fresh && t->c.leased > 0; i++) {
        item *x = &t->it[i];
        if (x->state != ST_LEASED || strcmp(x->worker, worker) != 0)
            continue;
        set_state(t, i, ST_PENDING);
        requeue(t, i);
        t->c.expired++, n++;
        if (fn)
            fn(ctx, i, x->attempt, x->worker);
    }
    return n;
}

grpo_lease_outcome
grpo_lease_table_lookup(const grpo_lease_table *t, uint64_t lease_id, size_t *item_out,
                        int32_t *attempt)
{
    size_t i;
    if (!decode_id(t, lease_id, &i, attempt))
        return GRPO_LEASE_UNKNOWN;
    *item_out = i;
    return t->it[i].state == ST_DONE ? GRPO_LEASE_DUPLICATE : GRPO_LEASE_NEW;
}

void
grpo_lease_table_complete(grpo_lease_table *t, size_t item)
{
    grpo_lease_table_mark_done(t, item);
}

void
grpo_lease_table_release(grpo_lease_table *t, size_t item)
{
    if (item >= t->n || t->it[item].state != ST_LEASED)
        return;
    set_state(t, item, ST_PENDING);
    requeue(t, item);
}

int32_t
grpo_lease_table_attempt(const grpo_lease_table *t, size_t item)
{
    return item < t->n ? t->it[item].attempt : -1;
}

void
grpo_lease_table_counts(const grpo_lease_table *t, grpo_lease_counts *out)
{
    *out = t->c;
}
