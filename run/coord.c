/* The coordinator of a worker pool (`grpo serve`): one thread receives a request, answers it,
 * expires lapsed leases and polls the bridge for weights. No request waits on a worker, so one
 * slow or dead worker never holds the others up. This file: the run, the loop and the end;
 * run/coord_req.c: the requests. */
#include "run/coord_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* What identifies a run: a restarted coordinator with the same options resumes it. */
static char *
config_json(const grpo_coord_opts *a)
{
    cJSON *o = cJSON_CreateObject();
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)a->gen.seed);
    cJSON_AddStringToObject(o, "command", "serve");
    cJSON_AddStringToObject(o, "prompts", a->prompts);
    grpo_run__json_config(o, &a->gen);
    cJSON_AddStringToObject(o, "seed", seed);
    cJSON_AddStringToObject(o, "template", a->template_name ? a->template_name : "");
    cJSON_AddNumberToObject(o, "logprobs", a->gen.logprobs);
    grpo_run__json_stops(o, &a->gen);
    if (a->record_routes) /* runs without routes keep the config they always had */
        cJSON_AddBoolToObject(o, "record_routes", 1);
    grpo_run__json_tools(o, &a->tools); /* nothing without tools */
    grpo_run__json_numerics(o, a->numerics, a->kv_dtype);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* opts.model's weights file, checked and hashed (nothing is loaded): version 0, and the base a
 * trainer's first weight delta may be against. */
static grpo_err
base_weights(grpo_coord *c)
{
    const char *m = c->a->model;
    char idx[4300];
    struct stat st;
    if (m == NULL)
        return GRPO_OK;
    if (realpath(m, c->base_dir) == NULL)
        return grpo__fail_errno(GRPO_EIO, errno, "serve: --model %s", m);
    snprintf(c->base_path, sizeof c->base_path, "%s/model.safetensors", c->base_dir);
    snprintf(idx, sizeof idx, "%s.index.json", c->base_path);
    if (stat(idx, &st) == 0)
        return grpo__fail(GRPO_EUNSUPPORTED,
                          "serve: --model %s is sharded (%s); only a single model.safetensors "
                          "can be version 0's weights",
                          m, idx);
    grpo_err err = grpo_bridge_weights_verify(c->base_path, NULL, NULL);
    if (err == GRPO_OK)
        err = grpo_sha256_file(c->base_path, c->base_sha);
    if (err != GRPO_OK)
        c->base_sha[0] = '\0';
    return err;
}

static grpo_err
open_run(grpo_coord *c)
{
    const grpo_coord_opts *a = c->a;
    grpo_err err;
    char *cfg = config_json(a);
    if (cfg == NULL)
        return grpo__fail(GRPO_ENOMEM, "serve: out of memory");
    if ((err = grpo_store_open(&c->store, a->db, NULL)) != GRPO_OK)
        goto done;
    if (!a->new_run && (err = grpo_store_run_find(&c->run_id, c->store, cfg)) != GRPO_OK)
        goto done;
    if (c->run_id > 0) {
        if ((err = grpo_run_lock_take(&c->lock, a->db, c->run_id)) == GRPO_OK &&
            (err = grpo_store_run_reopen(c->store, c->run_id)) == GRPO_OK)
            c->resumed = 1;
        goto done;
    }
    err = grpo_run_store_begin(&c->run_id, c->store, a->command_line, cfg, &c->ps, a->prompts);
    if (err == GRPO_OK)
        err = grpo_run_lock_take(&c->lock, a->db, c->run_id);
    if (err == GRPO_OK && c->base_sha[0]) /* version 0: the model the workers are told to run */
        err = grpo_store_put_policy_version(c->store, c->run_id, 0, c->base_dir, c->base_sha);
    else if (err == GRPO_OK) /* version 0 is whatever --model the workers were started with */
        err = grpo_store_put_policy_version(c->store, c->run_id, 0, "worker --model", NULL);
done:
    free(cfg);
    snprintf(c->run_id_str, sizeof c->run_id_str, "%lld", (long long)c->run_id);
    return err;
}

/* Records the prompts and marks the groups already recorded (a resumed run) as done. */
static grpo_err
load_items(grpo_coord *c)
{
    size_t n = c->ps.n;
    grpo_err err;
    c->prompt_ids = calloc(n ? n : 1, sizeof *c->prompt_ids);
    c->issued_at = calloc(n ? n : 1, sizeof *c->issued_at);
    c->workers = calloc(GRPO_COORD_MAX_WORKERS, sizeof *c->workers);
    c->conns = calloc(GRPO_COORD_MAX_CONNS, sizeof *c->conns);
    if (!c->prompt_ids || !c->issued_at || !c->workers || !c->conns)
        return grpo__fail(GRPO_ENOMEM, "serve: out of memory for %zu prompts", n);
    if ((err = grpo_lease_table_create(&c->leases, n, c->a->lease_timeout)) != GRPO_OK)
        return err;
    c->already = 0;
    for (size_t i = 0; i < n; i++) {
        const grpo_prompt *p = &c->ps.items[i];
        grpo_prompt_rec pr = {c->ps.source,     (int64_t)i,     p->prompt,
                              p->messages_json, p->answer_json, p->tests_json};
        int32_t exists = 0;
        if ((err = grpo_store_put_prompt(&c->prompt_ids[i], c->store, &pr)) != GRPO_OK ||
            (err = grpo_store_group_exists(&exists, c->store, c->run_id, 0, c->prompt_ids[i],
                                           c->a->gen.seed)) != GRPO_OK)
            return err;
        if (exists) {
            grpo_lease_table_mark_done(c->leases, i);
            c->already++;
        }
    }
    return GRPO_OK;
}

static void
fill_params(grpo_coord *c)
{
    const grpo_coord_opts *a = c->a;
    grpo_wparams *p = &c->params;
    p->group_size = a->gen.G, p->seed = a->gen.seed, p->sampling = a->gen.s;
    p->max_new_tokens = a->gen.max_new, p->logprobs = a->gen.logprobs;
    p->template_name = (char *)a->template_name;
    p->n_stop = a->gen.n_stop;
    for (int i = 0; i < a->gen.n_stop; i++)
        p->stop[i] = (char *)a->gen.stop[i];
    p->n_stop_ids = a->gen.n_stop_ids;
    memcpy(p->stop_ids, a->gen.stop_ids, sizeof p->stop_ids);
    p->record_routes = a->record_routes != 0;
    p->speculative = a->gen.speculative;
    p->numerics = a->numerics, p->kv_dtype = a->kv_dtype;
    const grpo_run_tools *t = &a->tools;
    p->tools = t->list && t->list[0] ? (char *)t->list : NULL;
    p->max_calls = t->max_calls, p->max_turns = t->max_turns;
    p->max_obs_tokens = t->max_obs_tokens, p->tool_time_s = t->time_s;
    c->policy.version = 0, c->policy.max_staleness = a->max_staleness;
}

static grpo_err
serve_loop(grpo_coord *c, grpo_coord_progress_fn progress, void *ctx)
{
    grpo_err err = GRPO_OK;
    grpo_coord_stats st;
    double done_at = 0;
    while (err == GRPO_OK && !c->cancel) {
        grpo_lease_counts lc;
        grpo_lease_table_counts(c->leases, &lc);
        if (lc.done == lc.items && c->n_held == 0) {
            if (done_at == 0)
                done_at = grpo_now();
            if (grpo_now() - done_at >= c->a->linger)
                break;
        }
        grpo_wmsg req;
        grpo_err rerr = grpo_wserver_recv(c->srv, &req, 100);
        if (rerr == GRPO_OK) {
            err = grpo_coord__handle(c, &req);
            grpo_wmsg_fini(&req);
        } else if (rerr != GRPO_ETIMEOUT && rerr != GRPO_EFORMAT) {
            err = rerr;
        }
        if (err == GRPO_OK) {
            grpo_coord__reap_connections(c);
            grpo_lease_table_expire(c->leases, grpo_now(), grpo_coord__on_expired, c);
        }
        if (err == GRPO_OK && c->n_held > 0)
            err = grpo_coord__flush_held(c);
        if (err == GRPO_OK && c->n_held == 0)  /* held batches go out under the version they */
            err = grpo_coord__poll_weights(c); /* were accepted with (--max-staleness)      */
        if (progress) {
            grpo_coord_get_stats(c, &st);
            progress(ctx, &st, 0);
        }
    }
    return err;
}

static grpo_err
open_publisher(grpo_coord *c)
{
    grpo_bridge_opts bo;
    char wdir[PATH_MAX];
    grpo_bridge_opts_default(&bo);
    bo.run_id = c->run_id_str;
    bo.window = c->a->window;
    bo.max_staleness = c->a->max_staleness;
    snprintf(wdir, sizeof wdir, "%s.weights", c->a->db);
    bo.weights_dir = wdir;
    grpo_run_persist_init(&c->persist, c->store, c->run_id);
    bo.persist = &c->persist.persist;
    grpo_err err = grpo_bridge_publisher_create(&c->pub, c->a->publish, &bo);
    if (err == GRPO_OK && c->base_sha[0])
        grpo_bridge_set_base_weights(c->pub, 0, c->base_path, c->base_sha);
    return err;
}

static void
serve_fini(grpo_coord *c)
{
    grpo_bridge_publisher_destroy(c->pub);
    grpo_wserver_destroy(c->srv);
    grpo_lease_table_destroy(c->leases);
    for (size_t i = 0; i < c->n_held; i++) /* stored: a restart resends them */
        free(c->held[i].bytes);
    free(c->held);
    free(c->prompt_ids), free(c->issued_at), free(c->workers), free(c->conns);
    grpo_prompts_fini(&c->ps);
}

void
grpo_coord_opts_default(grpo_coord_opts *o)
{
    memset(o, 0, sizeof *o);
    grpo_run_gen_default(&o->gen);
    grpo_run_tools_default(&o->tools);
    o->db = "grpo.db";
    o->window = 4, o->max_staleness = 1, o->max_leases = 8, o->lease_timeout = 30, o->linger = 2;
    o->backup_after = -1;
}

grpo_err
grpo_coord_open(grpo_coord **out, const grpo_coord_opts *opts)
{
    grpo_coord *c = calloc(1, sizeof *c);
    *out = c;
    if (c == NULL)
        return grpo__fail(GRPO_ENOMEM, "serve: out of memory");
    c->o = *opts, c->a = &c->o;
    c->t0 = grpo_now();
    if (c->o.prompts == NULL || c->o.listen == NULL || c->o.db == NULL)
        return grpo__fail(GRPO_EINVAL, "serve: prompts, a listen URL and a store are required");
    fill_params(c);
    grpo_err err = grpo_prompts_load(&c->ps, c->o.prompts, c->o.gen.skip_bad);
    if (err == GRPO_OK)
        err = base_weights(c);
    if (err == GRPO_OK) /* a bad URL fails before the store is touched */
        err = grpo_wserver_create(&c->srv, c->o.listen);
    if (err == GRPO_OK)
        err = open_run(c);
    if (err == GRPO_OK)
        err = load_items(c);
    if (err == GRPO_OK && c->o.publish)
        err = open_publisher(c);
    return err;
}

grpo_err
grpo_coord_serve(grpo_coord *c, grpo_coord_progress_fn progress, void *ctx)
{
    grpo_err err = serve_loop(c, progress, ctx);
    if (err == GRPO_OK && c->cancel)
        err = grpo__fail(GRPO_ECANCELED, "interrupted; the groups recorded so far are kept and a "
                                         "restart resumes the run");
    if (err == GRPO_OK && c->pub) {
        grpo_log(GRPO_LOG_INFO, "serve: waiting for the trainer to acknowledge every batch");
        if ((err = grpo_bridge_flush(c->pub, -1)) == GRPO_OK)
            err = grpo_bridge_finish(c->pub);
    }
    c->secs = grpo_now() - c->t0;
    if (progress) {
        grpo_coord_stats st;
        grpo_coord_get_stats(c, &st);
        progress(ctx, &st, 1);
    }
    return grpo_run__end(c->store, c->run_id, c->cancel != 0, err);
}

void
grpo_coord_cancel(grpo_coord *c)
{
    if (c != NULL)
        c->cancel = 1;
}

void
grpo_coord_get_stats(grpo_coord *c, grpo_coord_stats *st)
{
    memset(st, 0, sizeof *st);
    grpo_lease_counts lc = {0};
    if (c->leases)
        grpo_lease_table_counts(c->leases, &lc);
    double now = grpo_now();
    st->run_id = c->run_id, st->resumed = c->resumed;
    st->items = lc.items, st->done = lc.done, st->leased = lc.leased, st->already = c->already;
    st->workers = c->n_workers;
    for (size_t i = 0; i < c->n_workers; i++)
        st->workers_alive += now - c->workers[i].last_seen < c->a->lease_timeout;
    st->held = c->n_held, st->held_total = c->held_total;
    st->recorded = c->recorded, st->duplicates = c->duplicates, st->stale = c->stale;
    st->refused = c->refused, st->requests = c->requests;
    st->issued = lc.issued, st->reissued = lc.reissued, st->backups = lc.backups;
    st->expired = lc.expired;
    st->seconds = c->secs > 0 ? c->secs : now - c->t0;
}

grpo_err
grpo_coord_close(grpo_coord *c)
{
    if (c == NULL)
        return GRPO_OK;
    grpo_bridge_publisher_destroy(c->pub);
    c->pub = NULL;
    grpo_err err = grpo_store_close(c->store);
    grpo_run_unlock(c->lock);
    serve_fini(c);
    free(c);
    return err;
}
