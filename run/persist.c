/* The run in the store: its beginning with provenance, and the store as the bridge publisher's
 * persistence (a batch is kept until the trainer acknowledges it, across crashes of either). */
#include "run/run_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

grpo_err
grpo_run_store_begin(int64_t *run_id, grpo_store *s, const char *command_line,
                     const char *config_json, const grpo_prompt_set *ps, const char *prompts_path)
{
    grpo_run_info ri = {0};
    ri.command_line = command_line ? command_line : "grpo";
    ri.config_json = config_json;
    ri.dataset_path = ps->git_repo ? ps->git_repo : prompts_path;
    ri.dataset_rev = ps->git_repo ? ps->git_commit : NULL;
    return grpo_store_run_begin(run_id, s, &ri);
}

grpo_err
grpo_run__end(grpo_store *s, int64_t run_id, int cancelled, grpo_err err)
{
    char msg[600];
    if (s == NULL || run_id <= 0)
        return err;
    snprintf(msg, sizeof msg, "%s", grpo_error_last());
    grpo_store_run_end(s, run_id, cancelled ? "interrupted" : err == GRPO_OK ? "ok" : "failed");
    if (err != GRPO_OK)
        grpo__fail(err, "%s", msg[0] ? msg : grpo_err_name(err));
    return err;
}

static grpo_err
persist_put(void *ctx, int64_t id, const void *bytes, size_t len)
{
    grpo_run_persist *rp = ctx;
    grpo_batch_info in;
    int status;
    grpo_err err = grpo_batch_peek_info(bytes, len, &in);
    if (err == GRPO_OK)
        err = grpo_store_batch_status(rp->store, id, &status);
    if (err != GRPO_OK || status != GRPO_BATCH_ABSENT) /* stored already: the contract's no-op */
        return err;
    return grpo_store_put_batch(rp->store, id, rp->run_id, in.step, 1, bytes, len);
}

static int
persist_is_acked(void *ctx, int64_t id)
{
    int status;
    return grpo_store_batch_status(((grpo_run_persist *)ctx)->store, id, &status) == GRPO_OK &&
           status == GRPO_BATCH_ACKED;
}

static grpo_err
persist_ack(void *ctx, int64_t id)
{
    return grpo_store_ack_batch(((grpo_run_persist *)ctx)->store, id);
}

static grpo_err
persist_sent(void *ctx, int64_t id)
{
    return grpo_store_mark_published(((grpo_run_persist *)ctx)->store, id);
}

typedef struct {
    grpo_bridge_unacked_fn fn;
    void *arg;
    grpo_err err;
} unacked_adapter;

static int
unacked_one(void *ctx, int64_t id, int64_t step, int32_t n_groups, int32_t published,
            const void *bytes, size_t len)
{
    unacked_adapter *u = ctx;
    (void)step, (void)n_groups, (void)published;
    u->err = u->fn(u->arg, id, bytes, len);
    return u->err != GRPO_OK;
}

static grpo_err
persist_list(void *ctx, grpo_bridge_unacked_fn fn, void *arg)
{
    grpo_run_persist *rp = ctx;
    unacked_adapter u = {fn, arg, GRPO_OK};
    grpo_err err = grpo_store_unacked_batches(rp->store, rp->run_id, unacked_one, &u);
    return err != GRPO_OK ? err : u.err;
}

void
grpo_run_persist_init(grpo_run_persist *rp, grpo_store *store, int64_t run_id)
{
    rp->store = store, rp->run_id = run_id;
    rp->persist = (grpo_bridge_persist){rp,           persist_put,      persist_ack,
                                        persist_list, persist_is_acked, persist_sent};
}
