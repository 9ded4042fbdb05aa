/* A run in this process, from its first group to its end: the engine steps on the caller's
 * thread; verifier threads pop finished groups and take each through the steps (score,
 * advantages, record, --out lines, publish); new weights from a trainer are swapped in between
 * groups; admission pauses while the verifiers are behind. */
#include "run/run_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *
sampling_json(const grpo_run_opts *a, const grpo_policy *pol, const grpo_prompt *p,
              int32_t n_prompt, int32_t eos)
{
    cJSON *o = cJSON_CreateObject();
    char *txt;
    grpo_run__json_sampling(o, &a->gen, p->id);
    cJSON_AddStringToObject(o, "template", grpo_policy_template(pol));
    char tp[PATH_MAX];
    if (a->tokenizer)
        cJSON_AddStringToObject(o, "tokenizer", realpath(a->tokenizer, tp) ? tp : a->tokenizer);
    cJSON_AddNumberToObject(o, "eos_id", eos);
    grpo_run__json_stops(o, &a->gen);
    grpo_run__json_tools(o, &a->tools);
    cJSON_AddNumberToObject(o, "prompt_tokens", n_prompt);
    const grpo_model *m = grpo_policy_model((grpo_policy *)pol);
    grpo_run__json_numerics(o, grpo_model_numerics(m), grpo_model_kv_dtype(m));
    txt = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return txt;
}

static void
note_error(grpo_run *c, grpo_err err)
{
    pthread_mutex_lock(&c->mu);
    if (c->first_err == GRPO_OK) {
        c->first_err = err;
        snprintf(c->first_msg, sizeof c->first_msg, "%s", grpo_error_last());
    }
    pthread_mutex_unlock(&c->mu);
}

/* One line per completion of the group, written together and flushed (the store already holds
 * the group: a resumed run repairs the file from it). */
static grpo_err
write_jsonl(grpo_run *c, const grpo_rollout_group *rg, const grpo_run_group *g)
{
    const grpo_run__prompt *pc = rg->user;
    grpo_buf b = {0};
    grpo_err err = GRPO_OK;
    for (int32_t i = 0; i < g->n_samples && err == GRPO_OK; i++) {
        const grpo_rollout_sample *s = &rg->samples[i];
        const grpo_run_sample *x = &g->samples[i];
        grpo_run_line l = {0};
        l.run_id = c->run_id, l.group = g->item, l.prompt_id = pc->p->id;
        l.task = pc->p->task, l.answer = pc->p->answer;
        l.sample = x->index, l.finish = x->finish, l.n_tokens = x->n_tokens;
        l.text = x->text, l.text_len = x->text_len;
        l.reward = x->score.reward, l.advantage = x->advantage, l.skipped = x->score.skipped;
        l.tokens = x->tokens, l.logprobs = x->logprobs;
        l.logprobs_processed = s->logprob_processed, l.ref_logprobs = s->ref_logprob;
        l.rescored_logprobs = s->policy_logprob;
        grpo_turn_rec *tr = x->n_turns > 0 ? calloc((size_t)x->n_turns, sizeof *tr) : NULL;
        if (tr != NULL)
            grpo_run__turn_recs(x, tr);
        l.n_turns = tr ? x->n_turns : 0, l.turns = tr;
        char *line = grpo_run_line_json(&l);
        free(tr);
        err = line ? grpo__buf_append(&b, line, strlen(line)) : GRPO_ENOMEM;
        if (err == GRPO_OK)
            err = grpo__buf_append(&b, "\n", 1);
        free(line);
    }
    pthread_mutex_lock(&c->mu);
    if (err == GRPO_OK && (fwrite(b.data, 1, b.len, c->out) != b.len || fflush(c->out) != 0))
        err = grpo__fail_errno(GRPO_EIO, errno, "%s: write failed", c->a->out);
    pthread_mutex_unlock(&c->mu);
    grpo__buf_fini(&b);
    return err;
}

static grpo_err
publish_group(grpo_run *c, const grpo_run_group *g)
{
    grpo_batch *b = NULL;
    grpo_err err = grpo_run_batch(&b, g);
    if (err == GRPO_OK)
        err = grpo_bridge_publish(c->pub, b, -1);
    grpo_batch_destroy(b);
    return err;
}

static void
add_totals(grpo_run *c, const grpo_run_group *g)
{
    pthread_mutex_lock(&c->mu);
    c->groups_done++;
    c->zero_std_groups += (g->flags & GRPO_GROUP_ZERO_VAR) != 0;
    for (int32_t i = 0; i < g->n_samples; i++) {
        const grpo_run_sample *s = &g->samples[i];
        c->skipped += s->score.skipped != 0;
        c->reward_sum += s->score.skipped ? 0.0 : s->score.reward;
        c->tokens += (uint64_t)s->n_tokens;
    }
    c->samples += (size_t)g->n_samples;
    pthread_mutex_unlock(&c->mu);
}

/* The shape of a group's recorded routes (none without --record-routes). */
static void
route_shape(grpo_run_group *g, const grpo_model_config *mc)
{
    if (g->prompt_routes == NULL)
        return;
    g->route_bytes = grpo_model_route_bytes(mc), g->route_layers = mc->n_moe_layers;
    g->route_k = mc->num_experts_per_tok, g->route_experts = mc->n_routed_experts;
}

/* One group at a time on the pool of verify_threads threads, so that a group's samples are
 * scored by all of them: when the last group finishes generating, the others are idle, and its
 * scoring would otherwise be one thread's alone (the run's tail). While a group holds the pool,
 * the other verifier threads record theirs or wait. */
grpo_err
grpo_run_score_default(grpo_run *c, grpo_run_group *g, const grpo_run_prompt *p)
{
    if (c->turns != NULL && grpo_run__score_env(g, p, grpo_run_turns_names(c->turns)))
        return GRPO_OK;
    pthread_mutex_lock(&c->score_mu);
    grpo_err err = grpo_run__score_on(g, c->rewarder, p, c->score_pool);
    pthread_mutex_unlock(&c->score_mu);
    return err;
}

/* The steps of a finished group: score, advantages, record, --out lines, publish. */
static grpo_err
handle_group(grpo_run *c, grpo_rollout_group *rg)
{
    grpo_run__prompt *pc = rg->user;
    grpo_run_group g = {0};
    grpo_err err = grpo_run_group_from_rollout(&g, rg);
    /* step = the policy version that sampled the group: 0 without a trainer; with --publish each
     * new weights version is a training step, so `grpo stats --by step` is the reward curve */
    g.run_id = c->run_id, g.item = pc->item, g.store_prompt_id = pc->store_prompt_id;
    g.step = rg->policy_version, g.seed = c->a->gen.seed, g.max_tokens = c->a->gen.max_new;
    g.sampling_json = pc->sampling_json;
    route_shape(&g, grpo_model_get_config(grpo_policy_model(c->pol)));
    grpo_run_prompt rp = {pc->p, pc->rendered, c->opens_think};
    if (err == GRPO_OK)
        err = c->a->score ? c->a->score(c->a->score_ctx, &g, c->rewarder, &rp)
                          : grpo_run_score_default(c, &g, &rp);
    if (err == GRPO_OK)
        err = grpo_run_advantages(&g);
    if (err == GRPO_OK)
        err = grpo_run_record(c->store, &g, NULL, 0);
    if (err == GRPO_OK && c->out)
        err = write_jsonl(c, rg, &g);
    if (err == GRPO_OK && c->pub && !grpo_run_group_aborted(&g)) /* a cancelled group is */
        err = publish_group(c, &g); /* recorded, never sent to a trainer */
    if (err == GRPO_OK)
        add_totals(c, &g);
    grpo_run_group_fini(&g);
    return err;
}

static void *
verify_worker(void *arg)
{
    grpo_run *c = arg;
    grpo_rollout_group *g;
    while ((g = grpo_rollout_pop(c->r, 1)) != NULL) {
        grpo_err err = handle_group(c, g);
        if (err != GRPO_OK) {
            note_error(c, err);
            grpo_rollout_cancel(c->r);
        }
        pthread_mutex_lock(&c->mu);
        c->groups_handled++;
        pthread_mutex_unlock(&c->mu);
        grpo_rollout_group_free(g);
    }
    return NULL;
}

static grpo_err
run_encode(void *ctx, const char *text, size_t len, int32_t **ids, size_t *n)
{
    return grpo_policy_encode_text(((const grpo_run *)ctx)->pol, text, len, ids, n);
}

static const char *
run_record(void *ctx, const grpo_rollout_group *g)
{
    (void)ctx;
    return ((const grpo_run__prompt *)g->user)->p->record_json;
}

/* The scheduler's token text comes through the run, so the policy behind it can be swapped. */
static const char *
run_token_bytes(const void *ctx, int32_t id, size_t *len)
{
    return grpo_policy_token_bytes(((const grpo_run *)ctx)->pol, id, len);
}

/* The model directory of weights version v: DB.weights/runN-vV, beside the store, so that `grpo
 * replay` can load that version later. */
static grpo_err
weights_dir(const grpo_run *c, const grpo_weights_update *u, char *out, size_t cap)
{
    snprintf(out, cap, "%s.weights/run%lld-v%lld", c->a->db, (long long)c->run_id,
             (long long)u->version);
    return grpo_run_weights_dir(out, c->a->model, u->path);
}

/* With no group in flight: load the new weights, swap them into the scheduler (and the rescoring
 * pool), record the version. A bad update is logged and the old weights stay. */
static grpo_err
swap_weights(grpo_run *c, const grpo_weights_update *u)
{
    char dir[PATH_MAX];
    grpo_policy *np = NULL;
    grpo_kv *nkv = NULL;
    grpo_rollout_backend nbe = {0};
    const grpo_run_opts *a = c->a;
    grpo_policy_opts po = {.tokenizer = a->tokenizer,
                           .template_name = a->template_name,
                           .n_threads = a->threads,
                           .kv_budget_bytes = (size_t)a->kv_bytes,
                           .kv_budget_tokens = (size_t)a->kv_tokens,
                           .backend = a->gpu >= 0 ? 2 : 0, /* CUDA: device-resident */
                           .numerics = a->numerics,
                           .kv_dtype = a->kv_dtype,
                           .load_mtp = a->gen.speculative > 0};
    grpo_err err = weights_dir(c, u, dir, sizeof dir);
    if (err == GRPO_OK)
        err = grpo_policy_open(&np, dir, &po);
    if (err == GRPO_OK && c->rescore_kv != NULL &&
        ((err = grpo_kv_create_for(&nkv, grpo_policy_model(np), (size_t)256 << 20)) != GRPO_OK ||
         (err = grpo_rollout_backend_model(&nbe, grpo_policy_model(np), nkv)) != GRPO_OK))
        goto fail;
    if (err == GRPO_OK &&
        (err = grpo_rollout_set_policy(c->r, grpo_policy_backend(np), u->version)) != GRPO_OK)
        goto fail;
    if (err != GRPO_OK)
        goto fail;
    if (c->rescore_kv != NULL) {
        grpo_rollout_backend_fini(&c->rescore_be);
        grpo_kv_destroy(c->rescore_kv);
        c->rescore_be = nbe, c->rescore_kv = nkv; /* the engine holds rescore_be by address */
    }
    grpo_policy *old = c->pol;
    c->pol = np; /* the scheduler thread is the only reader of c->pol from here */
    grpo_policy_close(old);
    grpo_bridge_set_policy_version(c->pub, u->version);
    grpo_log(GRPO_LOG_INFO, "rollout: policy version %lld from %s", (long long)u->version, u->path);
    return grpo_store_put_policy_version(c->store, c->run_id, u->version, dir, u->sha256);
fail:
    grpo_log(GRPO_LOG_ERROR, "weights version %lld from %s not applied: %s", (long long)u->version,
             u->path, grpo_error_last());
    grpo_rollout_backend_fini(&nbe);
    grpo_kv_destroy(nkv);
    grpo_policy_close(np);
    return GRPO_OK;
}

static grpo_err
submit_all(grpo_run *c, const grpo_prompt_set *ps, grpo_run__prompt *pcs, size_t *n_submitted)
{
    const grpo_run_opts *a = c->a;
    grpo_err err = GRPO_OK;
    int32_t eos = grpo_policy_eos_id(c->pol);
    for (size_t i = 0; i < ps->n && err == GRPO_OK; i++) {
        const grpo_prompt *p = &ps->items[i];
        int32_t *ids = NULL;
        size_t n = 0;
        pcs[i].p = p, pcs[i].item = (int64_t)i;
        err = grpo_policy_encode(c->pol, p, &ids, &n, &pcs[i].rendered);
        if (err != GRPO_OK && a->gen.skip_bad) {
            grpo_log(GRPO_LOG_WARN, "rollout: skipping prompt %s (line %lld): %s", p->id,
                     (long long)p->line, grpo_error_last());
            err = GRPO_OK;
            continue;
        }
        grpo_prompt_rec pr = {ps->source,       (int64_t)i,     p->prompt,
                              p->messages_json, p->answer_json, p->tests_json};
        if (err == GRPO_OK)
            err = grpo_store_put_prompt(&pcs[i].store_prompt_id, c->store, &pr);
        int32_t exists = 0;
        if (err == GRPO_OK && c->resumed &&
            (err = grpo_store_group_exists(&exists, c->store, c->run_id, 0, pcs[i].store_prompt_id,
                                           a->gen.seed)) == GRPO_OK &&
            exists) {
            c->already++;
            free(ids);
            continue;
        }
        if (err == GRPO_OK &&
            (pcs[i].sampling_json = sampling_json(a, c->pol, p, (int32_t)n, eos)) == NULL)
            err = GRPO_ENOMEM;
        grpo_rollout_request q = {0};
        q.prompt = ids, q.n_prompt = (int32_t)n, q.group_size = a->gen.G, q.seed = a->gen.seed;
        q.prompt_key = grpo_rollout_prompt_key(p->id);
        grpo_gen_params_default(&q.params);
        q.params.sampling = a->gen.s;
        q.params.max_new_tokens = a->gen.max_new;
        q.params.eos_id = eos;
        q.params.logprobs = a->gen.logprobs;
        q.params.n_stop_ids = a->gen.n_stop_ids;
        memcpy(q.params.stop_ids, a->gen.stop_ids, sizeof a->gen.stop_ids);
        q.params.n_stop_strings = a->gen.n_stop;
        for (int k = 0; k < a->gen.n_stop; k++)
            q.params.stop_strings[k] = a->gen.stop[k];
        q.user = &pcs[i];
        if (err == GRPO_OK && (err = grpo_rollout_submit(c->r, &q, NULL)) == GRPO_OK)
            (*n_submitted)++;
        free(ids);
    }
    return err;
}

void
grpo_run_get_stats(grpo_run *c, grpo_run_stats *st)
{
    memset(st, 0, sizeof *st);
    if (c->r)
        grpo_rollout_get_stats(c->r, &st->engine);
    st->run_id = c->run_id, st->resumed = c->resumed, st->finished = c->finished;
    st->cancelled = c->cancel != 0, st->dropped = c->dropped, st->already = c->already;
    st->submitted = c->submitted;
    st->out_rebuilt = c->out_rebuilt, st->out_dropped = c->out_dropped;
    pthread_mutex_lock(&c->mu);
    st->groups_done = c->groups_done, st->completions = c->samples, st->skipped = c->skipped;
    st->zero_std_groups = c->zero_std_groups, st->tokens = c->tokens;
    st->reward_mean =
        c->samples > c->skipped ? c->reward_sum / (double)(c->samples - c->skipped) : 0.0;
    pthread_mutex_unlock(&c->mu);
    st->seconds = c->secs > 0 ? c->secs : c->t0 > 0 ? grpo_now() - c->t0 : 0;
}

/* The engine over the opened policy, with the verifier, reference and rescoring hooks; the
 * prompts not yet recorded submitted; the verifier threads started. */
grpo_err
grpo_run__start(grpo_run *c)
{
    const grpo_run_opts *a = c->a;
    grpo_rollout_opts ro = {0};
    ro.kv_budget_pages = c->budget_pages;
    ro.max_batch_seqs = a->max_batch;
    ro.sample_threads = a->threads > 0 ? a->threads : grpo_cpu_count();
    ro.token_bytes = run_token_bytes;
    ro.token_bytes_ctx = c;
    c->opens_think = grpo_policy_opens_think(c->pol);
    ro.ref = c->ref ? grpo_policy_backend(c->ref) : NULL;
    ro.rescore = c->rescore_kv ? &c->rescore_be : NULL;
    ro.record_routes = a->record_routes;
    ro.speculative = a->gen.speculative;
    grpo_err err = GRPO_OK;
    if (a->turns_hook != NULL) {
        ro.turns = a->turns_hook;
    } else if (a->tools.list != NULL && a->tools.list[0] != '\0') {
        if ((err = grpo_run_turns_create(&c->turns, &a->tools, run_encode, run_record, c)) !=
            GRPO_OK)
            return err;
        ro.turns = grpo_run_turns_hook(c->turns);
    }
    if ((err = grpo_rollout_create(&c->r, grpo_policy_backend(c->pol), &ro)) != GRPO_OK)
        return err;
    if (a->verify_threads > 1 &&
        (err = grpo_pool_create(&c->score_pool, a->verify_threads)) != GRPO_OK)
        return err;
    if ((c->pcs = calloc(c->ps.n ? c->ps.n : 1, sizeof *c->pcs)) == NULL ||
        (c->th = calloc((size_t)a->verify_threads, sizeof *c->th)) == NULL)
        return grpo__fail(GRPO_ENOMEM, "rollout: out of memory");
    if ((err = submit_all(c, &c->ps, c->pcs, &c->submitted)) != GRPO_OK)
        return err;
    if (c->resumed)
        grpo_log(GRPO_LOG_INFO, "rollout: %zu groups already recorded, %zu to sample", c->already,
                 c->submitted);
    for (int i = 0; i < a->verify_threads; i++, c->n_th++)
        if (pthread_create(&c->th[i], NULL, verify_worker, c) != 0)
            return grpo__fail(GRPO_ESYS, "rollout: cannot start a verifier thread");
    return GRPO_OK;
}

/* Steps the engine until every submitted group is done (or a cancel or an error): new weights
 * are swapped in between groups, and generation pauses while the verifiers are behind. */
grpo_err
grpo_run__drive(grpo_run *c, grpo_run_progress_fn progress, void *ctx)
{
    grpo_err err = GRPO_OK;
    int busy = 1, swapping = 0;
    grpo_weights_update wu;
    grpo_run_stats rs;
    while (err == GRPO_OK && busy) {
        if (c->cancel == 1) {
            grpo_log(GRPO_LOG_INFO, "rollout: cancelled; finishing the groups in flight as "
                                    "aborted");
            grpo_rollout_cancel(c->r);
            c->cancel = 2;
        }
        grpo_rollout_stats st;
        grpo_rollout_get_stats(c->r, &st);
        if (c->pub && !swapping && grpo_bridge_poll_weights(c->pub, &wu))
            swapping = 1; /* drain: groups are sampled from one policy */
        if (swapping && st.groups_in_flight == 0) {
            err = swap_weights(c, &wu);
            swapping = 0;
        }
        pthread_mutex_lock(&c->mu);
        size_t pending = (size_t)st.groups_done - c->groups_handled;
        pthread_mutex_unlock(&c->mu);
        grpo_rollout_pause(c->r, swapping || pending >= (size_t)c->a->max_pending);
        if (err == GRPO_OK)
            err = grpo_rollout_step(c->r, &busy);
        grpo_rollout_stats st2;
        grpo_rollout_get_stats(c->r, &st2);
        if (st2.forward_calls == st.forward_calls && busy)
            usleep(1000); /* paused with nothing to decode: wait for the verifiers */
        if (progress) {
            grpo_run_get_stats(c, &rs);
            progress(ctx, &rs, 0);
        }
    }
    return err;
}

/* After the drive: the engine closed (cancelled on an error), the verifier threads joined, the
 * trainer's acknowledgements awaited and the run's status recorded. Returns the run's outcome,
 * with the first verifier thread's error as the message. */
grpo_err
grpo_run__finish(grpo_run *c, grpo_err err, grpo_run_progress_fn progress, void *ctx)
{
    if (err != GRPO_OK && c->r)
        note_error(c, err);
    if (c->r) {
        if (err != GRPO_OK) {
            grpo_rollout_cancel(c->r);
            grpo_rollout_run(c->r);
        }
        grpo_rollout_close(c->r);
    }
    for (int i = 0; i < c->n_th; i++)
        pthread_join(c->th[i], NULL);
    c->n_th = 0;
    if (progress && c->r && err == GRPO_OK) {
        grpo_run_stats rs;
        grpo_run_get_stats(c, &rs);
        progress(ctx, &rs, 1);
    }
    if (c->first_err != GRPO_OK)
        err = grpo__fail(c->first_err, "%s", c->first_msg);
    if (c->cancel && err == GRPO_OK)
        err = grpo__fail(GRPO_ECANCELED, "interrupted; the groups finished so far are recorded");
    if (err == GRPO_OK && c->pub) {
        grpo_log(GRPO_LOG_INFO, "rollout: waiting for the trainer to acknowledge every batch");
        if ((err = grpo_bridge_flush(c->pub, -1)) == GRPO_OK)
            err = grpo_bridge_finish(c->pub);
    }
    c->secs = grpo_now() - c->t0;
    return grpo_run__end(c->store, c->run_id, c->cancel != 0, err);
}
