/* The demo policy's trained MTP layer (models/demo, layer 4; tools/demo_model/train_mtp.py) in the
 * engine: loaded with load_mtp, its logits over one held-out prompt's greedy sequence match the
 * torch reference (tools/mtp_reference.py, fixture tests/data/demo_mtp/ by
 * tools/demo_model/mtp_acceptance.py --fixture), fed the reference h_t and the engine's own, in
 * one prefill and step by step; the main model's logits and hidden states keep their bits with and
 * without load_mtp; and the drafts agree with the greedy tokens they predict. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/model_testutil.h"

/* Relative error bar (max abs diff / max abs value per row): 1.3e-6 measured, fed transformers'
 * h_t or the engine's own. */
#define TOL 2e-5

typedef struct {
    grpo_model *m; /* models/demo with its MTP layer */
    int32_t *tok;  /* (n + 1) token ids: prompt, greedy completion */
    int n, plen;   /* MTP positions (tokens - 1), prompt length */
    int H, V;      /* hidden, vocab */
    float *hin;    /* (n, H) reference h_t (transformers, after model.norm) */
    float *logits; /* (n, V) reference MTP logits */
} fx;

static char g_dir[4096], g_fix[4096];

static int
fixture_read(fx *f)
{
    char p[4200];
    cJSON *j = NULL;
    snprintf(p, sizeof p, "%s/mtp.json", g_fix);
    if (grpo__json_parse_file(p, 1 << 20, &j) != GRPO_OK)
        return -1;
    const cJSON *t = cJSON_GetObjectItem(j, "tokens");
    f->n = cJSON_GetArraySize(t) - 1;
    f->plen = cJSON_GetObjectItem(j, "prompt_len")->valueint;
    f->H = cJSON_GetObjectItem(j, "hidden")->valueint;
    f->V = cJSON_GetObjectItem(j, "vocab")->valueint;
    f->tok = malloc((size_t)(f->n + 1) * sizeof *f->tok);
    int i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, t) f->tok[i++] = (int32_t)x->valueint;
    cJSON_Delete(j);
    snprintf(p, sizeof p, "%s/hidden.f32", g_fix);
    f->hin = tm_read_f32(p, (size_t)f->n * f->H);
    snprintf(p, sizeof p, "%s/logits.f32", g_fix);
    f->logits = tm_read_f32(p, (size_t)f->n * f->V);
    return f->hin != NULL && f->logits != NULL && f->n > f->plen ? 0 : -1;
}

static int
setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    grpo_model_opts o = {.n_threads = 2, .load_mtp = 1};
    if (fixture_read(f) != 0) {
        fprintf(stderr, "setup: cannot read %s\n", g_fix);
        return -1;
    }
    if (grpo_model_load(&f->m, g_dir, &o) != GRPO_OK) {
        fprintf(stderr, "setup: %s\n", grpo_error_last());
        return -1;
    }
    *state = f;
    return 0;
}

static int
teardown(void **state)
{
    fx *f = *state;
    grpo_model_destroy(f->m);
    free(f->tok);
    free(f->hin);
    free(f->logits);
    free(f);
    return 0;
}

/* Worst row error of got (rows r0..r0+n-1 of the reference) against the reference. */
static double
worst_vs_ref(const fx *f, const float *got, int r0, int n)
{
    return tm_worst_rows(got, f->logits, f->V, r0, n);
}

/* The main model's prefill over positions 0..n-1: every row's logits and h_t. */
static void
main_prefill(grpo_model *m, const fx *f, float *logits, float *hidden)
{
    grpo_kv *kv = NULL;
    int32_t seq;
    assert_int_equal(grpo_kv_create(&kv, grpo_model_get_config(m), 16u << 20), GRPO_OK);
    assert_int_equal(grpo_kv_seq_new(kv, &seq), GRPO_OK);
    grpo_fwd_item it = {seq, 0, f->n, f->tok};
    assert_int_equal(grpo_model_forward_hidden(m, kv, &it, 1, 1, logits, hidden), GRPO_OK);
    grpo_kv_destroy(kv);
}

/* The config declares the layer; load_mtp finds it, and without load_mtp nothing of the main
 * model changes: the same logits and h_t bits; the engine's h_t is transformers' to TOL. */
static void
main_model_unchanged(void **state)
{
    fx *f = *state;
    grpo_model *plain = NULL;
    grpo_model_opts o = {.n_threads = 2};
    assert_int_equal(grpo_model_load(&plain, g_dir, &o), GRPO_OK);
    assert_int_equal(grpo_model_get_config(f->m)->num_nextn_predict_layers, 1);
    assert_true(grpo_model_has_mtp(f->m));
    assert_false(grpo_model_has_mtp(plain));
    size_t nl = (size_t)f->n * f->V, nh = (size_t)f->n * f->H;
    float *l0 = malloc(nl * 4), *l1 = malloc(nl * 4), *h0 = malloc(nh * 4), *h1 = malloc(nh * 4);
    main_prefill(plain, f, l0, h0);
    main_prefill(f->m, f, l1, h1);
    assert_memory_equal(l0, l1, nl * 4);
    assert_memory_equal(h0, h1, nh * 4);
    double w = 0;
    for (int t = 0; t < f->n; t++) {
        double e = tm_rel_err(h1 + (size_t)t * f->H, f->hin + (size_t)t * f->H, (size_t)f->H);
        w = e > w ? e : w;
    }
    printf("    main logits and h_t: same bits with and without load_mtp; h_t vs transformers "
           "%.3g\n",
           w);
    assert_true(w <= TOL);
    free(l0);
    free(l1);
    free(h0);
    free(h1);
    grpo_model_destroy(plain);
}

/* A cache for the MTP layer (16 MiB) with one sequence in it. */
static grpo_kv *
mtp_kv(grpo_model *m, int32_t *seq)
{
    grpo_kv *kv = NULL;
    assert_int_equal(grpo_kv_create_mtp(&kv, m, 16u << 20), GRPO_OK);
    assert_int_equal(grpo_kv_seq_new(kv, seq), GRPO_OK);
    return kv;
}

/* One MTP prefill over all positions fed the reference h_t, and again fed the engine's own. */
static void
prefill_matches_reference(void **state)
{
    fx *f = *state;
    int32_t s1, s2;
    grpo_kv *kv = mtp_kv(f->m, &s1);
    assert_int_equal(grpo_kv_seq_new(kv, &s2), GRPO_OK);
    size_t nl = (size_t)f->n * f->V;
    float *lg = malloc(nl * 4), *own = malloc(nl * 4), *h = malloc((size_t)f->n * f->H * 4);
    grpo_fwd_item it = {s1, 0, f->n, f->tok + 1};
    assert_int_equal(grpo_model_mtp_forward(f->m, kv, &it, 1, f->hin, 1, lg), GRPO_OK);
    main_prefill(f->m, f, own, h);
    grpo_fwd_item it2 = {s2, 0, f->n, f->tok + 1};
    assert_int_equal(grpo_model_mtp_forward(f->m, kv, &it2, 1, h, 1, own), GRPO_OK);
    double w = worst_vs_ref(f, lg, 0, f->n), wo = worst_vs_ref(f, own, 0, f->n);
    printf("    MTP prefill of %d positions vs reference: %.3g (fed the engine's h_t: %.3g)\n",
           f->n, w, wo);
    assert_true(w <= TOL);
    assert_true(wo <= TOL);
    free(lg);
    free(own);
    free(h);
    grpo_kv_destroy(kv);
}

/* The prompt in one MTP prefill, then the completion one position at a time, as a speculative
 * decoder drives it: each step's row within TOL. */
static void
decode_matches_reference(void **state)
{
    fx *f = *state;
    int32_t seq;
    grpo_kv *kv = mtp_kv(f->m, &seq);
    float *lg = malloc((size_t)f->V * 4);
    int p = f->plen;
    grpo_fwd_item it = {seq, 0, p, f->tok + 1};
    assert_int_equal(grpo_model_mtp_forward(f->m, kv, &it, 1, f->hin, 0, lg), GRPO_OK);
    double w = worst_vs_ref(f, lg, p - 1, 1);
    for (int t = p; t < f->n; t++) {
        grpo_fwd_item st = {seq, t, 1, f->tok + t + 1};
        assert_int_equal(grpo_model_mtp_forward(f->m, kv, &st, 1, f->hin + (size_t)t * f->H, 0, lg),
                         GRPO_OK);
        double e = worst_vs_ref(f, lg, t, 1);
        w = e > w ? e : w;
    }
    printf("    MTP decode of %d positions after a %d-position prefill: worst %.3g\n", f->n - p, p,
           w);
    assert_true(w <= TOL);
    free(lg);
    grpo_kv_destroy(kv);
}

static int
argmax(const float *v, int n)
{
    int a = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[a])
            a = i;
    return a;
}

/* The layer is trained: on the greedy completion, the engine's draft for token t+2 is the token
 * greedy decoding chose there at most positions (an untrained layer's drafts are not). */
static void
drafts_predict_greedy_tokens(void **state)
{
    fx *f = *state;
    int32_t seq;
    grpo_kv *kv = mtp_kv(f->m, &seq);
    float *lg = malloc((size_t)f->n * f->V * 4);
    grpo_fwd_item it = {seq, 0, f->n, f->tok + 1};
    assert_int_equal(grpo_model_mtp_forward(f->m, kv, &it, 1, f->hin, 1, lg), GRPO_OK);
    int hit = 0, tot = 0;
    for (int t = f->plen - 1; t + 2 <= f->n; t++, tot++)
        hit += argmax(lg + (size_t)t * f->V, f->V) == f->tok[t + 2];
    printf("    drafts equal to the greedy token t+2: %d of %d\n", hit, tot);
    assert_true(tot > 0 && 2 * hit > tot);
    free(lg);
    grpo_kv_destroy(kv);
}

int
main(void)
{
    const char *src = getenv("GRPO_SOURCE_DIR");
    if (src == NULL)
        src = "..";
    snprintf(g_dir, sizeof g_dir, "%s/models/demo", src);
    snprintf(g_fix, sizeof g_fix, "%s/tests/data/demo_mtp", src);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(main_model_unchanged),
        cmocka_unit_test(prefill_matches_reference),
        cmocka_unit_test(decode_matches_reference),
        cmocka_unit_test(drafts_predict_greedy_tokens),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
