/* The run object: grpo_run_open opens what a run owns (prompts, policy, reference, rewarder,
 * store, --out, publisher) and begins, resumes or finds the run; grpo_run_execute takes it to
 * its end (run/drive.c); grpo_run_close undoes it all. */
#include "run/run_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char *
config_json(const grpo_run_opts *a)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", a->model);
    cJSON_AddStringToObject(o, "prompts", a->prompts);
    grpo_run__json_config(o, &a->gen);
    /* The seed's exact digits: as a double, 2^53 + 1 would read as 2^53 and --resume would take
     * a run of one seed for the other. Below 10^15 the text is what it always was. */
    char seed[24];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)a->gen.seed);
    cJSON_AddRawToObject(o, "seed", seed);
    cJSON_AddStringToObject(o, "kv_budget", a->kv_budget);
    if (a->ref_model)
        cJSON_AddStringToObject(o, "ref_model", a->ref_model);
    if (a->reward_config)
        cJSON_AddStringToObject(o, "reward_config", a->reward_config);
    grpo_run__json_numerics(o, a->numerics, a->kv_dtype);
    if (a->record_routes) /* so --resume continues a routed run only with routes, and the rest */
        cJSON_AddBoolToObject(o, "record_routes", 1); /* read as they always did */
    grpo_run__json_tools(o, &a->tools);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* Locks the run found for --resume, drops its groups an interrupt cut short and reopens it. */
static grpo_err
resume_run(grpo_run *c, const grpo_run_opts *a, const char *sha)
{
    int64_t dropped = 0;
    grpo_err err = grpo_run_lock_take(&c->lock, a->db, c->run_id);
    if (err == GRPO_OK &&
        (err = grpo_store_run_prepare_resume(c->store, c->run_id, sha, &dropped)) == GRPO_OK &&
        (err = grpo_store_run_reopen(c->store, c->run_id)) == GRPO_OK)
        c->resumed = 1, c->dropped = dropped;
    return err;
}

/* --resume with nothing unfinished: the newest finished run with these options, if any, is left
 * as it is (nothing to sample; --out is completed from the store, never truncated). */
static grpo_err
find_finished(grpo_run *c, const grpo_run_opts *a, const char *cfg)
{
    grpo_err err = grpo_store_run_find_finished(&c->run_id, c->store, cfg);
    if (err != GRPO_OK || c->run_id == 0)
        return err;
    if ((err = grpo_run_lock_take(&c->lock, a->db, c->run_id)) == GRPO_OK)
        c->finished = 1;
    return err;
}

/* With --resume, the newest unfinished run with this config (its interrupted groups dropped), or
 * the newest finished one (left as it is); else, or when there is none, a new run. */
static grpo_err
begin_run(grpo_run *c, const grpo_run_opts *a, const char *sha)
{
    grpo_err err = GRPO_OK;
    char *cfg = config_json(a);
    if (cfg == NULL) {
        err = grpo__fail(GRPO_ENOMEM, "rollout: out of memory");
        goto done;
    }
    if (a->resume && (err = grpo_store_run_find(&c->run_id, c->store, cfg)) != GRPO_OK)
        goto done;
    if (c->run_id > 0) {
        err = resume_run(c, a, sha);
        goto done;
    }
    if (a->resume && ((err = find_finished(c, a, cfg)) != GRPO_OK || c->finished))
        goto done;
    err = grpo_run_store_begin(&c->run_id, c->store, a->command_line, cfg, &c->ps, a->prompts);
    if (err == GRPO_OK)
        err = grpo_run_lock_take(&c->lock, a->db, c->run_id);
done:
    free(cfg);
    return err;
}

/* --out: a new run's file is started afresh; a resumed (or finished) run's is first made to hold
 * exactly the completions the store records, then appended to. */
static grpo_err
open_out(grpo_run *c, const grpo_run_opts *a)
{
    grpo_err err;
    if (!c->resumed && !c->finished) {
        if ((c->out = fopen(a->out, "w")) == NULL)
            return grpo__fail_errno(GRPO_EIO, errno, "%s: cannot open for writing", a->out);
        return GRPO_OK;
    }
    if ((err = grpo_run_repair_jsonl(a->out, c->store, c->run_id, &c->ps, &c->out_rebuilt,
                                     &c->out_dropped)) != GRPO_OK)
        return err;
    if (!c->finished && (c->out = fopen(a->out, "a")) == NULL)
        return grpo__fail_errno(GRPO_EIO, errno, "%s: cannot open for appending", a->out);
    return GRPO_OK;
}

/* A single-file model is version 0's weights file, so a trainer's first update can be a delta
 * against it (sha is then that file's own sha256). */
static void
set_delta_base(grpo_run *c, const char *model_dir, const char *sha)
{
    char f[PATH_MAX + 32], idx[PATH_MAX + 32];
    struct stat st;
    snprintf(f, sizeof f, "%s/model.safetensors", model_dir);
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", model_dir);
    if (stat(f, &st) == 0 && stat(idx, &st) != 0)
        grpo_bridge_set_base_weights(c->pub, 0, f, sha);
}

static grpo_err
open_all(grpo_run *c, const grpo_run_opts *a)
{
    uint64_t bytes = a->kv_bytes, tokens = a->kv_tokens;
    grpo_err err;
    if ((err = grpo_prompts_load(&c->ps, a->prompts, a->gen.skip_bad)) != GRPO_OK)
        return err;
    grpo_policy_opts po = {.tokenizer = a->tokenizer,
                           .template_name = a->template_name,
                           .n_threads = a->threads,
                           .kv_budget_bytes = (size_t)bytes,
                           .kv_budget_tokens = (size_t)tokens,
                           .backend = a->gpu >= 0 ? 2 : 0, /* CUDA: device-resident */
                           .numerics = a->numerics,
                           .kv_dtype = a->kv_dtype,
                           .load_mtp = a->gen.speculative > 0};
    if ((err = grpo_policy_open(&c->pol, a->model, &po)) != GRPO_OK)
        return err;
    const grpo_rollout_backend *be = grpo_policy_backend(c->pol);
    c->budget_pages = tokens ? (size_t)((tokens + GRPO_KV_PAGE - 1) / GRPO_KV_PAGE) : 0;
    if (c->budget_pages > be->pages_total)
        return grpo__fail(GRPO_EINVAL, "--kv-budget %s: more than the KV pool of %zu tokens",
                          a->kv_budget, be->pages_total * (size_t)GRPO_KV_PAGE);
    if (a->ref_model) {
        grpo_policy_opts ro = {.tokenizer = a->tokenizer,
                               .template_name = a->template_name,
                               .n_threads = a->threads,
                               .backend = a->gpu >= 0 ? 2 : 0, /* CUDA: device-resident */
                               .numerics = a->numerics,
                               .kv_dtype = a->kv_dtype};
        if ((err = grpo_policy_open(&c->ref, a->ref_model, &ro)) != GRPO_OK)
            return err;
        if (grpo_policy_backend(c->ref)->vocab != be->vocab)
            return grpo__fail(GRPO_EINVAL, "--ref-model %s: vocabulary %d differs from %d",
                              a->ref_model, grpo_policy_backend(c->ref)->vocab, be->vocab);
    }
    if (a->rescore) {
        if ((err = grpo_kv_create_for(&c->rescore_kv, grpo_policy_model(c->pol),
                                      (size_t)256 << 20)) != GRPO_OK ||
            (err = grpo_rollout_backend_model(&c->rescore_be, grpo_policy_model(c->pol),
                                              c->rescore_kv)) != GRPO_OK)
            return err;
    }
    err = a->reward_config ? grpo_reward_config_load(&c->rcfg, a->reward_config)
                           : grpo_reward_config_default(&c->rcfg);
    if (err != GRPO_OK || (err = grpo_rewarder_create(&c->rewarder, c->rcfg)) != GRPO_OK)
        return err;
    if ((err = grpo_store_open(&c->store, a->db, NULL)) != GRPO_OK)
        return err;
    const char *sha = grpo_model_weights_sha256(grpo_policy_model(c->pol));
    if (sha == NULL)
        return GRPO_EIO;
    if ((err = begin_run(c, a, sha)) != GRPO_OK)
        return err;
    snprintf(c->run_id_str, sizeof c->run_id_str, "%lld", (long long)c->run_id);
    char loc[PATH_MAX];
    if (realpath(a->model, loc) == NULL)
        snprintf(loc, sizeof loc, "%s", a->model);
    if ((err = grpo_store_put_policy_version(c->store, c->run_id, 0, loc, sha)) != GRPO_OK)
        return err;
    if (a->out && (err = open_out(c, a)) != GRPO_OK)
        return err;
    if (c->finished)
        return GRPO_OK;
    if (a->publish) {
        grpo_bridge_opts bo;
        grpo_bridge_opts_default(&bo);
        bo.run_id = c->run_id_str;
        bo.window = a->window;
        grpo_run_persist_init(&c->persist, c->store, c->run_id);
        bo.persist = &c->persist.persist;
        if ((err = grpo_bridge_publisher_create(&c->pub, a->publish, &bo)) != GRPO_OK)
            return err;
        set_delta_base(c, loc, sha);
    }
    return GRPO_OK;
}

grpo_err
grpo_run_open(grpo_run **out, const grpo_run_opts *opts)
{
    grpo_run *c = calloc(1, sizeof *c);
    *out = c;
    if (c == NULL)
        return grpo__fail(GRPO_ENOMEM, "rollout: out of memory");
    c->o = *opts, c->a = &c->o;
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->score_mu, NULL);
    if (c->o.model == NULL || c->o.prompts == NULL || c->o.db == NULL)
        return grpo__fail(GRPO_EINVAL, "rollout: a model, prompts and a store are required");
    if (c->o.verify_threads < 1)
        c->o.verify_threads = 1;
    return open_all(c, c->a);
}

grpo_err
grpo_run_execute(grpo_run *c, grpo_run_progress_fn progress, void *ctx)
{
    if (c->finished)
        return GRPO_OK;
    c->t0 = grpo_now();
    grpo_err err = grpo_run__start(c);
    if (err == GRPO_OK)
        err = grpo_run__drive(c, progress, ctx);
    return grpo_run__finish(c, err, progress, ctx);
}

void
grpo_run_cancel(grpo_run *c)
{
    if (c != NULL && c->cancel == 0)
        c->cancel = 1;
}

/* The publisher and the store close first (the publisher persists acks into the store), then
 * the lock goes, then everything open_all and the run made, in reverse. */
grpo_err
grpo_run_close(grpo_run *c)
{
    if (c == NULL)
        return GRPO_OK;
    grpo_bridge_publisher_destroy(c->pub);
    if (c->out)
        fclose(c->out);
    grpo_err err = grpo_store_close(c->store);
    grpo_run_unlock(c->lock);
    grpo_rollout_destroy(c->r);
    grpo_run_turns_destroy(c->turns);
    for (size_t i = 0; c->pcs && i < c->ps.n; i++)
        free(c->pcs[i].rendered), free(c->pcs[i].sampling_json);
    free(c->pcs), free(c->th);
    grpo_pool_destroy(c->score_pool);
    grpo_rewarder_destroy(c->rewarder);
    grpo_reward_config_destroy(c->rcfg);
    grpo_rollout_backend_fini(&c->rescore_be);
    grpo_kv_destroy(c->rescore_kv);
    grpo_policy_close(c->ref);
    grpo_policy_close(c->pol);
    grpo_prompts_fini(&c->ps);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->score_mu);
    free(c);
    return err;
}
