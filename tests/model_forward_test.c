/* The forward against transformers' logits (tests/data/tiny_models, made by
 * tools/make_tiny_models.py), and against itself: decode through the absorbed path and the paged
 * cache vs one prefill, forked sequences vs private copies, batch composition and thread count. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/model_testutil.h"

#define TOL 1e-4 /* relative error bar for fp32 activations */

typedef struct {
    grpo_model *m;
    tm_expected e;
    char dir[1024];
} fx;

static int
setup(void **state, const char *name, int threads)
{
    fx *f = calloc(1, sizeof *f);
    tm_dir(name, f->dir, sizeof f->dir);
    grpo_model_opts o = {threads, 0, 1};
    if (grpo_model_load(&f->m, f->dir, &o) != GRPO_OK) {
        fprintf(stderr, "load: %s\n", grpo_error_last());
        free(f);
        return -1;
    }
    if (tm_expected_load(f->dir, &f->e) != 0) {
        fprintf(stderr, "cannot read the expected outputs in %s\n", f->dir);
        grpo_model_destroy(f->m);
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int setup_bf16(void **s) { return setup(s, "bf16", 2); }
static int setup_fp8(void **s) { return setup(s, "fp8", 2); }

static int
teardown(void **state)
{
    fx *f = *state;
    grpo_model_destroy(f->m);
    tm_expected_free(&f->e);
    free(f);
    return 0;
}

static grpo_kv *
new_kv(grpo_model *m)
{
    grpo_kv *kv = NULL;
    assert_int_equal(grpo_kv_create(&kv, grpo_model_get_config(m), 8u << 20), GRPO_OK);
    return kv;
}

/* One prefill of the whole sequence: every position's logits within TOL of transformers. */
static void
prefill_matches_transformers(void **state)
{
    fx *f = *state;
    grpo_kv *kv = new_kv(f->m);
    int32_t seq;
    assert_int_equal(grpo_kv_seq_new(kv, &seq), GRPO_OK);
    int n = f->e.n, V = f->e.vocab;
    float *lg = malloc((size_t)n * V * sizeof *lg);
    grpo_fwd_item it = {seq, 0, n, f->e.tokens};
    assert_int_equal(grpo_model_forward_all(f->m, kv, &it, 1, lg), GRPO_OK);
    double worst = 0;
    for (int t = 0; t < n; t++) {
        double r = tm_rel_err(lg + (size_t)t * V, f->e.logits + (size_t)t * V, (size_t)V);
        worst = r > worst ? r : worst;
    }
    printf("    %s: prefill of %d tokens, worst relative error %.3g\n", f->dir, n, worst);
    assert_true(worst <= TOL);
    assert_int_equal(grpo_kv_seq_len(kv, seq), n);
    /* the last-token form returns the same row bit for bit */
    int32_t s2;
    assert_int_equal(grpo_kv_seq_new(kv, &s2), GRPO_OK);
    float *last = malloc((size_t)V * sizeof *last);
    grpo_fwd_item it2 = {s2, 0, n, f->e.tokens};
    assert_int_equal(grpo_model_forward(f->m, kv, &it2, 1, last), GRPO_OK);
    assert_memory_equal(last, lg + (size_t)(n - 1) * V, (size_t)V * sizeof *last);
    free(last);
    free(lg);
    grpo_kv_destroy(kv);
}

/* A short prefill, then one token at a time through the absorbed path: each step within TOL of
 * transformers' logits at that position. Also a two-chunk prefill. */
static void
decode_matches_prefill(void **state)
{
    fx *f = *state;
    grpo_kv *kv = new_kv(f->m);
    int n = f->e.n, V = f->e.vocab, p0 = 5;
    float *lg = malloc((size_t)V * sizeof *lg);
    int32_t seq;
    assert_int_equal(grpo_kv_seq_new(kv, &seq), GRPO_OK);
    grpo_fwd_item it = {seq, 0, p0, f->e.tokens};
    assert_int_equal(grpo_model_forward(f->m, kv, &it, 1, lg), GRPO_OK);
    double worst = tm_rel_err(lg, f->e.logits + (size_t)(p0 - 1) * V, (size_t)V);
    for (int t = p0; t < n; t++) {
        grpo_fwd_item d = {seq, t, 1, f->e.tokens + t};
        assert_int_equal(grpo_model_forward(f->m, kv, &d, 1, lg), GRPO_OK);
        double r = tm_rel_err(lg, f->e.logits + (size_t)t * V, (size_t)V);
        worst = r > worst ? r : worst;
    }
    printf("    %s: decode of %d tokens, worst relative error %.3g\n", f->dir, n - p0, worst);
    assert_true(worst <= TOL);
    /* prefill in two chunks crossing a page boundary */
    int32_t s2;
    assert_int_equal(grpo_kv_seq_new(kv, &s2), GRPO_OK);
    float *all = malloc((size_t)n * V * sizeof *all);
    grpo_fwd_item c1 = {s2, 0, 50, f->e.tokens}, c2 = {s2, 50, n - 50, f->e.tokens + 50};
    assert_int_equal(grpo_model_forward_all(f->m, kv, &c1, 1, all), GRPO_OK);
    assert_int_equal(grpo_model_forward_all(f->m, kv, &c2, 1, all + (size_t)50 * V), GRPO_OK);
    assert_true(tm_rel_err(all, f->e.logits, (size_t)n * V) <= TOL);
    free(all);
    free(lg);
    grpo_kv_destroy(kv);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(prefill_matches_transformers, setup_bf16, teardown),
        cmocka_unit_test_setup_teardown(decode_matches_prefill, setup_bf16, teardown),
        cmocka_unit_test_setup_teardown(prefill_matches_transformers, setup_fp8, teardown),
        cmocka_unit_test_setup_teardown(decode_matches_prefill, setup_fp8, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
