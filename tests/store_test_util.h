/* Helpers shared by the store tests: temporary directories and random groups that the tests also
 * keep in memory, so stored values can be checked against what was inserted. */
#ifndef STORE_TEST_UTIL_H
#define STORE_TEST_UTIL_H

#include "grpo/store.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Makes a fresh temporary directory (mkdtemp) and writes its path into dir. */
static inline void
tu_tmpdir(char *dir, size_t n)
{
    snprintf(dir, n, "/tmp/grpo_store_test_XXXXXX");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        abort();
    }
}

static inline void
tu_rmrf(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

/* xorshift64*: a small deterministic generator for test data. */
static inline uint64_t
tu_rand(uint64_t *s)
{
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

static inline double
tu_unif(uint64_t *s)
{
    return (double)(tu_rand(s) >> 11) / 9007199254740992.0;
}

/* A group record that owns its arrays. */
typedef struct {
    grpo_group_rec g;
    grpo_completion_rec *c;
    grpo_reward_rec *r; /* n_rewards per completion, contiguous */
    int32_t *tokens;
    float *logprobs;
    char *texts;
} tu_group;

/* Fills t with G completions of up to max_tok tokens, each with n_rew rewards from verifiers
 * "math" (score 0/1) and "format" (score 0/0.5). Rewards' kinds follow their scores. */
static inline void
tu_group_make(tu_group *t, uint64_t *rng, int64_t run, int64_t step, int64_t prompt, uint64_t seed,
              int32_t G, int32_t max_tok, int32_t n_rew)
{
    memset(t, 0, sizeof *t);
    t->c = calloc((size_t)G, sizeof *t->c);
    t->r = calloc((size_t)G * (size_t)(n_rew > 0 ? n_rew : 1), sizeof *t->r);
    t->tokens = calloc((size_t)G * (size_t)max_tok + 1, sizeof *t->tokens);
    t->logprobs = calloc((size_t)G * (size_t)max_tok + 1, sizeof *t->logprobs);
    t->texts = calloc((size_t)G, 32);
    grpo_group_rec *g = &t->g;
    g->run_id = run, g->step = step, g->prompt_id = prompt, g->seed = seed;
    g->policy_version = step / 2;
    g->sampling_json = "{\"temperature\":1.0,\"top_p\":1.0}";
    g->max_tokens = max_tok;
    g->started_at = 1.7e9 + (double)step * 10 + tu_unif(rng);
    g->finished_at = g->started_at + 1 + tu_unif(rng) * 4;
    g->prefill_ms = 3, g->gen_ms = 900, g->verify_ms = 40;
    g->n_completions = G;
    g->completions = t->c;
    for (int32_t i = 0; i < G; i++) {
        grpo_completion_rec *c = &t->c[i];
        c->sample_index = i;
        c->n_tokens = 1 + (int32_t)(tu_rand(rng) % (uint64_t)max_tok);
        c->token_ids = t->tokens + (size_t)i * max_tok;
        c->token_logprobs = t->logprobs + (size_t)i * max_tok;
        double lps = 0;
        for (int32_t k = 0; k < c->n_tokens; k++) {
            t->tokens[(size_t)i * max_tok + k] = (int32_t)(tu_rand(rng) % 129280);
            t->logprobs[(size_t)i * max_tok + k] = (float)(-3 * tu_unif(rng));
            lps += t->logprobs[(size_t)i * max_tok + k];
        }
        c->logprob_sum = lps;
        snprintf(t->texts + 32 * i, 32, "answer %d of %llu", (int)i, (unsigned long long)seed);
        c->text = t->texts + 32 * i;
        c->finish_reason = c->n_tokens == max_tok ? GRPO_FINISH_LENGTH : GRPO_FINISH_EOS;
        c->first_token_ms = 5 + tu_unif(rng);
        c->gen_ms = 100 + 10 * c->n_tokens;
        c->correct = -1;
        c->n_rewards = n_rew;
        c->rewards = t->r + (size_t)i * n_rew;
        for (int32_t j = 0; j < n_rew; j++) {
            grpo_reward_rec *r = &t->r[(size_t)i * n_rew + j];
            int pass = tu_rand(rng) % 3 == 0;
            r->verifier = j == 0 ? "math" : "format";
            r->version = "1.0.0";
            r->kind = pass ? 0 : 1;
            r->label = pass ? "correct" : "wrong";
            r->score = pass ? (j == 0 ? 1.0 : 0.5) : 0.0;
            r->details_json = j == 0 ? "{\"extracted\":\"42\"}" : NULL;
            r->ms = 0.5 + 20 * tu_unif(rng);
        }
        c->has_advantage = 1;
        c->advantage = tu_unif(rng) * 2 - 1;
        c->kl_mean = 0.01 * tu_unif(rng);
        c->kl_max = 0.1 + c->kl_mean;
        c->ref_logprob_sum = lps - 0.5;
    }
}

static inline void
tu_group_free(tu_group *t)
{
    free(t->c);
    free(t->r);
    free(t->tokens);
    free(t->logprobs);
    free(t->texts);
    memset(t, 0, sizeof *t);
}

#endif
