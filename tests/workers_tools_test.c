/* A worker pool with tools, in one process: a coordinator (grpo_coord) whose run has a tools
 * list, and a worker (grpo_worker, the tiny model) whose turns hook is a scripted one in place of
 * the list's environments: every sample parks after its third model token and gets the
 * observation {1, 2, 3}. Every group comes back with its turns and is recorded (none refused, so
 * the turns passed the coordinator's checks: with no tools in the run it refuses them), and each
 * completion that got past its third token holds the observation there with logprobs 0; a
 * trainer on the coordinator's bridge gets every group's batch with tool_mask (and loss_mask) 0
 * on exactly those observation tokens, so the turns crossed the wire. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "grpo/bridge.h"
#include "grpo/run.h"
#include "grpo/store.h"
#include "store_test_util.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_PROMPTS 3
#define NG 2
#define MODEL "data/tiny_models/bf16"

/* Per (engine group, sample): model tokens seen and whether the sample parked (scheduler
 * thread only). */
typedef struct script {
    int seen[64][NG], parked[64][NG];
} script;

static int
s_detect(void *ctx, const grpo_rollout_group *g, int32_t i, const char *text, size_t len,
         size_t scan_from, size_t new_from)
{
    (void)text, (void)len, (void)scan_from, (void)new_from;
    script *s = ctx;
    if (g->id >= 64 || i < 0 || i >= NG)
        return 0;
    return ++s->seen[g->id][i] == 3 && !s->parked[g->id][i];
}

static grpo_err
s_start(void *ctx, const grpo_rollout_group *g, int32_t i)
{
    ((script *)ctx)->parked[g->id][i] = 1;
    return GRPO_OK;
}

static int
s_poll(void *ctx, const grpo_rollout_group *g, int32_t i, grpo_rollout_obs *out)
{
    (void)ctx, (void)g, (void)i;
    out->tokens = malloc(3 * sizeof *out->tokens);
    out->record_json = strdup("{\"env\":\"scripted\",\"label\":\"ok\"}");
    if (out->tokens == NULL || out->record_json == NULL)
        return 0;
    out->tokens[0] = 1, out->tokens[1] = 2, out->tokens[2] = 3;
    out->n_tokens = 3, out->done = 0;
    return 1;
}

static void
s_wait(void *ctx, int timeout_ms)
{
    (void)ctx, (void)timeout_ms;
}

static void
s_end(void *ctx, const grpo_rollout_group *g, int32_t i)
{
    (void)ctx, (void)g, (void)i;
}

/* A trainer stand-in: takes N_PROMPTS batches, acknowledging each, and counts the completion
 * tokens with tool_mask 0 (all of them at a completion's tokens 3..5) and the batches that have
 * a tool_mask. */
typedef struct trainer {
    const char *url;
    int batches, with_mask, obs, misplaced;
    grpo_err err;
} trainer;

static void *
trainer_main(void *arg)
{
    trainer *t = arg;
    grpo_bridge_consumer *c = NULL;
    if ((t->err = grpo_bridge_consumer_create(&c, t->url, NULL, 20000)) != GRPO_OK)
        return NULL;
    while (t->batches < N_PROMPTS) {
        const void *bytes;
        size_t len;
        int64_t id;
        grpo_err e = grpo_bridge_consumer_next(c, &bytes, &len, &id, 20000);
        if (e != GRPO_OK) {
            t->err = e;
            break;
        }
        grpo_batch *b = NULL;
        if ((t->err = grpo_batch_decode(&b, bytes, len)) != GRPO_OK)
            break;
        t->batches++;
        t->with_mask += b->tool_mask != NULL;
        for (size_t i = 0; b->tool_mask && i < b->n_seq; i++) {
            int64_t c0 = b->seq_offsets[i] + b->prompt_lens[i];
            for (int64_t k = c0; k < b->seq_offsets[i + 1]; k++)
                if (b->tool_mask[k] == 0) {
                    t->obs++;
                    t->misplaced += (k - c0 < 3 || k - c0 > 5) || b->loss_mask[k] != 0;
                }
        }
        grpo_batch_destroy(b);
        grpo_bridge_consumer_ack(c, id, 1);
    }
    grpo_bridge_consumer_destroy(c);
    return NULL;
}

static void *
worker_main(void *arg)
{
    grpo_worker *w = arg;
    grpo_err *err = malloc(sizeof *err);
    *err = grpo_worker_run(w);
    return err;
}

static void
test_pool_with_scripted_tools(void **state)
{
    (void)state;
    char dir[256], db[300], prompts[300], url[320], pub[320];
    tu_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/t.db", dir);
    snprintf(prompts, sizeof prompts, "%s/p.jsonl", dir);
    snprintf(url, sizeof url, "ipc://%s/coord.ipc", dir);
    snprintf(pub, sizeof pub, "ipc://%s/pub.ipc", dir);
    FILE *f = fopen(prompts, "w");
    assert_non_null(f);
    for (int i = 0; i < N_PROMPTS; i++)
        fprintf(f, "{\"id\": \"q%d\", \"prompt\": \"What is %d + 2?\", \"answer\": \"%d\"}\n", i, i,
                i + 2);
    fclose(f);

    grpo_coord_opts co;
    grpo_coord_opts_default(&co);
    co.prompts = prompts, co.db = db, co.listen = url, co.linger = 0.5, co.lease_timeout = 20;
    co.publish = pub;
    co.gen.G = NG, co.gen.max_new = 12, co.gen.seed = 7;
    co.tools.list = "scripted", co.tools.max_calls = 2;
    grpo_coord *c = NULL;
    assert_int_equal(grpo_coord_open(&c, &co), GRPO_OK);

    script sc;
    memset(&sc, 0, sizeof sc);
    grpo_rollout_turns hook = {&sc, s_detect, s_start, s_poll, s_wait, s_end};
    grpo_worker_opts wo;
    grpo_worker_opts_default(&wo);
    wo.connect = url, wo.model = MODEL, wo.id = "w1", wo.threads = 1, wo.give_up_s = 30;
    wo.kv_bytes = 64u << 20, wo.turns_hook = &hook;
    grpo_worker *w = NULL;
    assert_int_equal(grpo_worker_open(&w, &wo), GRPO_OK);
    trainer tr = {pub, 0, 0, 0, 0, GRPO_OK};
    pthread_t tt;
    assert_int_equal(pthread_create(&tt, NULL, trainer_main, &tr), 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, worker_main, w), 0);
    grpo_err serr = grpo_coord_serve(c, NULL, NULL);
    grpo_worker_cancel(w); /* it may not have asked again within the linger */
    void *wret = NULL;
    pthread_join(th, &wret);
    pthread_join(tt, NULL);
    grpo_coord_stats st;
    grpo_coord_get_stats(c, &st);
    assert_int_equal(serr, GRPO_OK);
    grpo_err werr = *(grpo_err *)wret;
    assert_true(werr == GRPO_OK || werr == GRPO_ECANCELED);
    free(wret);
    assert_int_equal(st.recorded, N_PROMPTS);
    assert_int_equal(st.refused, 0);
    int64_t run_id = st.run_id;
    grpo_worker_close(w);
    assert_int_equal(grpo_coord_close(c), GRPO_OK);

    grpo_store *s = NULL;
    assert_int_equal(grpo_store_open(&s, db, NULL), GRPO_OK);
    int64_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(grpo_store_run_completions(&ids, &n, s, run_id), GRPO_OK);
    assert_int_equal(n, N_PROMPTS * NG);
    int parked = 0;
    for (size_t i = 0; i < n; i++) {
        grpo_stored_completion *x = NULL;
        assert_int_equal(grpo_store_get_completion(&x, s, ids[i]), GRPO_OK);
        if (x->n_tokens >= 6) { /* it got past its third token: the observation follows it */
            assert_int_equal(x->token_ids[3], 1);
            assert_int_equal(x->token_ids[4], 2);
            assert_int_equal(x->token_ids[5], 3);
            assert_true(x->token_logprobs[3] == 0 && x->token_logprobs[5] == 0);
            parked++;
        }
        grpo_stored_completion_free(x);
    }
    free(ids);
    assert_true(parked > 0);
    assert_int_equal(tr.err, GRPO_OK);
    assert_int_equal(tr.batches, N_PROMPTS);
    assert_true(tr.with_mask > 0);        /* a group none of whose samples parked has none */
    assert_int_equal(tr.obs, 3 * parked); /* the turns crossed the wire */
    assert_int_equal(tr.misplaced, 0);
    assert_int_equal(grpo_store_close(s), GRPO_OK);
    tu_rmrf(dir);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_with_scripted_tools),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
