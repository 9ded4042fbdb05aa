/* The coordinator's lease table: which prompt group is pending, leased (to whom, until when) or
 * done. Lapsed and refused leases go to a re-issue queue that is served before fresh items, so a
 * dead worker's groups are the next ones handed out. At a run's tail a leased item may also get
 * one backup lease (another worker races the holder); backups live in a small side table so the
 * per-item record stays small. */
#include "common/common_int.h"
#include "grpo/workers.h"

#include <stdlib.h>
#include <string.h>

enum { ST_PENDING = 0, ST_LEASED = 1, ST_DONE = 2 };

#define ITEM_BITS 40
#define ITEM_MASK ((UINT64_C(1) << ITEM_BITS) - 1)

#define MAX_BACKUPS 4096 /* backup leases outstanding at once */

typedef struct item {
    uint8_t state;
    uint8_t queued;  /* in the re-issue queue */
    int32_t attempt; /* of the current (or last) primary lease; -1 before the first */
    int32_t top;     /* the highest attempt issued (primary or backup); -1 before the first */
    int32_t backup;  /* index in the backup table, or -1 */
    double deadline, issued_at;
    int64_t tag; /* the caller's, for the primary lease */
    char worker[GRPO_WORKERS_MAX_ID + 1];
} item;

typedef struct bslot {
    size_t item;
    int32_t attempt;
    double deadline;
    int64_t tag;
    char worker[GRPO_WORKERS_MAX_ID + 1];
} bslot;

struct grpo_lease_table {
    bslot *bk; /* backup leases, unordered */
    size_t nbk;
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
        (t->bk = calloc(MAX_BACKUPS, sizeof *t->bk)) == NULL ||
        (t->requeue = calloc(n_items ? n_items : 1, sizeof *t->requeue)) == NULL) {
        grpo_lease_table_destroy(t);
        return grpo__fail(GRPO_ENOMEM, "workers: out of memory for %zu leases", n_items);
    }
    for (size_t i = 0; i < n_items; i++)
        t->it[i].attempt = t->it[i].top = t->it[i].backup = -1;
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
    free(t->it), free(t->requeue), free(t->bk), free(t);
}

static void
set_state(grpo_lease_table *t, size_t i, uint8_t st)
{
    size_t *from[3] = {&t->c.pending, &t->c.leased, &t->c.done};
    (*from[t->it[i].state])--;
    (*from[st])++;
    t->it[i].state = st;
}

/* Removes item i's backup lease from the side table. */
static void
drop_backup(grpo_lease_table *t, size_t i)
{
    int32_t b = t->it[i].backup;
    if (b < 0)
        return;
    t->bk[b] = t->bk[--t->nbk];
    if ((size_t)b < t->nbk)
        t->it[t->bk[b].item].backup = b;
    t->it[i].backup = -1;
}

void
grpo_lease_table_mark_done(grpo_lease_table *t, size_t item)
{
    if (item < t->n && t->it[item].state != ST_DONE) {
        drop_backup(t, item);
        set_state(t, item, ST_DONE);
    }
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

static uint64_t
make_id(size_t i, int32_t attempt)
{
    return (((uint64_t)attempt << ITEM_BITS) | (uint64_t)i) + 1;
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
    x->attempt = ++x->top;
    if (x->attempt > 0)
        t->c.reissued++;
    t->c.issued++;
    x->deadline = now + t->timeout_s;
    x->issued_at = now;
    x->tag = 0;
    snprintf(x->worker, sizeof x->worker, "%s", worker ? worker : "");
    set_state(t, i, ST_LEASED);
    *item_out = i;
    *attempt = x->attempt;
    *lease_id = make_id(i, x->attempt);
    return 1;
}

int
grpo_lease_table_issue_backup(grpo_lease_table *t, const char *worker, double now, double min_age_s,
                              size_t *item_out, uint64_t *lease_id, int32_t *attempt)
{
    const char *w = worker ? worker : "";
    if (t->c.pending > 0 || t->nbk >= MAX_BACKUPS)
        return 0; /* not the tail yet: fresh or lapsed items come first */
    size_t best = t->n;
    for (size_t i = 0; i < t->next_fresh; i++) {
        const item *x = &t->it[i];
        if (x->state == ST_LEASED && x->backup < 0 && now - x->issued_at >= min_age_s &&
            strcmp(x->worker, w) != 0 && (best == t->n || x->issued_at < t->it[best].issued_at))
            best = i;
    }
    if (best == t->n)
        return 0;
    item *x = &t->it[best];
    bslot *b = &t->bk[t->nbk];
    b->item = best;
    b->attempt = ++x->top;
    b->deadline = now + t->timeout_s;
    b->tag = 0;
    snprintf(b->worker, sizeof b->worker, "%s", w);
    x->backup = (int32_t)t->nbk++;
    t->c.issued++, t->c.backups++;
    *item_out = best;
    *attempt = b->attempt;
    *lease_id = make_id(best, b->attempt);
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
    const char *w = worker ? worker : "";
    if (x->state != ST_LEASED)
        return 0;
    if (x->attempt == a && strcmp(x->worker, w) == 0) {
        x->deadline = now + t->timeout_s;
        return 1;
    }
    bslot *b = x->backup >= 0 ? &t->bk[x->backup] : NULL;
    if (b && b->attempt == a && strcmp(b->worker, w) == 0) {
        b->deadline = now + t->timeout_s;
        return 1;
    }
    return 0;
}

void
grpo_lease_table_set_tag(grpo_lease_table *t, uint64_t lease_id, int64_t tag)
{
    size_t i;
    int32_t a;
    if (!decode_id(t, lease_id, &i, &a) || t->it[i].state != ST_LEASED)
        return;
    item *x = &t->it[i];
    if (x->attempt == a)
        x->tag = tag;
    else if (x->backup >= 0 && t->bk[x->backup].attempt == a)
        t->bk[x->backup].tag = tag;
}

/* Item i's primary lease is gone (lapsed, its worker left, or released): its backup, if any,
 * becomes the primary; else the item is pending again, at the front of the queue. */
static void
lapse_primary(grpo_lease_table *t, size_t i)
{
    item *x = &t->it[i];
    if (x->backup >= 0) {
        const bslot *b = &t->bk[x->backup];
        x->attempt = b->attempt, x->deadline = b->deadline, x->tag = b->tag;
        snprintf(x->worker, sizeof x->worker, "%s", b->worker);
        drop_backup(t, i);
        return;
    }
    set_state(t, i, ST_PENDING);
    requeue(t, i);
}

/* Backups that lapsed (now >= 0) or that worker holds (worker != NULL) go; fn for each. */
static size_t
lapse_backups(grpo_lease_table *t, double now, const char *worker, grpo_lease_lapse_fn fn,
              void *ctx)
{
    size_t n = 0;
    for (size_t k = t->nbk; k-- > 0;) {
        bslot b = t->bk[k];
        if (worker ? strcmp(b.worker, worker) != 0 : !(b.deadline < now))
            continue;
        drop_backup(t, b.item);
        t->c.expired++, n++;
        if (fn)
            fn(ctx, b.item, b.attempt, b.worker, b.tag);
    }
    return n;
}

size_t
grpo_lease_table_expire(grpo_lease_table *t, double now, grpo_lease_lapse_fn fn, void *ctx)
{
    if (t->c.leased == 0)
        return 0;
    size_t n = lapse_backups(t, now, NULL, fn, ctx);
    for (size_t i = 0; i < t->next_fresh; i++) {
        item *x = &t->it[i];
        if (x->state != ST_LEASED || !(x->deadline < now))
            continue;
        int32_t a = x->attempt;
        int64_t tag = x->tag;
        char w[GRPO_WORKERS_MAX_ID + 1];
        snprintf(w, sizeof w, "%s", x->worker);
        lapse_primary(t, i);
        t->c.expired++, n++;
        if (fn)
            fn(ctx, i, a, w, tag);
    }
    return n;
}

size_t
grpo_lease_table_expire_worker(grpo_lease_table *t, const char *worker, grpo_lease_lapse_fn fn,
                               void *ctx)
{
    size_t n = lapse_backups(t, 0, worker, fn, ctx);
    for (size_t i = 0; i < t->next_fresh && t->c.leased > 0; i++) {
        item *x = &t->it[i];
        if (x->state != ST_LEASED || strcmp(x->worker, worker) != 0)
            continue;
        int32_t a = x->attempt;
        int64_t tag = x->tag;
        lapse_primary(t, i);
        t->c.expired++, n++;
        if (fn)
            fn(ctx, i, a, worker, tag);
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
    lapse_primary(t, item);
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
