/* run/: the steps of a run over one scored group. A group where the verifiers skipped some
 * samples: advantages over the rest only (checked against the z-score of the scored rewards by
 * hand), no advantage recorded and loss mask 0 for the skipped, the group's flags from the
 * scored ones; the score step with a real rewarder marks an unparseable gold as skipped; the run
 * lock refuses a second holder, naming the run, pid and host; work with a hard deadline per item
 * comes back in order past a hung item. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "grpo/run.h"
#include "store_test_util.h"

#include <math.h>
#include <pthread.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define G 6

static int32_t toks[G][3];
static float lps[G][3];
static const int32_t prompt[2] = {7, 8};

/* A group of G samples of 3 tokens with the given rewards; skip[i] marks skipped samples. */
static void
make_group(grpo_run_group *g, const double *rewards, const int *skip)
{
    memset(g, 0, sizeof *g);
    assert_int_equal(grpo_run_group_init(g, G), GRPO_OK);
    g->run_id = 1, g->item = 3, g->store_prompt_id = 0, g->seed = 5, g->max_tokens = 3;
    g->prompt = prompt, g->n_prompt = 2;
    for (int i = 0; i < G; i++) {
        grpo_run_sample *s = &g->samples[i];
        for (int k = 0; k < 3; k++)
            toks[i][k] = 10 * i + k, lps[i][k] = -0.25f * (float)(k + 1);
        s->index = i, s->finish = GRPO_FINISH_EOS, s->n_tokens = 3;
        s->tokens = toks[i], s->logprobs = lps[i], s->text = "t", s->text_len = 1;
        s->score.reward = rewards[i], s->score.skipped = skip[i];
    }
}

static void
test_advantages_skip(void **state)
{
    (void)state;
    /* the skipped samples' rewards are 0 as the rewarder leaves them; counting them would move
     * the mean to 0.5 and the std */
    double rw[G] = {1, 0, 1, 0, 1, 0};
    int skip[G] = {0, 1, 0, 1, 0, 0};
    grpo_run_group g;
    make_group(&g, rw, skip);
    assert_int_equal(grpo_run_advantages(&g), GRPO_OK);
    /* scored: {1, 1, 1, 0}: mean 3/4, unbiased std sqrt(((1/4)^2 * 3 + (3/4)^2) / 3) */
    double m = 0.75, sd = sqrt((0.0625 * 3 + 0.5625) / 3.0);
    assert_true(fabs(g.samples[0].advantage - 0.25 / (sd + 1e-6)) < 1e-12);
    assert_true(fabs(g.samples[2].advantage - 0.25 / (sd + 1e-6)) < 1e-12);
    assert_true(fabs(g.samples[5].advantage - (0 - m) / (sd + 1e-6)) < 1e-12);
    assert_true(g.samples[1].advantage == 0.0 && g.samples[3].advantage == 0.0);
    assert_int_equal(g.flags, 0);
    /* the batch: no loss on a skipped sample's tokens, advantage 0; the others train */
    grpo_batch *b = NULL;
    assert_int_equal(grpo_run_batch(&b, &g), GRPO_OK);
    for (int i = 0; i < G; i++) {
        int64_t o = b->seq_offsets[i] + 2;
        for (int k = 0; k < 3; k++)
            assert_int_equal(b->loss_mask[o + k], !skip[i]);
        assert_int_equal(b->tokens[o], toks[i][0]);
        assert_int_equal(b->group_ids[i], 3);
        if (skip[i])
            assert_true(b->advantages[i] == 0.0f);
        else
            assert_true(fabs(b->advantages[i] - g.samples[i].advantage) < 1e-6);
    }
    assert_true(b->batch_id == ((int64_t)1 << 32 | 3));
    grpo_batch_destroy(b);
    grpo_run_group_fini(&g);
    /* the scored ones all equal: zero variance although the skipped differ from them */
    double rw2[G] = {1, 0, 1, 1, 0, 1};
    int skip2[G] = {0, 1, 0, 0, 1, 0};
    make_group(&g, rw2, skip2);
    assert_int_equal(grpo_run_advantages(&g), GRPO_OK);
    assert_int_equal(g.flags, GRPO_GROUP_ZERO_VAR);
    for (int i = 0; i < G; i++)
        assert_true(g.samples[i].advantage == 0.0);
    grpo_run_group_fini(&g);
}

/* A group with recorded routes becomes a version-2 batch: the prompt's routes once (every
 * sequence at offset 0), each completion's two routed tokens after one another; it decodes. */
static void
test_batch_routes(void **state)
{
    (void)state;
    double rw[G] = {1, 0, 1, 0, 1, 0};
    int skip[G] = {0};
    grpo_run_group g;
    make_group(&g, rw, skip);
    enum { LY = 2, KK = 2 };
    static uint8_t pr[2 * LY * KK], cr[G][2 * LY * KK];
    for (int j = 0; j < 2 * LY * KK; j++) /* distinct per (token, layer): j and j + 8 */
        pr[j] = (uint8_t)(j % 2 ? j / 2 + 8 : j / 2);
    for (int i = 0; i < G; i++) {
        for (int j = 0; j < 2 * LY * KK; j++)
            cr[i][j] = (uint8_t)((j % 2 ? 16 : 0) + (i + j / 2) % 16);
        g.samples[i].routes = cr[i];
    }
    g.prompt_routes = pr, g.route_row_bytes = LY * KK;
    g.route_bytes = 1, g.route_layers = LY, g.route_k = KK, g.route_experts = 32;
    void *bytes = NULL;
    size_t len = 0;
    assert_int_equal(grpo_run_batch_encode(&bytes, &len, &g), GRPO_OK);
    grpo_batch *b = NULL;
    assert_int_equal(grpo_batch_decode(&b, bytes, len), GRPO_OK);
    assert_true(b->flags & GRPO_BATCH_HAS_ROUTES);
    assert_int_equal(b->n_route_prompt, 2);
    assert_int_equal(b->n_route_completion, 2 * G);
    assert_memory_equal(b->route_prompt, pr, sizeof pr);
    for (int i = 0; i < G; i++) {
        assert_int_equal(b->route_prompt_offsets[i], 0);
        assert_memory_equal((uint8_t *)b->route_completion + (size_t)i * sizeof cr[i], cr[i],
                            sizeof cr[i]);
    }
    grpo_batch_destroy(b);
    free(bytes);
    grpo_run_group_fini(&g);
}

static void
test_record_skip(void **state)
{
    (void)state;
    char dir[256], db[300];
    tu_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/r.db", dir);
    grpo_store *s = NULL;
    assert_int_equal(grpo_store_open(&s, db, NULL), GRPO_OK);
    grpo_prompt_set ps = {0};
    int64_t run_id = 0, pid = 0;
    assert_int_equal(grpo_run_store_begin(&run_id, s, "grpo test", "{}", &ps, "p.jsonl"), GRPO_OK);
    grpo_prompt_rec pr = {"p.jsonl", 0, "q", NULL, "\"1\"", NULL};
    assert_int_equal(grpo_store_put_prompt(&pid, s, &pr), GRPO_OK);
    double rw[G] = {1, 0, 0, 1, 0, 1};
    int skip[G] = {0, 1, 0, 0, 0, 1};
    grpo_run_group g;
    make_group(&g, rw, skip);
    g.run_id = run_id, g.store_prompt_id = pid;
    assert_int_equal(grpo_run_advantages(&g), GRPO_OK);
    assert_int_equal(grpo_run_record(s, &g, NULL, 0), GRPO_OK);
    int64_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(grpo_store_run_completions(&ids, &n, s, run_id), GRPO_OK);
    assert_int_equal(n, G);
    for (size_t i = 0; i < n; i++) {
        grpo_stored_completion *c = NULL;
        assert_int_equal(grpo_store_get_completion(&c, s, ids[i]), GRPO_OK);
        assert_int_equal(c->sample_index, (int32_t)i);
        assert_int_equal(c->has_advantage, !skip[i]);
        if (!skip[i])
            assert_true(fabs(c->advantage - g.samples[i].advantage) < 1e-12);
        grpo_stored_completion_free(c);
    }
    free(ids);
    grpo_run_group_fini(&g);
    assert_int_equal(grpo_store_close(s), GRPO_OK);
    tu_rmrf(dir);
}

/* The score step with the default rewarder: an unparseable gold answer skips every sample. */
static void
test_score_unparseable_gold(void **state)
{
    (void)state;
    grpo_reward_config *cfg = NULL;
    grpo_rewarder *rw = NULL;
    assert_int_equal(grpo_reward_config_default(&cfg), GRPO_OK);
    assert_int_equal(grpo_rewarder_create(&rw, cfg), GRPO_OK);
    grpo_prompt p = {0}, q = {0};
    p.task = "math", p.answer = "\\frac{";
    q.task = "math", q.answer = "5";
    double rw0[G] = {0};
    int sk0[G] = {0};
    grpo_run_group g;
    make_group(&g, rw0, sk0);
    for (int i = 0; i < G; i++)
        g.samples[i].text = "<think>x</think> \\boxed{5}", g.samples[i].text_len = 26;
    grpo_run_prompt rp = {&p, "q", 0};
    assert_int_equal(grpo_run_score(&g, rw, &rp), GRPO_OK);
    for (int i = 0; i < G; i++)
        assert_int_equal(g.samples[i].score.skipped, 1);
    assert_int_equal(grpo_run_advantages(&g), GRPO_OK);
    assert_int_equal(g.flags, GRPO_GROUP_ZERO_VAR);
    rp.prompt = &q;
    assert_int_equal(grpo_run_score(&g, rw, &rp), GRPO_OK);
    assert_int_equal(g.samples[0].score.skipped, 0);
    assert_true(g.samples[0].score.reward >= 1.0);
    grpo_run_group_fini(&g);
    grpo_rewarder_destroy(rw);
    grpo_reward_config_destroy(cfg);
}

static void
test_lock(void **state)
{
    (void)state;
    char dir[256], db[300], host[128] = "";
    tu_tmpdir(dir, sizeof dir);
    snprintf(db, sizeof db, "%s/l.db", dir);
    gethostname(host, sizeof host - 1);
    grpo_run_lock *a = NULL, *b = NULL, *c = NULL;
    assert_int_equal(grpo_run_lock_take(&a, db, 2), GRPO_OK);
    assert_int_equal(grpo_run_lock_take(&b, db, 2), GRPO_ESTATE);
    assert_null(b);
    char pid[256];
    snprintf(pid, sizeof pid, "pid %ld on host %s", (long)getpid(), host);
    assert_non_null(strstr(grpo_error_last(), "run 2 is being written by"));
    assert_non_null(strstr(grpo_error_last(), pid));
    assert_int_equal(grpo_run_lock_take(&c, db, 3), GRPO_OK); /* another run: free */
    grpo_run_unlock(a);
    assert_int_equal(grpo_run_lock_take(&b, db, 2), GRPO_OK);
    grpo_run_unlock(b);
    grpo_run_unlock(c);
    grpo_run_unlock(NULL);
    tu_rmrf(dir);
}

/* grpo_run_ordered: item 2 never returns (a hung verifier); it is delivered as late past the
 * deadline, the items after it still run (a new thread takes the stuck one's place) and come
 * in input order, and the stuck thread is counted. The ctx stays alive (static): the stuck
 * thread still holds it when the test ends. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t never;
    char got[16];
    int n_got, late_for;
} ord = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, "", 0, -1};

static char *
ord_work(void *ctx, size_t i, int *error)
{
    (void)ctx;
    if (i == 2) { /* hangs */
        pthread_mutex_lock(&ord.mu);
        for (;;)
            pthread_cond_wait(&ord.never, &ord.mu);
    }
    usleep(1000 * (unsigned)(5 - i)); /* later items finish first */
    *error = 0;
    char *r = malloc(2);
    r[0] = (char)('a' + i), r[1] = 0;
    return r;
}

static char *
ord_late(void *ctx, size_t i, double ms)
{
    (void)ctx;
    ord.late_for = (int)i;
    assert_true(ms == 200.0);
    char *r = malloc(2);
    r[0] = 'X', r[1] = 0;
    return r;
}

static int
ord_deliver(void *ctx, size_t i, char *res, int error)
{
    (void)ctx;
    assert_int_equal(error, i == 2);
    ord.got[ord.n_got++] = res[0];
    free(res);
    return 0;
}

static void
test_ordered_deadline(void **state)
{
    (void)state;
    grpo_run_ordered_fns fns = {ord_work, ord_late, ord_deliver, NULL};
    size_t stuck = 9;
    double t0 = (double)time(NULL);
    assert_int_equal(grpo_run_ordered(6, 2, 200, &fns, NULL, &stuck), GRPO_OK);
    assert_true((double)time(NULL) - t0 < 30);
    ord.got[ord.n_got] = 0;
    assert_string_equal(ord.got, "abXdef");
    assert_int_equal(ord.late_for, 2);
    assert_int_equal(stuck, 1);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_advantages_skip),        cmocka_unit_test(test_record_skip),
        cmocka_unit_test(test_score_unparseable_gold), cmocka_unit_test(test_lock),
        cmocka_unit_test(test_ordered_deadline),       cmocka_unit_test(test_batch_routes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
