/* The scheduler over the fake model of rollout/engine/fake_backend.c (a paged token cache with
 * grpo_kv's sharing rules, whose logits hash the whole sequence read back from its pages):
 * completions do not depend on batch composition, arrival order, G, batch size or prefix sharing;
 * pages return to zero; the KV budget holds; stop strings stop at the token that completes them;
 * teacher-forced scoring agrees with the sampler's raw logprobs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "rollout/engine/engine_int.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VOCAB 40
#define EOS 1

typedef struct {
    grpo_engine__fake *fake;
    grpo_rollout_backend be;
    grpo_rollout *r;
} rig;

/* Token id -> its text: two letters, so stop strings can span tokens. */
static const char *
tok_bytes(const void *ctx, int32_t id, size_t *len)
{
    static char table[VOCAB][3];
    (void)ctx;
    if (table[0][0] == 0)
        for (int i = 0; i < VOCAB; i++)
            table[i][0] = (char)('a' + i % 26), table[i][1] = (char)('A' + i / 2 % 26);
    *len = 2;
    return table[id];
}

/* draws: the backend makes the draws where its logits are (forward_sample), as a GPU does. */
static void
rig_open_ex(rig *g, size_t pages, const grpo_rollout_opts *o, int draws)
{
    assert_int_equal(grpo_engine__fake_create(&g->fake, VOCAB, 4, pages, 17), GRPO_OK);
    grpo_engine__fake_backend(g->fake, &g->be);
    if (draws)
        grpo_engine__fake_sampler(g->fake, &g->be);
    grpo_rollout_opts opts = {0};
    if (o)
        opts = *o;
    opts.token_bytes = tok_bytes;
    assert_int_equal(grpo_rollout_create(&g->r, &g->be, &opts), GRPO_OK);
}

static void
rig_open(rig *g, size_t pages, const grpo_rollout_opts *o)
{
    rig_open_ex(g, pages, o, 0);
}

static void
rig_close(rig *g)
{
    assert_int_equal(g->be.pages_used(g->be.ctx), 0); /* page accounting returns to zero */
    assert_int_equal(grpo_engine__fake_seqs_live(g->fake), 0);
    grpo_rollout_destroy(g->r);
    grpo_engine__fake_destroy(g->fake);
}

static const int32_t prompt_a[] = {5, 6, 7, 8, 9, 10, 11}; /* 7 tokens: a partial last page */
static const int32_t prompt_b[] = {12, 13, 14, 15, 16, 17, 18, 19}; /* 8: page-aligned */
static const int32_t prompt_c[] = {20, 21, 22};

static grpo_rollout_request
req(const int32_t *p, int32_t n, int32_t G, const char *id)
{
    grpo_rollout_request q;
    memset(&q, 0, sizeof q);
    q.prompt = p, q.n_prompt = n, q.group_size = G, q.seed = 1234;
    q.prompt_key = grpo_rollout_prompt_key(id);
    grpo_gen_params_default(&q.params);
    q.params.sampling.temperature = 1.0f;
    q.params.sampling.top_p = 0.9f;
    q.params.max_new_tokens = 12;
    q.params.eos_id = EOS;
    q.params.logprobs = GRPO_LOGPROBS_BOTH;
    return q;
}

/* Runs and collects every group, indexed by submit id. */
static int
run_all(rig *g, grpo_rollout_group **out, int max)
{
    assert_int_equal(grpo_rollout_run(g->r), GRPO_OK);
    int n = 0;
    grpo_rollout_group *x;
    while ((x = grpo_rollout_pop(g->r, 0)) != NULL) {
        assert_true(x->id < (uint64_t)max);
        out[x->id] = x;
        n++;
    }
    return n;
}

static void
assert_same_sample(const grpo_rollout_sample *a, const grpo_rollout_sample *b)
{
    assert_int_equal(a->index, b->index);
    assert_int_equal(a->n_tokens, b->n_tokens);
    assert_int_equal(a->finish, b->finish);
    assert_memory_equal(a->tokens, b->tokens, (size_t)a->n_tokens * sizeof(int32_t));
    assert_memory_equal(a->logprob_raw, b->logprob_raw, (size_t)a->n_tokens * sizeof(float));
    assert_memory_equal(a->logprob_processed, b->logprob_processed,
                        (size_t)a->n_tokens * sizeof(float));
    assert_int_equal(a->text_len, b->text_len);
    assert_memory_equal(a->text, b->text, a->text_len);
}

/* Group A with G=4 alone is the reference; every other arrangement must reproduce it. */
static void
test_invariance(void **state)
{
    (void)state;
    grpo_rollout_group *ref[1] = {0}, *res[8] = {0};
    rig g;
    rig_open(&g, 4096, NULL);
    grpo_rollout_request a4 = req(prompt_a, 7, 4, "A");
    assert_int_equal(grpo_rollout_submit(g.r, &a4, NULL), GRPO_OK);
    assert_int_equal(run_all(&g, ref, 1), 1);
    rig_close(&g);
    /* the samples differ from one another, and some end at EOS before the limit */
    int differ = 0;
    for (int i = 1; i < 4; i++)
        differ += ref[0]->samples[i].n_tokens != ref[0]->samples[0].n_tokens ||
                  memcmp(ref[0]->samples[i].tokens, ref[0]->samples[0].tokens, 8) != 0;
    assert_true(differ > 0);

    struct {
        grpo_rollout_opts o;
        int order; /* 0: A first, 1: A last */
        int32_t G;
        int draws; /* 1: made by the backend (forward_sample) */
    } cases[] = {
        {{.max_batch_seqs = 0}, 1, 4, 0},  /* mixed with other groups, arriving last */
        {{.max_batch_seqs = 1}, 0, 4, 0},  /* batch-1 decoding */
        {{.max_batch_seqs = 3}, 1, 64, 0}, /* G=64: samples 0..3 must match */
        {{.no_share_prefix = 1}, 0, 4, 0}, /* private prompt copies instead of forks */
        {{.prefill_chunk = 3, .max_step_tokens = 3}, 1, 4, 0}, /* chunked prefill, mixed */
        {{.sample_threads = 3}, 1, 64, 0},                     /* draws on 3 threads */
        {{.kv_budget_pages = 30}, 1, 4, 0}, /* small budget (needs: A 18, B 17, C 13 pages) */
        /* the draws made where the logits are, as on a GPU: the same completions */
        {{.max_batch_seqs = 0}, 1, 4, 1},
        {{.max_batch_seqs = 3}, 0, 64, 1},
        {{.no_share_prefix = 1}, 1, 4, 1},
        {{.prefill_chunk = 3, .max_step_tokens = 3}, 1, 4, 1},
        {{.kv_budget_pages = 30}, 0, 4, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        rig_open_ex(&g, 4096, &cases[c].o, cases[c].draws);
        grpo_rollout_request b = req(prompt_b, 8, 5, "B"), cc = req(prompt_c, 3, 3, "C");
        grpo_rollout_request a = req(prompt_a, 7, cases[c].G, "A");
        uint64_t ida;
        memset(res, 0, sizeof res);
        if (cases[c].order == 0)
            assert_int_equal(grpo_rollout_submit(g.r, &a, &ida), GRPO_OK);
        assert_int_equal(grpo_rollout_submit(g.r, &b, NULL), GRPO_OK);
        assert_int_equal(grpo_rollout_submit(g.r, &cc, NULL), GRPO_OK);
        if (cases[c].order == 1)
            assert_int_equal(grpo_rollout_submit(g.r, &a, &ida), GRPO_OK);
        assert_int_equal(run_all(&g, res, 8), 3);
        for (int i = 0; i < 4; i++)
            assert_same_sample(&ref[0]->samples[i], &res[ida]->samples[i]);
        long tokens = 0; /* every token of the three groups drawn by the backend, once */
        for (int k = 0; k < 8; k++)
            for (int32_t i = 0; res[k] != NULL && i < res[k]->n_samples; i++)
                tokens += res[k]->samples[i].n_tokens;
        assert_int_equal(grpo_engine__fake_drawn(g.fake), cases[c].draws ? tokens : 0);
        grpo_rollout_stats st;
        grpo_rollout_get_stats(g.r, &st);
        if (cases[c].o.max_batch_seqs > 0)
            assert_true(grpo_engine__fake_max_rows(g.fake) <= cases[c].o.max_batch_seqs + 3);
        if (cases[c].o.kv_budget_pages == 0 && cases[c].o.max_step_tokens == 0)
            assert_int_equal(st.peak_groups_in_flight, 3);
        if (cases[c].o.kv_budget_pages > 0) {
            assert_true(st.peak_pages_used <= 30);
            assert_true(st.peak_groups_in_flight < 3);
        }
        for (int i = 0; i < 8; i++)
            grpo_rollout_group_free(res[i]);
        rig_close(&g);
    }
    grpo_rollout_group_free(ref[0]);
}

/* A budget for exactly one group at a time; the fake pool is no larger than the budget, so a
 * reservation that undercounts makes the fake fail with EFULL. */
static void
test_budget(void **state)
{
    (void)state;
    /* one group of A with G=4, 12 new tokens, page 4: shared ceil(7/4)=2, per sample
     * ceil(19/4) - 7/4 = 5 - 1 = 4: 18 pages */
    for (int share = 0; share < 2; share++) {
        grpo_rollout_opts o = {.no_share_prefix = !share};
        size_t pages = share ? 18 : 20; /* private: 4 x ceil(19/4) */
        rig g;
        assert_int_equal(grpo_engine__fake_create(&g.fake, VOCAB, 4, pages, 17), GRPO_OK);
        grpo_engine__fake_backend(g.fake, &g.be);
        o.token_bytes = tok_bytes;
        assert_int_equal(grpo_rollout_create(&g.r, &g.be, &o), GRPO_OK);
        grpo_rollout_group *res[4] = {0};
        for (int k = 0; k < 4; k++) {
            char id[8];
            snprintf(id, sizeof id, "p%d", k);
            grpo_rollout_request a = req(prompt_a, 7, 4, id);
            a.params.eos_id = -1; /* every sample runs to the limit: the worst case */
            assert_int_equal(grpo_rollout_submit(g.r, &a, NULL), GRPO_OK);
        }
        grpo_rollout_request big = req(prompt_a, 7, 5, "big");
        assert_int_equal(grpo_rollout_submit(g.r, &big, NULL), GRPO_EFULL);
        assert_int_equal(run_all(&g, res, 4), 4);
        grpo_rollout_stats st;
        grpo_rollout_get_stats(g.r, &st);
        assert_int_equal(st.peak_groups_in_flight, 1);
        assert_true(st.peak_pages_used <= pages);
        assert_int_equal(st.pages_reserved, 0);
        for (int k = 0; k < 4; k++) {
            for (int i = 0; i < 4; i++) {
                assert_int_equal(res[k]->samples[i].n_tokens, 12);
                assert_int_equal(res[k]->samples[i].finish, GRPO_FINISH_LENGTH);
            }
            grpo_rollout_group_free(res[k]);
        }
        rig_close(&g);
    }
}

/* Stop strings spanning tokens: the finish is at the first token whose text completes one of
 * them, found independently here with strstr on the growing text of an unstopped run. */
static void
test_stop_strings(void **state)
{
    (void)state;
    rig g;
    rig_open(&g, 4096, NULL);
    grpo_rollout_request q = req(prompt_b, 8, 16, "S");
    q.params.eos_id = -1;
    q.params.max_new_tokens = 30;
    grpo_rollout_group *free_run[1] = {0}, *stopped[1] = {0};
    assert_int_equal(grpo_rollout_submit(g.r, &q, NULL), GRPO_OK);
    assert_int_equal(run_all(&g, free_run, 1), 1);
    rig_close(&g);
    /* pick stop strings from sample 0's text that straddle a token boundary ("xY|zW" -> "Yz") */
    const grpo_rollout_sample *s0 = &free_run[0]->samples[0];
    char st1[4] = {s0->text[5], s0->text[6], s0->text[7], 0}; /* spans tokens 2 and 3 */
    const char *stops[2] = {st1, "zzzz"};
    rig_open(&g, 4096, NULL);
    q.params.n_stop_strings = 2;
    q.params.stop_strings[0] = stops[0];
    q.params.stop_strings[1] = stops[1];
    assert_int_equal(grpo_rollout_submit(g.r, &q, NULL), GRPO_OK);
    assert_int_equal(run_all(&g, stopped, 1), 1);
    int n_stopped = 0;
    for (int i = 0; i < 16; i++) {
        const grpo_rollout_sample *f = &free_run[0]->samples[i], *s = &stopped[0]->samples[i];
        const char *hit = strstr(f->text, st1); /* tokens are 2 bytes: token k covers 2k, 2k+1 */
        if (hit == NULL) {
            assert_int_equal(s->finish, GRPO_FINISH_LENGTH);
            assert_int_equal(s->n_tokens, 30);
            continue;
        }
        size_t end = (size_t)(hit - f->text) + strlen(st1);
        int32_t expect_tokens = (int32_t)((end + 1) / 2);
        assert_int_equal(s->finish, GRPO_FINISH_STOP);
        assert_int_equal(s->stop_string, 0);
        assert_int_equal(s->n_tokens, expect_tokens);
        assert_int_equal(s->text_len, end); /* text ends right after the stop string */
        assert_memory_equal(s->text, f->text, end);
        assert_memory_equal(s->tokens, f->tokens, (size_t)expect_tokens * sizeof(int32_t));
        n_stopped++;
    }
    assert_true(n_stopped >= 1);
    grpo_rollout_group_free(free_run[0]);
    grpo_rollout_group_free(stopped[0]);
    rig_close(&g);
}

static void
test_stop_find(void **state)
{
    (void)state;
    const char *stops[3] = {"</answer>", "ab", "b"};
    size_t end;
    const char *t = "xx</ans";
    assert_int_equal(grpo_engine__stop_find(t, strlen(t), 0, stops, 1, &end), -1);
    t = "xx</answer>yy";
    assert_int_equal(grpo_engine__stop_find(t, strlen(t), 7, stops, 1, &end), 0);
    assert_int_equal(end, 11);
    /* already-checked text is not searched again: a match must end after new_from */
    assert_int_equal(grpo_engine__stop_find(t, strlen(t), 11, stops, 1, &end), -1);
    /* earliest end wins; on a tie the lower index */
    t = "zab";
    assert_int_equal(grpo_engine__stop_find(t, 3, 0, stops, 3, &end), 1);
    assert_int_equal(end, 3);
}

/* Reference scoring and policy rescoring against an independent computation. */
static void
test_scoring(void **state)
{
    (void)state;
    grpo_engine__fake *ref_fake, *pol2_fake, *check;
    grpo_rollout_backend ref_be, pol2_be, check_be;
    assert_int_equal(grpo_engine__fake_create(&ref_fake, VOCAB, 4, 256, 99), GRPO_OK);
    assert_int_equal(grpo_engine__fake_create(&pol2_fake, VOCAB, 4, 256, 17), GRPO_OK);
    grpo_engine__fake_backend(ref_fake, &ref_be);
    grpo_engine__fake_backend(pol2_fake, &pol2_be);
    grpo_rollout_opts o = {.ref = &ref_be, .rescore = &pol2_be};
    rig g;
    rig_open(&g, 4096, &o);
    grpo_rollout_request q = req(prompt_a, 7, 4, "R");
    q.params.sampling.temperature = 0.7f;
    grpo_rollout_group *res[1] = {0};
    assert_int_equal(grpo_rollout_submit(g.r, &q, NULL), GRPO_OK);
    assert_int_equal(run_all(&g, res, 1), 1);
    /* policy recomputed by teacher forcing agrees with the sampler's raw logprobs */
    assert_true(res[0]->max_abs_logprob_diff < 1e-5);
    /* ref logprobs: full teacher-forced pass over prompt+completion, log-softmax by hand */
    assert_int_equal(grpo_engine__fake_create(&check, VOCAB, 4, 256, 99), GRPO_OK);
    grpo_engine__fake_backend(check, &check_be);
    for (int i = 0; i < 4; i++) {
        const grpo_rollout_sample *s = &res[0]->samples[i];
        int32_t all[64], seq;
        memcpy(all, prompt_a, sizeof prompt_a);
        memcpy(all + 7, s->tokens, (size_t)s->n_tokens * sizeof(int32_t));
        int32_t n = 7 + s->n_tokens;
        float *lg = malloc((size_t)n * VOCAB * sizeof *lg);
        assert_int_equal(check_be.seq_new(check_be.ctx, &seq), GRPO_OK);
        grpo_fwd_item it = {seq, 0, n, all};
        assert_int_equal(check_be.forward_all(check_be.ctx, &it, 1, lg), GRPO_OK);
        for (int j = 0; j < s->n_tokens; j++) {
            const float *row = lg + (size_t)(6 + j) * VOCAB;
            double z = 0;
            for (int v = 0; v < VOCAB; v++)
                z += exp(row[v] / 0.7);
            double want = row[s->tokens[j]] / 0.7 - log(z);
            assert_true(fabs(want - s->ref_logprob[j]) < 1e-5);
        }
        check_be.seq_free(check_be.ctx, seq);
        free(lg);
    }
    assert_int_equal(ref_be.pages_used(ref_be.ctx), 0);
    assert_int_equal(pol2_be.pages_used(pol2_be.ctx), 0);
    grpo_rollout_group_free(res[0]);
    rig_close(&g);
    grpo_engine__fake_destroy(check);
    grpo_engine__fake_destroy(ref_fake);
    grpo_engine__fake_destroy(pol2_fake);
}

typedef struct {
    grpo_rollout *r;
    int got;
} consumer_arg;

static void *
consumer(void *p)
{
    consumer_arg *a = p;
    grpo_rollout_group *g;
    while ((g = grpo_rollout_pop(a->r, 1)) != NULL) {
        a->got++;
        grpo_rollout_group_free(g);
    }
    return NULL;
}

/* Groups leave through the queue while decoding continues; pop(wait) ends after close. */
static void
test_queue_and_cancel(void **state)
{
    (void)state;
    rig g;
    rig_open(&g, 4096, NULL);
    consumer_arg a = {g.r, 0};
    pthread_t th;
    pthread_create(&th, NULL, consumer, &a);
    for (int k = 0; k < 10; k++) {
        char id[8];
        snprintf(id, sizeof id, "q%d", k);
        grpo_rollout_request q = req(prompt_c, 3, 2 + k % 3, id);
        q.params.max_new_tokens = 3 + 4 * k;
        assert_int_equal(grpo_rollout_submit(g.r, &q, NULL), GRPO_OK);
    }
    assert_int_equal(grpo_rollout_run(g.r), GRPO_OK);
    grpo_rollout_close(g.r);
    pthread_join(th, NULL);
    assert_int_equal(a.got, 10);
    rig_close(&g);

    /* cancel: running samples end aborted, queued groups come out with aborted empty samples */
    rig_open(&g, 40, NULL);
    for (int k = 0; k < 4; k++) {
        char id[8];
        snprintf(id, sizeof id, "c%d", k);
        grpo_rollout_request q = req(prompt_b, 8, 2, id);
        q.params.eos_id = -1;
        q.params.max_new_tokens = 40;
        assert_int_equal(grpo_rollout_submit(g.r, &q, NULL), GRPO_OK);
    }
    for (int i = 0; i < 3; i++)
        assert_int_equal(grpo_rollout_step(g.r, NULL), GRPO_OK);
    grpo_rollout_cancel(g.r);
    grpo_rollout_group *res[4] = {0};
    assert_int_equal(run_all(&g, res, 4), 4);
    for (int k = 0; k < 4; k++) {
        for (int i = 0; i < 2; i++) {
            assert_int_equal(res[k]->samples[i].finish, GRPO_FINISH_ABORT);
            assert_true(res[k]->samples[i].n_tokens < 40);
        }
        grpo_rollout_group_free(res[k]);
    }
    rig_close(&g);
}

static void
test_bad_requests(void **state)
{
    (void)state;
    rig g;
    rig_open(&g, 64, NULL);
    grpo_rollout_request q = req(prompt_a, 7, 2, "x");
    q.n_prompt = 0;
    assert_int_equal(grpo_rollout_submit(g.r, &q, NULL), GRPO_EINVAL);
    q = req(prompt_a, 7, 2, "x");
    q.params.sampling.top_p = 0.0f;
    assert_int_equal(grpo_rollout_submit(g.r, &q, NULL), GRPO_EINVAL);
    int32_t bad[2] = {3, VOCAB};
    q = req(bad, 2, 2, "x");
    assert_int_equal(grpo_rollout_submit(g.r, &q, NULL), GRPO_EINVAL);
    /* greedy with max_new_tokens 1: one token, finish length, processed logprob 0 */
    q = req(prompt_a, 7, 3, "g");
    q.params.sampling.temperature = 0.0f;
    q.params.max_new_tokens = 1;
    q.params.eos_id = -1;
    grpo_rollout_group *res[1] = {0};
    assert_int_equal(grpo_rollout_submit(g.r, &q, NULL), GRPO_OK);
    assert_int_equal(run_all(&g, res, 1), 1);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(res[0]->samples[i].n_tokens, 1);
        assert_int_equal(res[0]->samples[i].tokens[0], res[0]->samples[0].tokens[0]);
        assert_int_equal(res[0]->samples[i].finish, GRPO_FINISH_LENGTH);
        assert_true(res[0]->samples[i].logprob_processed[0] == 0.0f);
    }
    grpo_rollout_group_free(res[0]);
    rig_close(&g);
}

/* New weights between groups: pause admission, drain, set_policy, resume. Groups admitted before
 * come from the first model, after from the second, each equal to a run on that model alone. */
static void
test_policy_swap(void **state)
{
    (void)state;
    grpo_rollout_group *alone1[1] = {0}, *alone2[1] = {0}, *res[3] = {0};
    rig g;
    rig_open(&g, 4096, NULL);
    grpo_rollout_request q0 = req(prompt_a, 7, 3, "g0");
    assert_int_equal(grpo_rollout_submit(g.r, &q0, NULL), GRPO_OK);
    assert_int_equal(run_all(&g, alone1, 1), 1);
    rig_close(&g);
    rig g2;
    assert_int_equal(grpo_engine__fake_create(&g2.fake, VOCAB, 4, 4096, 23), GRPO_OK);
    grpo_engine__fake_backend(g2.fake, &g2.be);
    grpo_rollout_opts o = {0};
    o.token_bytes = tok_bytes;
    assert_int_equal(grpo_rollout_create(&g2.r, &g2.be, &o), GRPO_OK);
    grpo_rollout_request q2 = req(prompt_c, 3, 2, "g2");
    assert_int_equal(grpo_rollout_submit(g2.r, &q2, NULL), GRPO_OK);
    assert_int_equal(run_all(&g2, alone2, 1), 1);
    rig_close(&g2);

    /* budget for one group at a time: g0 (18 pages) runs first */
    grpo_rollout_opts ob = {.kv_budget_pages = 20};
    rig_open(&g, 4096, &ob);
    assert_int_equal(grpo_engine__fake_create(&g2.fake, VOCAB, 4, 4096, 23), GRPO_OK);
    grpo_engine__fake_backend(g2.fake, &g2.be);
    grpo_rollout_request q1 = req(prompt_b, 8, 2, "g1");
    assert_int_equal(grpo_rollout_submit(g.r, &q0, NULL), GRPO_OK);
    assert_int_equal(grpo_rollout_submit(g.r, &q1, NULL), GRPO_OK);
    assert_int_equal(grpo_rollout_submit(g.r, &q2, NULL), GRPO_OK);
    assert_int_equal(grpo_rollout_step(g.r, NULL), GRPO_OK); /* g0 admitted and prefilled */
    grpo_rollout_pause(g.r, 1);
    assert_int_equal(grpo_rollout_set_policy(g.r, &g2.be, 1), GRPO_ESTATE); /* g0 in flight */
    grpo_rollout_stats st;
    do {
        assert_int_equal(grpo_rollout_step(g.r, NULL), GRPO_OK);
        grpo_rollout_get_stats(g.r, &st);
    } while (st.groups_in_flight > 0);
    assert_int_equal(st.groups_done, 1); /* paused: g1 was not admitted */
    assert_int_equal(g.be.pages_used(g.be.ctx), 0);
    assert_int_equal(grpo_rollout_set_policy(g.r, &g2.be, 1), GRPO_OK);
    grpo_rollout_pause(g.r, 0);
    assert_int_equal(run_all(&g, res, 3), 3);
    assert_int_equal(res[0]->policy_version, 0);
    assert_int_equal(res[1]->policy_version, 1);
    assert_int_equal(res[2]->policy_version, 1);
    for (int i = 0; i < 3; i++)
        assert_same_sample(&alone1[0]->samples[i], &res[0]->samples[i]);
    for (int i = 0; i < 2; i++)
        assert_same_sample(&alone2[0]->samples[i], &res[2]->samples[i]);
    assert_int_equal(g2.be.pages_used(g2.be.ctx), 0);
    for (int i = 0; i < 3; i++)
        grpo_rollout_group_free(res[i]);
    grpo_rollout_group_free(alone1[0]);
    grpo_rollout_group_free(alone2[0]);
    grpo_rollout_destroy(g.r);
    grpo_engine__fake_destroy(g.fake);
    grpo_engine__fake_destroy(g2.fake);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_invariance),   cmocka_unit_test(test_budget),
        cmocka_unit_test(test_stop_strings), cmocka_unit_test(test_stop_find),
        cmocka_unit_test(test_scoring),      cmocka_unit_test(test_queue_and_cancel),
        cmocka_unit_test(test_bad_requests), cmocka_unit_test(test_policy_swap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
