/* The coordinator's requests: a worker's pull (leases out), heartbeat (leases kept) and result
 * (the group recorded once, with its batch, then handed to the trainer as its window allows);
 * lapsed and disconnected workers' leases; new weights announced. */
#include "run/coord_int.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char *
sampling_json(const grpo_coord_opts *a, const grpo_prompt *p)
{
    cJSON *o = cJSON_CreateObject();
    grpo_run__json_sampling(o, &a->gen, p->id);
    if (a->template_name)
        cJSON_AddStringToObject(o, "template", a->template_name);
    grpo_run__json_numerics(o, a->numerics, a->kv_dtype);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static double
wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void
note_worker(grpo_coord *c, const char *id, double tok_s, int result)
{
    double now = grpo_now();
    worker_info *w = NULL;
    for (size_t i = 0; i < c->n_workers && w == NULL; i++)
        if (strcmp(c->workers[i].id, id) == 0)
            w = &c->workers[i];
    if (w == NULL && c->n_workers < GRPO_COORD_MAX_WORKERS) {
        w = &c->workers[c->n_workers++];
        snprintf(w->id, sizeof w->id, "%s", id);
        grpo_log(GRPO_LOG_INFO, "serve: worker %s joined", id);
    }
    if (w == NULL)
        return;
    w->last_seen = now;
    if (tok_s >= 0)
        w->tokens_per_s = tok_s;
    w->groups += (uint64_t)result;
}

/* Fills the wire lease for item and records it in the store; the lease's tag is its row. */
static grpo_err
begin_lease(grpo_coord *c, const char *worker, size_t item, grpo_wlease *l, int backup)
{
    const grpo_prompt *p = &c->ps.items[item];
    l->timeout_s = c->a->lease_timeout;
    l->prompt_id = p->id, l->record_json = p->record_json;
    double at = wall_now();
    if (!backup)
        c->issued_at[item] = at;
    grpo_lease_rec lr = {c->run_id, 0,  c->prompt_ids[item],     c->a->gen.seed, l->attempt,
                         worker,    at, at + c->a->lease_timeout};
    int64_t row = 0;
    grpo_err err = grpo_store_lease_begin(&row, c->store, &lr);
    if (err == GRPO_OK)
        grpo_lease_table_set_tag(c->leases, l->lease_id, row);
    return err;
}

static grpo_err
on_pull(grpo_coord *c, const grpo_wmsg *req, grpo_wmsg *rep)
{
    grpo_lease_counts lc;
    grpo_lease_table_counts(c->leases, &lc);
    note_worker(c, req->worker_id, req->tokens_per_s, 0);
    if (lc.done == lc.items) {
        rep->type = GRPO_WMSG_STOP;
        return GRPO_OK;
    }
    static grpo_wlease ls[GRPO_WORKERS_MAX_LEASES];
    /* The trainer is behind (held batches): no new work until it catches up. */
    int want = c->n_held > 0 ? 0 : req->want < c->a->max_leases ? req->want : c->a->max_leases;
    int n = 0;
    double now = grpo_now();
    size_t item;
    for (int backup = 0; backup < 2; backup++) {
        while (n < want && (backup ? c->a->backup_after >= 0 &&
                                         grpo_lease_table_issue_backup(
                                             c->leases, req->worker_id, now, c->a->backup_after,
                                             &item, &ls[n].lease_id, &ls[n].attempt)
                                   : grpo_lease_table_issue(c->leases, req->worker_id, now, &item,
                                                            &ls[n].lease_id, &ls[n].attempt))) {
            grpo_err err = begin_lease(c, req->worker_id, item, &ls[n], backup);
            if (err != GRPO_OK)
                return err;
            n++;
        }
    }
    rep->policy = c->policy;
    if (n == 0) {
        rep->type = GRPO_WMSG_WAIT;
        rep->retry_ms =
            (uint32_t)(c->a->lease_timeout * 1000 / 10 > 500 ? 500 : c->a->lease_timeout * 100);
        return GRPO_OK;
    }
    rep->type = GRPO_WMSG_WORK;
    rep->params = c->params;
    rep->n_leases = n, rep->leases = ls;
    return GRPO_OK;
}

static void
on_heartbeat(grpo_coord *c, const grpo_wmsg *req, grpo_wmsg *rep)
{
    double now = grpo_now();
    note_worker(c, req->worker_id, req->tokens_per_s, 0);
    for (int32_t i = 0; i < req->n_ids; i++)
        grpo_lease_table_heartbeat(c->leases, req->ids[i], req->worker_id, now);
    rep->type = GRPO_WMSG_ACK;
    rep->status = GRPO_WACK_OK;
    rep->policy = c->policy;
}

/* A result that does not fit its prompt or the run's params is refused (not recorded). */
static const char *
check_result(const grpo_coord *c, const grpo_wresult *r, size_t item)
{
    if (strcmp(r->prompt_id, c->ps.items[item].id) != 0)
        return "its prompt id is not the leased prompt's";
    if (r->n_samples != c->a->gen.G)
        return "its group size differs from --group";
    if ((grpo_wresult_route_row_bytes(r) > 0) != (c->a->record_routes != 0))
        return c->a->record_routes ? "it has no routes (--record-routes)"
                                   : "it has routes the run does not record";
    uint8_t *seen = calloc((size_t)r->n_samples, 1);
    const char *why = seen ? NULL : "out of memory";
    for (int32_t i = 0; seen && i < r->n_samples && why == NULL; i++) {
        int32_t k = r->samples[i].index;
        if (k < 0 || k >= r->n_samples || seen[k])
            why = "its sample indices are not 0..G-1 once each";
        else
            seen[k] = 1;
        if (r->samples[i].n_tokens > c->a->gen.max_new)
            why = "a completion is longer than --max-new-tokens";
        if (r->samples[i].n_turns > 0 && c->params.tools == NULL)
            why = "a completion has turns and the run has no --tools";
    }
    free(seen);
    return why;
}

/* Hands held batches to the publisher, oldest first, while its window has room. */
grpo_err
grpo_coord__flush_held(grpo_coord *c)
{
    size_t k = 0;
    grpo_err err = GRPO_OK;
    while (k < c->n_held && (err = grpo_bridge_publish_bytes(c->pub, c->held[k].bytes,
                                                             c->held[k].len, 0)) == GRPO_OK)
        free(c->held[k++].bytes);
    memmove(c->held, c->held + k, (c->n_held - k) * sizeof *c->held);
    c->n_held -= k;
    return err == GRPO_ETIMEOUT ? GRPO_OK : err;
}

/* Hands a stored batch (bytes: ours) to the publisher, behind any held ones. When its window is
 * full (the trainer is behind, or not up yet) the batch stays held and flush_held hands it over
 * once there is room; new leases wait meanwhile. Blocking here instead would leave every worker
 * unanswered for as long as the trainer is busy. */
static grpo_err
hand_over(grpo_coord *c, void *bytes, size_t len)
{
    if (c->n_held == c->cap_held) {
        size_t cap = c->cap_held ? 2 * c->cap_held : 16;
        held_batch *t = realloc(c->held, cap * sizeof *t);
        if (t == NULL) {
            free(bytes);
            return grpo__fail(GRPO_ENOMEM, "serve: out of memory");
        }
        c->held = t, c->cap_held = cap;
    }
    c->held[c->n_held++] = (held_batch){bytes, len};
    grpo_err err = grpo_coord__flush_held(c);
    if (err == GRPO_OK && c->n_held > 0 && c->held_total++ == 0) /* this one is held (FIFO) */
        grpo_log(GRPO_LOG_INFO,
                 "serve: the trainer has %d batches unacknowledged (the window); "
                 "recorded groups wait for it, and new leases too\n",
                 c->a->window);
    return err;
}

/* The steps of a group a worker returned: its verdicts as the scores, advantages, then the record
 * with its batch in one transaction (a crash never leaves a recorded group whose batch the
 * trainer will not get; a restart resends unacknowledged ones), and the batch to the trainer. */
static grpo_err
record_group(grpo_coord *c, const grpo_wmsg *req, size_t item, int32_t attempt)
{
    grpo_run_group g = {0};
    char *sj = sampling_json(c->a, &c->ps.items[item]);
    void *batch = NULL;
    size_t batch_len = 0;
    grpo_err err = sj ? grpo_run_group_from_wire(&g, &req->result)
                      : grpo__fail(GRPO_ENOMEM, "serve: out of memory");
    g.run_id = c->run_id, g.item = (int64_t)item, g.store_prompt_id = c->prompt_ids[item];
    g.step = 0, g.seed = c->a->gen.seed, g.max_tokens = c->a->gen.max_new, g.sampling_json = sj;
    g.finished_at = wall_now();
    g.started_at = c->issued_at[item] > 0 ? c->issued_at[item] : g.finished_at;
    g.worker_id = req->worker_id, g.lease_attempt = attempt;
    if (err == GRPO_OK)
        err = grpo_run_advantages(&g);
    if (err == GRPO_OK && c->pub && !grpo_run_group_aborted(&g))
        err = grpo_run_batch_encode(&batch, &batch_len, &g);
    if (err == GRPO_OK)
        err = grpo_run_record(c->store, &g, batch, batch_len);
    if (err == GRPO_OK)
        err = grpo_store_lease_group_done(c->store, c->run_id, 0, c->prompt_ids[item],
                                          c->a->gen.seed, attempt);
    if (err == GRPO_OK && batch != NULL)
        err = hand_over(c, batch, batch_len), batch = NULL;
    grpo_run_group_fini(&g);
    free(sj), free(batch);
    return err;
}

static grpo_err
on_result(grpo_coord *c, const grpo_wmsg *req, grpo_wmsg *rep)
{
    const grpo_wresult *r = &req->result;
    size_t item;
    int32_t attempt;
    rep->type = GRPO_WMSG_ACK;
    rep->policy = c->policy;
    note_worker(c, req->worker_id, -1, 0);
    grpo_lease_outcome o = grpo_lease_table_lookup(c->leases, r->lease_id, &item, &attempt);
    if (o == GRPO_LEASE_DUPLICATE) {
        c->duplicates++;
        rep->status = GRPO_WACK_DUPLICATE;
        return GRPO_OK;
    }
    const char *why = o == GRPO_LEASE_UNKNOWN ? "its lease id names no prompt of this run"
                                              : check_result(c, r, item);
    if (why != NULL) {
        grpo_log(GRPO_LOG_WARN, "serve: refused a result from worker %s: %s", req->worker_id, why);
        c->refused++;
        rep->status = GRPO_WACK_REFUSED;
        return GRPO_OK;
    }
    if (c->a->max_staleness >= 0 && c->policy.version - r->policy_version > c->a->max_staleness) {
        c->stale++;
        rep->status = GRPO_WACK_STALE;
        if (grpo_lease_table_attempt(c->leases, item) == attempt) /* its backup carries on, */
            grpo_lease_table_release(c->leases, item);            /* else it is re-issued at once */
        return GRPO_OK;
    }
    grpo_err err = record_group(c, req, item, attempt);
    if (err != GRPO_OK)
        return err;
    grpo_lease_table_complete(c->leases, item);
    note_worker(c, req->worker_id, -1, 1);
    c->recorded++;
    rep->status = GRPO_WACK_OK;
    return GRPO_OK;
}

void
grpo_coord__on_expired(void *ctx, size_t item, int32_t attempt, const char *worker, int64_t row)
{
    grpo_coord *c = ctx;
    grpo_log(GRPO_LOG_INFO, "serve: lease of prompt %s (attempt %d) held by %s lapsed; re-issuing",
             c->ps.items[item].id, attempt, worker);
    if (row > 0)
        grpo_store_lease_end(c->store, row, "expired");
}

/* New weights from the trainer: recorded, then announced to the workers in every reply. */
grpo_err
grpo_coord__poll_weights(grpo_coord *c)
{
    grpo_weights_update wu;
    if (c->pub == NULL || !grpo_bridge_poll_weights(c->pub, &wu))
        return GRPO_OK;
    snprintf(c->weights_path, sizeof c->weights_path, "%s", wu.path);
    snprintf(c->weights_sha, sizeof c->weights_sha, "%s", wu.sha256);
    c->policy.version = wu.version;
    c->policy.weights_path = c->weights_path, c->policy.sha256 = c->weights_sha;
    grpo_bridge_set_policy_version(c->pub, wu.version);
    grpo_log(GRPO_LOG_INFO, "serve: policy version %lld from %s", (long long)wu.version, wu.path);
    return grpo_store_put_policy_version(c->store, c->run_id, wu.version, wu.path, wu.sha256);
}

static void
note_conn(grpo_coord *c, const char *worker_id, uint32_t pipe)
{
    size_t w = 0;
    while (w < c->n_workers && strcmp(c->workers[w].id, worker_id) != 0)
        w++;
    if (w == c->n_workers || pipe == 0)
        return;
    for (size_t i = 0; i < c->n_conns; i++)
        if (c->conns[i].pipe == pipe) {
            c->conns[i].worker = (uint32_t)w;
            return;
        }
    if (c->n_conns < GRPO_COORD_MAX_CONNS)
        c->conns[c->n_conns++] = (conn){pipe, (uint32_t)w};
}

static void
on_disconnected(void *ctx, size_t item, int32_t attempt, const char *worker, int64_t row)
{
    grpo_coord *c = ctx;
    grpo_log(GRPO_LOG_INFO,
             "serve: worker %s disconnected holding prompt %s (attempt %d); "
             "re-issuing\n",
             worker, c->ps.items[item].id, attempt);
    if (row > 0)
        grpo_store_lease_end(c->store, row, "expired");
}

/* A worker whose every connection closed (killed, crashed, cut off) loses its leases now rather
 * than at their deadline. A worker merely reconnecting loses them too; its results still count. */
void
grpo_coord__reap_connections(grpo_coord *c)
{
    uint32_t ids[256];
    int n = grpo_wserver_closed_pipes(c->srv, ids, 256);
    for (int k = 0; k < n; k++) {
        size_t i = 0;
        while (i < c->n_conns && c->conns[i].pipe != ids[k])
            i++;
        if (i == c->n_conns)
            continue;
        uint32_t w = c->conns[i].worker;
        c->conns[i] = c->conns[--c->n_conns];
        int still = 0;
        for (size_t j = 0; j < c->n_conns && !still; j++)
            still = c->conns[j].worker == w;
        if (!still)
            grpo_lease_table_expire_worker(c->leases, c->workers[w].id, on_disconnected, c);
    }
}

grpo_err
grpo_coord__handle(grpo_coord *c, const grpo_wmsg *req)
{
    grpo_wmsg rep = {0};
    grpo_err err = GRPO_OK;
    c->requests++;
    switch (req->type) {
    case GRPO_WMSG_PULL:
        err = on_pull(c, req, &rep);
        break;
    case GRPO_WMSG_HEARTBEAT:
        on_heartbeat(c, req, &rep);
        break;
    case GRPO_WMSG_RESULT:
        err = on_result(c, req, &rep);
        break;
    default:
        rep.type = GRPO_WMSG_ERROR, rep.message = "not a request";
    }
    if (err != GRPO_OK) {
        char msg[600];
        snprintf(msg, sizeof msg, "coordinator failed: %s", grpo_error_last());
        grpo_wmsg e = {0};
        e.type = GRPO_WMSG_ERROR, e.message = msg;
        grpo_wserver_reply(c->srv, &e);
        return err;
    }
    if (req->worker_id)
        note_conn(c, req->worker_id, grpo_wserver_last_pipe(c->srv));
    grpo_err rerr = grpo_wserver_reply(c->srv, &rep);
    if (rerr != GRPO_OK) /* the worker went away: its leases lapse */
        grpo_log(GRPO_LOG_WARN, "serve: %s", grpo_error_last());
    return GRPO_OK;
}
