/* A rollout worker of a pool (`grpo worker`): pulls prompt groups from a coordinator
 * (grpo_coord), generates them with the rollout engine, scores them (grpo_run_score's step, a
 * group's samples spread over the worker's threads) and returns them; a second thread heartbeats
 * the leases it holds. It follows policy-version changes the coordinator announces: it stops
 * pulling, finishes its in-flight groups (or drops them when the staleness bound is 0), loads the
 * new weights and carries on. */
#include "run/run_int.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* One lease being generated; the group's user pointer. */
typedef struct job {
    uint64_t lease_id;
    int32_t attempt;
    char *prompt_id;
    grpo_prompt_set ps; /* the one prompt record */
    char *rendered;
    int32_t *prompt;
    int32_t n_prompt;
    int64_t version;
} job;

struct grpo_worker {
    grpo_worker_opts o;
    const grpo_worker_opts *a; /* = &o */
    grpo_wclient *cli;
    grpo_policy *pol;
    grpo_rollout *r;
    grpo_run_turns *turns; /* the coordinator's tools, or NULL; outlives every engine */
    grpo_rewarder *rewarder;
    grpo_pool *score_pool; /* a group's samples scored on the forward's thread count */
    grpo_reward_config *rcfg;
    grpo_wparams params; /* a copy of the first WORK's */
    int have_params;
    int64_t version;   /* loaded policy version */
    grpo_wpolicy want; /* newest the coordinator announced */
    char want_path[4096], want_sha[65];
    int stopping, dropping;
    uint64_t groups_done, tokens;
    double t_start;

    pthread_mutex_t mu; /* guards held[], n_held and tok_s, shared with the heartbeat thread */
    uint64_t held[GRPO_WORKERS_MAX_LEASES];
    int n_held;
    double tok_s;
    double hb_interval;
    int hb_stop;
    pthread_t hb;
    int hb_started;
    volatile sig_atomic_t cancel;
};

/* ---- heartbeats ---- */

static void *
heartbeat_main(void *arg)
{
    grpo_worker *w = arg;
    grpo_wclient *cli = NULL;
    if (grpo_wclient_create(&cli, w->a->connect) != GRPO_OK)
        return NULL;
    double next = grpo_now();
    for (;;) {
        pthread_mutex_lock(&w->mu);
        int stop = w->hb_stop;
        pthread_mutex_unlock(&w->mu);
        if (stop)
            break;
        if (grpo_now() < next) {
            usleep(50000);
            continue;
        }
        grpo_wmsg req = {0}, rep;
        req.type = GRPO_WMSG_HEARTBEAT;
        req.worker_id = (char *)w->a->id;
        pthread_mutex_lock(&w->mu);
        req.n_ids = w->n_held;
        uint64_t ids[GRPO_WORKERS_MAX_LEASES];
        memcpy(ids, w->held, sizeof ids);
        req.tokens_per_s = w->tok_s;
        req.worker_version = w->version;
        req.groups_done = w->groups_done;
        double iv = w->hb_interval;
        pthread_mutex_unlock(&w->mu);
        req.ids = ids;
        next = grpo_now() + iv;
        if (req.n_ids > 0 && grpo_wclient_call(cli, &req, &rep, (int)(iv * 1000)) == GRPO_OK)
            grpo_wmsg_fini(&rep);
    }
    grpo_wclient_destroy(cli);
    return NULL;
}

static void
held_add(grpo_worker *w, uint64_t id, double lease_timeout)
{
    pthread_mutex_lock(&w->mu);
    if (w->n_held < GRPO_WORKERS_MAX_LEASES)
        w->held[w->n_held++] = id;
    double iv = lease_timeout / 4;
    w->hb_interval = iv < 0.05 ? 0.05 : iv > 10 ? 10 : iv;
    pthread_mutex_unlock(&w->mu);
}

static void
held_remove(grpo_worker *w, uint64_t id)
{
    pthread_mutex_lock(&w->mu);
    for (int i = 0; i < w->n_held; i++)
        if (w->held[i] == id) {
            w->held[i] = w->held[--w->n_held];
            break;
        }
    pthread_mutex_unlock(&w->mu);
}

/* ---- policy ---- */

static const char *
token_bytes(const void *ctx, int32_t id, size_t *len)
{
    return grpo_policy_token_bytes(((const grpo_worker *)ctx)->pol, id, len);
}

static grpo_err
open_policy(grpo_worker *w, const char *dir, grpo_policy **out)
{
    const grpo_worker_opts *a = w->a;
    grpo_policy_opts po = {.tokenizer = a->tokenizer,
                           .template_name =
                               w->params.template_name ? w->params.template_name : a->template_name,
                           .n_threads = a->threads,
                           .kv_budget_bytes = (size_t)a->kv_bytes,
                           .backend = a->gpu >= 0 ? 2 : 0, /* CUDA: device-resident */
                           .load_mtp = w->params.speculative > 0,
                           .numerics = w->params.numerics,
                           .kv_dtype = w->params.kv_dtype};
    return grpo_policy_open(out, dir, &po);
}

/* A model directory for new weights: $TMPDIR/grpo-worker-PID-vV (the weights file is on a
 * filesystem this host shares with the trainer). */
static grpo_err
weights_dir(const grpo_worker *w, const char *weights, int64_t version, char *out, size_t cap)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(out, cap, "%s/grpo-worker-%ld-v%lld", tmp && tmp[0] ? tmp : "/tmp", (long)getpid(),
             (long long)version);
    return grpo_run_weights_dir(out, w->a->model, weights);
}

static grpo_err create_engine(grpo_worker *w, int64_t version);

/* The weights this worker mapped must be the ones the coordinator checked and announced (the
 * file is read over a shared filesystem, after the check): else the old engine keeps the
 * worker's state and the swap fails with the reason. */
static grpo_err
check_sha(const grpo_worker *w, grpo_policy *np)
{
    if (w->want_sha[0] == '\0')
        return GRPO_OK;
    const char *sha = grpo_model_weights_sha256(grpo_policy_model(np));
    if (sha == NULL)
        return GRPO_EIO;
    if (strcasecmp(sha, w->want_sha) != 0)
        return grpo__fail(GRPO_EFORMAT,
                          "worker %s: weights v%lld at %s have sha256 %s; the coordinator "
                          "announced %s",
                          w->a->id, (long long)w->want.version, w->want_path, sha, w->want_sha);
    return GRPO_OK;
}

/* With no group in flight: a new engine over the new weights (the old engine may be cancelled,
 * which is final, when in-flight groups were dropped). */
static grpo_err
swap_policy(grpo_worker *w)
{
    char dir[PATH_MAX];
    grpo_policy *np = NULL;
    grpo_err err = weights_dir(w, w->want_path, w->want.version, dir, sizeof dir);
    if (err == GRPO_OK)
        err = open_policy(w, dir, &np);
    if (err == GRPO_OK)
        err = check_sha(w, np);
    if (err != GRPO_OK) {
        grpo_policy_close(np);
        return err;
    }
    grpo_rollout_destroy(w->r);
    w->r = NULL;
    grpo_policy_close(w->pol);
    w->pol = np;
    if ((err = create_engine(w, w->want.version)) != GRPO_OK)
        return err;
    pthread_mutex_lock(&w->mu);
    w->version = w->want.version;
    pthread_mutex_unlock(&w->mu);
    grpo_log(GRPO_LOG_INFO, "worker %s: policy version %lld", w->a->id, (long long)w->version);
    return GRPO_OK;
}

/* Every reply names the coordinator's policy: remember a newer one. */
static void
note_policy(grpo_worker *w, const grpo_wpolicy *p)
{
    if (p->version <= w->want.version || p->weights_path == NULL)
        return;
    w->want.version = p->version, w->want.max_staleness = p->max_staleness;
    snprintf(w->want_path, sizeof w->want_path, "%s", p->weights_path);
    snprintf(w->want_sha, sizeof w->want_sha, "%s", p->sha256 ? p->sha256 : "");
    if (p->max_staleness == 0 && !w->dropping && w->r != NULL) {
        w->dropping = 1; /* groups of the old version would be refused: stop them now */
        grpo_rollout_cancel(w->r);
    }
}

/* ---- leases in, groups out ---- */

static grpo_err
copy_params(grpo_worker *w, const grpo_wparams *p)
{
    if (w->have_params)
        return GRPO_OK;
    w->params = *p;
    w->params.template_name = p->template_name ? strdup(p->template_name) : NULL;
    w->params.tools = p->tools ? strdup(p->tools) : NULL;
    int oom = (p->template_name && !w->params.template_name) || (p->tools && !w->params.tools);
    for (int i = 0; i < p->n_stop; i++)
        oom |= (w->params.stop[i] = strdup(p->stop[i])) == NULL;
    w->have_params = 1;
    return oom ? grpo__fail(GRPO_ENOMEM, "worker: out of memory") : GRPO_OK;
}

/* Observation text with the loaded policy's tokenizer (the policy is swapped only while no
 * group, and so no turn, is in flight). */
static grpo_err
turn_encode(void *ctx, const char *text, size_t len, int32_t **ids, size_t *n)
{
    return grpo_policy_encode_text(((const grpo_worker *)ctx)->pol, text, len, ids, n);
}

/* The lease's prompt record (the JSONL line the coordinator sent) for an environment's reset. */
static const char *
turn_record(void *ctx, const grpo_rollout_group *g)
{
    (void)ctx;
    return ((const job *)g->user)->ps.items[0].record_json;
}

/* The coordinator's tools, loaded here: "python" and plugin paths must exist on this machine. */
static grpo_err
open_tools(grpo_worker *w)
{
    const grpo_wparams *p = &w->params;
    if (p->tools == NULL || w->turns != NULL || w->a->turns_hook != NULL)
        return GRPO_OK;
    grpo_run_tools t;
    grpo_run_tools_default(&t);
    t.list = p->tools, t.max_calls = p->max_calls, t.max_turns = p->max_turns;
    t.max_obs_tokens = p->max_obs_tokens, t.time_s = p->tool_time_s;
    if (w->a->tool_threads > 0)
        t.threads = w->a->tool_threads;
    t.in_process = w->a->tools_in_process != 0;
    grpo_err err = grpo_run_turns_create(&w->turns, &t, turn_encode, turn_record, w);
    if (err != GRPO_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", grpo_error_last());
        return grpo__fail(err, "worker %s: the coordinator's tools (%s): %s", w->a->id, p->tools,
                          why);
    }
    grpo_log(GRPO_LOG_INFO, "worker %s: tools %s", w->a->id, grpo_run_turns_names(w->turns));
    return GRPO_OK;
}

static void
job_free(job *j)
{
    if (j == NULL)
        return;
    free(j->prompt_id), free(j->rendered), free(j->prompt);
    grpo_prompts_fini(&j->ps);
    free(j);
}

static grpo_err
submit_lease(grpo_worker *w, const grpo_wlease *l)
{
    job *j = calloc(1, sizeof *j);
    if (j == NULL || (j->prompt_id = strdup(l->prompt_id)) == NULL) {
        free(j);
        return grpo__fail(GRPO_ENOMEM, "worker: out of memory");
    }
    j->lease_id = l->lease_id, j->attempt = l->attempt, j->version = w->version;
    size_t n = 0;
    grpo_err err = grpo_prompts_parse(&j->ps, l->record_json, strlen(l->record_json), "lease", 0);
    if (err == GRPO_OK && j->ps.n != 1)
        err = grpo__fail(GRPO_EFORMAT, "worker: lease %llx holds %zu prompts",
                         (unsigned long long)l->lease_id, j->ps.n);
    if (err == GRPO_OK)
        err = grpo_policy_encode(w->pol, &j->ps.items[0], &j->prompt, &n, &j->rendered);
    if (err != GRPO_OK) {
        job_free(j);
        return err;
    }
    j->n_prompt = (int32_t)n;
    const grpo_wparams *p = &w->params;
    grpo_rollout_request q = {0};
    q.prompt = j->prompt, q.n_prompt = j->n_prompt, q.group_size = p->group_size;
    q.seed = p->seed, q.prompt_key = grpo_rollout_prompt_key(l->prompt_id);
    grpo_gen_params_default(&q.params);
    q.params.sampling = p->sampling;
    q.params.max_new_tokens = p->max_new_tokens;
    q.params.eos_id = grpo_policy_eos_id(w->pol);
    q.params.logprobs = p->logprobs;
    q.params.n_stop_ids = p->n_stop_ids;
    memcpy(q.params.stop_ids, p->stop_ids, sizeof p->stop_ids);
    q.params.n_stop_strings = p->n_stop;
    for (int k = 0; k < p->n_stop; k++)
        q.params.stop_strings[k] = p->stop[k];
    q.user = j;
    if ((err = grpo_rollout_submit(w->r, &q, NULL)) != GRPO_OK) {
        job_free(j);
        return err;
    }
    held_add(w, l->lease_id, l->timeout_s);
    return GRPO_OK;
}

static grpo_err
create_engine(grpo_worker *w, int64_t version)
{
    grpo_rollout_opts ro = {0};
    ro.sample_threads = w->a->threads > 0 ? w->a->threads : grpo_cpu_count();
    ro.token_bytes = token_bytes;
    ro.token_bytes_ctx = w;
    ro.record_routes = w->params.record_routes;
    ro.speculative = w->params.speculative;
    ro.turns = w->turns ? grpo_run_turns_hook(w->turns) : NULL;
    if (w->params.tools != NULL && w->a->turns_hook != NULL)
        ro.turns = w->a->turns_hook;
    grpo_err err = grpo_rollout_create(&w->r, grpo_policy_backend(w->pol), &ro);
    if (err == GRPO_OK && version != 0) /* stamps the groups with the version */
        err = grpo_rollout_set_policy(w->r, grpo_policy_backend(w->pol), version);
    return err;
}

static grpo_err
ensure_engine(grpo_worker *w)
{
    if (w->r != NULL)
        return GRPO_OK;
    grpo_err err = open_policy(w, w->a->model, &w->pol);
    if (err == GRPO_OK)
        err = open_tools(w);
    return err == GRPO_OK ? create_engine(w, 0) : err;
}

/* Sends a result until the coordinator answers (it may be restarting). */
static grpo_err
send_result(grpo_worker *w, const grpo_wmsg *req)
{
    double since = grpo_now();
    for (;;) {
        grpo_wmsg rep;
        grpo_err err = grpo_wclient_call(w->cli, req, &rep, 5000);
        if (err == GRPO_OK) {
            if (rep.type == GRPO_WMSG_ACK) {
                note_policy(w, &rep.policy);
                if (rep.status == GRPO_WACK_REFUSED || rep.status == GRPO_WACK_STALE)
                    grpo_log(GRPO_LOG_INFO, "worker %s: the coordinator %s group %s", w->a->id,
                             rep.status == GRPO_WACK_STALE ? "found stale" : "refused",
                             req->result.prompt_id);
            } else if (rep.type == GRPO_WMSG_ERROR) {
                grpo_log(GRPO_LOG_INFO, "worker %s: coordinator: %s", w->a->id, rep.message);
            }
            grpo_wmsg_fini(&rep);
            return GRPO_OK;
        }
        if (w->cancel || (w->a->give_up_s > 0 && grpo_now() - since > w->a->give_up_s))
            return err;
    }
}

/* The sample's turns on the wire (times from the group's admission); a record over the wire's
 * limit is sent as a note of its size. */
static void
wire_turns(const grpo_run_sample *s, grpo_wturn *out, char (*cut)[64])
{
    for (int32_t t = 0; t < s->n_turns; t++) {
        const grpo_rollout_turn *u = &s->turns[t];
        double at = (u->t_park - s->turns_t0) * 1e3, wait = (u->t_resume - u->t_park) * 1e3;
        char *rec = u->record_json;
        size_t n = rec ? strlen(rec) : 0;
        if (n > GRPO_WORKERS_MAX_TURN_RECORD) {
            snprintf(cut[t], sizeof cut[t], "{\"record_cut_bytes\":%zu}", n);
            rec = cut[t];
        }
        out[t] = (grpo_wturn){u->action_end,       u->n_obs, u->n_obs_cut, at > 0 ? at : 0,
                              wait > 0 ? wait : 0, rec};
    }
}

/* The group's scores as the wire's samples (terms: G x GRPO_REWARD_MAX_TERMS). */
static void
wire_samples(const grpo_run_group *g, grpo_wsample *ws, grpo_wterm *terms)
{
    for (int32_t i = 0; i < g->n_samples; i++) {
        const grpo_run_sample *s = &g->samples[i];
        grpo_wsample *x = &ws[i];
        x->index = s->index, x->finish = s->finish, x->n_tokens = s->n_tokens;
        x->tokens = (int32_t *)s->tokens, x->logprobs = (float *)s->logprobs;
        x->text = s->text ? (char *)s->text : "", x->text_len = (uint32_t)s->text_len;
        x->reward = s->score.reward, x->skipped = s->score.skipped;
        x->n_terms = s->score.n_terms;
        x->terms = terms + (size_t)i * GRPO_REWARD_MAX_TERMS;
        for (int32_t t = 0; t < s->score.n_terms; t++) {
            const grpo_reward_term *tm = &s->score.terms[t];
            x->terms[t] = (grpo_wterm){(char *)tm->verifier,
                                       (char *)tm->version,
                                       tm->label[0] ? (char *)tm->label : NULL,
                                       tm->details_json,
                                       (int32_t)tm->kind,
                                       tm->score,
                                       tm->ms};
        }
    }
}

/* Every sample's turns as the wire's, in one block (*out, free()) whose records over the limit
 * are replaced by notes kept in it too. */
static grpo_err
wire_all_turns(const grpo_run_group *g, grpo_wsample *ws, void **out)
{
    size_t nt = 0;
    for (int32_t i = 0; i < g->n_samples; i++)
        nt += (size_t)g->samples[i].n_turns;
    *out = NULL;
    if (nt == 0)
        return GRPO_OK;
    grpo_wturn *tu = malloc(nt * (sizeof *tu + 64));
    if (tu == NULL)
        return grpo__fail(GRPO_ENOMEM, "worker: out of memory for %zu turns", nt);
    char(*cut)[64] = (char(*)[64])(tu + nt);
    *out = tu;
    for (int32_t i = 0; i < g->n_samples; i++) {
        const grpo_run_sample *s = &g->samples[i];
        wire_turns(s, tu, cut);
        ws[i].n_turns = s->n_turns, ws[i].turns = s->n_turns > 0 ? tu : NULL;
        tu += s->n_turns, cut += s->n_turns;
    }
    return GRPO_OK;
}

/* The group's routes on the wire (none unless the run records them). */
static void
wire_routes(const grpo_worker *w, const grpo_run_group *g, grpo_wresult *r)
{
    if (g->prompt_routes == NULL)
        return;
    const grpo_model_config *mc = grpo_model_get_config(grpo_policy_model(w->pol));
    r->route_experts = mc->n_routed_experts, r->route_layers = mc->n_moe_layers;
    r->route_k = mc->num_experts_per_tok, r->prompt_routes = (uint8_t *)g->prompt_routes;
    for (int32_t i = 0; i < g->n_samples; i++)
        r->samples[i].routes = (uint8_t *)g->samples[i].routes;
}

/* Scores a finished group and sends it to the coordinator (a cancelled one is dropped). */
static grpo_err
return_group(grpo_worker *w, grpo_rollout_group *rg)
{
    job *j = rg->user;
    int32_t G = rg->n_samples;
    grpo_run_group g = {0};
    grpo_wsample *ws = calloc((size_t)G + 1, sizeof *ws);
    grpo_wterm *terms = calloc(((size_t)G + 1) * GRPO_REWARD_MAX_TERMS, sizeof *terms);
    grpo_err err = ws && terms ? grpo_run_group_from_rollout(&g, rg)
                               : grpo__fail(GRPO_ENOMEM, "worker: out of memory");
    g.max_tokens = w->params.max_new_tokens;
    grpo_run_prompt rp = {&j->ps.items[0], j->rendered, grpo_policy_opens_think(w->pol)};
    int aborted = err == GRPO_OK && grpo_run_group_aborted(&g);
    if (err == GRPO_OK && !aborted)
        if (w->turns == NULL || !grpo_run__score_env(&g, &rp, grpo_run_turns_names(w->turns)))
            err = grpo_run__score_on(&g, w->rewarder, &rp, w->score_pool);
    void *wturns = NULL;
    if (err == GRPO_OK && !aborted) {
        wire_samples(&g, ws, terms);
        err = wire_all_turns(&g, ws, &wturns);
    }
    if (err == GRPO_OK && !aborted) {
        for (int32_t i = 0; i < G; i++)
            w->tokens += (uint64_t)g.samples[i].n_tokens;
        grpo_wmsg req = {0};
        req.type = GRPO_WMSG_RESULT;
        req.worker_id = (char *)w->a->id;
        grpo_wresult *r = &req.result;
        r->lease_id = j->lease_id, r->attempt = j->attempt, r->policy_version = g.policy_version;
        r->prompt_id = j->prompt_id, r->n_prompt = j->n_prompt, r->prompt = j->prompt;
        r->gen_ms = g.gen_ms, r->verify_ms = g.verify_ms;
        r->n_samples = G, r->samples = ws;
        wire_routes(w, &g, r);
        err = send_result(w, &req);
        w->groups_done++;
    }
    held_remove(w, j->lease_id);
    grpo_run_group_fini(&g);
    free(ws), free(terms), free(wturns);
    job_free(j);
    double el = grpo_now() - w->t_start;
    pthread_mutex_lock(&w->mu);
    w->tok_s = el > 0 ? (double)w->tokens / el : 0;
    pthread_mutex_unlock(&w->mu);
    return err;
}

/* Asks for up to `want` groups. *retry_at: when to ask again if nothing came. */
static grpo_err
pull(grpo_worker *w, int want, double *retry_at)
{
    grpo_wmsg req = {0}, rep;
    req.type = GRPO_WMSG_PULL;
    req.worker_id = (char *)w->a->id;
    req.want = want;
    req.worker_version = w->version;
    req.groups_done = w->groups_done;
    pthread_mutex_lock(&w->mu);
    req.tokens_per_s = w->tok_s;
    pthread_mutex_unlock(&w->mu);
    grpo_err err = grpo_wclient_call(w->cli, &req, &rep, 2000);
    if (err == GRPO_ETIMEOUT) {
        *retry_at = grpo_now() + 0.2;
        return GRPO_ETIMEOUT;
    }
    if (err != GRPO_OK)
        return err;
    switch (rep.type) {
    case GRPO_WMSG_WORK:
        note_policy(w, &rep.policy);
        if ((err = copy_params(w, &rep.params)) == GRPO_OK)
            err = ensure_engine(w);
        if (err == GRPO_OK && w->want.version > w->version) /* joined after a weight update */
            err = swap_policy(w);
        for (int32_t i = 0; err == GRPO_OK && i < rep.n_leases; i++)
            err = submit_lease(w, &rep.leases[i]);
        break;
    case GRPO_WMSG_WAIT:
        note_policy(w, &rep.policy);
        *retry_at = grpo_now() + rep.retry_ms / 1000.0;
        break;
    case GRPO_WMSG_STOP: /* every group is recorded: what is still in flight is a duplicate */
        w->stopping = 1;
        if (w->r)
            grpo_rollout_cancel(w->r);
        break;
    case GRPO_WMSG_ERROR:
        err = grpo__fail(GRPO_ESTATE, "worker: the coordinator says: %s", rep.message);
        break;
    default:
        err = grpo__fail(GRPO_EFORMAT, "worker: unexpected %s reply to a pull",
                         grpo_wmsg_type_name(rep.type));
    }
    grpo_wmsg_fini(&rep);
    return err;
}

static grpo_err
worker_loop(grpo_worker *w)
{
    double retry_at = 0, last_answer = grpo_now();
    grpo_err err = GRPO_OK;
    while (err == GRPO_OK && !w->cancel) {
        grpo_rollout_stats st = {0};
        if (w->r)
            grpo_rollout_get_stats(w->r, &st);
        int in_flight = (int)(st.groups_submitted - st.groups_done);
        int swap_pending = w->want.version > w->version;
        if (w->stopping && in_flight == 0)
            break;
        if (swap_pending && in_flight == 0 && w->r) {
            grpo_rollout_group *g;
            while ((g = grpo_rollout_pop(w->r, 0)) != NULL) /* leftovers of a drop */
                err = return_group(w, g), grpo_rollout_group_free(g);
            if (err == GRPO_OK && (err = swap_policy(w)) == GRPO_OK)
                w->dropping = 0;
            continue;
        }
        if (!w->stopping && (!swap_pending || w->r == NULL) && in_flight < w->a->inflight &&
            grpo_now() >= retry_at) {
            grpo_err perr = pull(w, w->a->inflight - in_flight, &retry_at);
            if (perr == GRPO_OK)
                last_answer = grpo_now();
            else if (perr != GRPO_ETIMEOUT)
                err = perr;
            else if (w->a->give_up_s > 0 && grpo_now() - last_answer > w->a->give_up_s)
                err = grpo__fail(GRPO_ETIMEOUT, "worker: no answer from %s for %.0f s",
                                 w->a->connect, w->a->give_up_s);
            continue;
        }
        int busy = 0;
        if (w->r && in_flight > 0 && (err = grpo_rollout_step(w->r, &busy)) != GRPO_OK)
            break;
        if (busy && w->a->step_delay_ms > 0)
            usleep((useconds_t)w->a->step_delay_ms * 1000);
        grpo_rollout_group *g;
        while (err == GRPO_OK && w->r && (g = grpo_rollout_pop(w->r, 0)) != NULL) {
            err = return_group(w, g);
            grpo_rollout_group_free(g);
        }
        if (!busy && in_flight == 0)
            usleep(20000);
    }
    return err;
}

void
grpo_worker_opts_default(grpo_worker_opts *o)
{
    memset(o, 0, sizeof *o);
    o->gpu = -1, o->inflight = 2, o->kv_bytes = (uint64_t)1 << 30;
}

grpo_err
grpo_worker_open(grpo_worker **out, const grpo_worker_opts *opts)
{
    grpo_worker *w = calloc(1, sizeof *w);
    *out = w;
    if (w == NULL)
        return grpo__fail(GRPO_ENOMEM, "worker: out of memory");
    w->o = *opts, w->a = &w->o;
    w->hb_interval = 1.0;
    w->t_start = grpo_now();
    pthread_mutex_init(&w->mu, NULL);
    if (w->o.connect == NULL || w->o.model == NULL || w->o.id == NULL)
        return grpo__fail(GRPO_EINVAL, "worker: a coordinator URL, a model and an id are required");
    grpo_err err = w->o.reward_config ? grpo_reward_config_load(&w->rcfg, w->o.reward_config)
                                      : grpo_reward_config_default(&w->rcfg);
    if (err == GRPO_OK)
        err = grpo_rewarder_create(&w->rewarder, w->rcfg);
    if (err == GRPO_OK) /* scoring and generation take turns on a worker: the same threads */
        err = grpo_pool_create(&w->score_pool, w->o.threads > 0 ? w->o.threads : 0);
    if (err == GRPO_OK && w->o.gpu >= 0) /* fail before joining: the model opens with work */
        err = grpo_model_backend_check(2);
    if (err == GRPO_OK)
        err = grpo_wclient_create(&w->cli, w->o.connect);
    if (err == GRPO_OK) {
        if (pthread_create(&w->hb, NULL, heartbeat_main, w) != 0)
            err = grpo__fail(GRPO_ESYS, "worker: cannot start the heartbeat thread");
        else
            w->hb_started = 1;
    }
    return err;
}

grpo_err
grpo_worker_run(grpo_worker *w)
{
    grpo_err err = worker_loop(w);
    if (err == GRPO_OK && w->cancel)
        err = grpo__fail(GRPO_ECANCELED, "interrupted; the coordinator re-issues its leases");
    return err;
}

void
grpo_worker_cancel(grpo_worker *w)
{
    if (w != NULL)
        w->cancel = 1;
}

void
grpo_worker_get_stats(grpo_worker *w, grpo_worker_stats *st)
{
    memset(st, 0, sizeof *st);
    st->groups_done = w->groups_done, st->tokens = w->tokens;
    pthread_mutex_lock(&w->mu);
    st->version = w->version;
    pthread_mutex_unlock(&w->mu);
    st->seconds = grpo_now() - w->t_start;
}

/* Stops the heartbeats, finishes what is in flight as aborted (so every job is handed back and
 * freed) and frees everything. */
void
grpo_worker_close(grpo_worker *w)
{
    if (w == NULL)
        return;
    if (w->hb_started) {
        pthread_mutex_lock(&w->mu);
        w->hb_stop = 1;
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->hb, NULL);
    }
    if (w->r) {
        grpo_rollout_cancel(w->r);
        grpo_rollout_run(w->r);
        grpo_rollout_close(w->r);
        grpo_rollout_group *g;
        while ((g = grpo_rollout_pop(w->r, 0)) != NULL) {
            job_free(g->user);
            grpo_rollout_group_free(g);
        }
    }
    grpo_rollout_destroy(w->r);
    grpo_run_turns_destroy(w->turns);
    grpo_policy_close(w->pol);
    grpo_wclient_destroy(w->cli);
    grpo_rewarder_destroy(w->rewarder);
    grpo_pool_destroy(w->score_pool);
    grpo_reward_config_destroy(w->rcfg);
    free(w->params.template_name), free(w->params.tools);
    for (int i = 0; i < w->params.n_stop; i++)
        free(w->params.stop[i]);
    pthread_mutex_destroy(&w->mu);
    free(w);
}
