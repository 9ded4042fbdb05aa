/* The MTP module's forward (grpo_model_mtp_forward) against the reference MTP logits of
 * tests/data/mtp (tools/make_mtp_fixture.py: DeepSeek's MTP definition in torch fp32 over the tiny
 * BF16 model's layer-3 weights): prefill, with distinct norm weights, incremental decode, decode vs
 * prefill, the main forward's hidden-state output, batch and thread invariance, BF16/FP8 caches,
 * refusals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kernels/kernels.h"
#include "rollout/model/model_int.h"
#include "tests/model_testutil.h"

#define TOL 1e-4 /* relative error bar (max abs diff / max abs value per row) */

typedef struct {
    grpo_model *m;
    tm_expected e;
    char dir[512];
    int n, H, V;   /* MTP positions (tokens - 1), hidden, vocab */
    float *hin;    /* (n, H) reference h_t (transformers, after model.norm) */
    float *logits; /* (n, V) reference MTP logits */
} fx;

static int
setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    char p[600], mdir[512];
    tm_dir("bf16", f->dir, sizeof f->dir);
    grpo_model_opts o = {2, 0, 1, 0, 0};
    if (grpo_model_load(&f->m, f->dir, &o) != GRPO_OK || tm_expected_load(f->dir, &f->e) != 0) {
        fprintf(stderr, "setup: %s\n", grpo_error_last());
        return -1;
    }
    tm_dir("bf16", mdir, sizeof mdir);
    snprintf(p, sizeof p, "%s/../../mtp/hidden.f32", mdir);
    f->n = f->e.n - 1;
    f->H = f->e.hidden;
    f->V = f->e.vocab;
    f->hin = tm_read_f32(p, (size_t)f->n * f->H);
    snprintf(p, sizeof p, "%s/../../mtp/logits.f32", mdir);
    f->logits = tm_read_f32(p, (size_t)f->n * f->V);
    if (f->hin == NULL || f->logits == NULL) {
        fprintf(stderr, "cannot read tests/data/mtp\n");
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
    tm_expected_free(&f->e);
    free(f->hin);
    free(f->logits);
    free(f);
    return 0;
}

static grpo_kv *
mtp_kv(grpo_model *m)
{
    grpo_kv *kv = NULL;
    assert_int_equal(grpo_kv_create_mtp(&kv, m, 4u << 20), GRPO_OK);
    return kv;
}

/* Worst row error of rows [r0, r0 + n) of got (n rows) against the reference. */
static double
worst_vs_ref(const fx *f, const float *got, int r0, int n)
{
    return tm_worst_rows(got, f->logits, f->V, r0, n);
}

/* One prefill of all positions, fed the reference's h_t: every row within TOL; the last-row form
 * gives the last row's bits. */
static void
prefill_matches_reference(void **state)
{
    fx *f = *state;
    grpo_kv *kv = mtp_kv(f->m);
    int32_t seq, s2;
    assert_int_equal(grpo_kv_seq_new(kv, &seq), GRPO_OK);
    float *lg = malloc((size_t)f->n * f->V * sizeof *lg), *last = malloc((size_t)f->V * 4);
    grpo_fwd_item it = {seq, 0, f->n, f->e.tokens + 1};
    assert_int_equal(grpo_model_mtp_forward(f->m, kv, &it, 1, f->hin, 1, lg), GRPO_OK);
    double w = worst_vs_ref(f, lg, 0, f->n);
    printf("    MTP prefill of %d positions vs reference: worst relative error %.3g\n", f->n, w);
    assert_true(w <= TOL);
    assert_int_equal(grpo_kv_seq_len(kv, seq), f->n);
    assert_int_equal(grpo_kv_seq_new(kv, &s2), GRPO_OK);
    grpo_fwd_item it2 = {s2, 0, f->n, f->e.tokens + 1};
    assert_int_equal(grpo_model_mtp_forward(f->m, kv, &it2, 1, f->hin, 0, last), GRPO_OK);
    assert_memory_equal(last, lg + (size_t)(f->n - 1) * f->V, (size_t)f->V * 4);
    free(lg);
    free(last);
    grpo_kv_destroy(kv);
}

/* The tiny checkpoint's MTP norms are all ones; with the distinct weights the fixture script used
 * for logits_norms.f32 written into the loaded model, a swap of enorm and hnorm, or a missing head
 * norm, shows. */
static void
distinct_norms_match_reference(void **state)
{
    fx *f = *state;
    int H = f->H, V = f->V;
    char p[600], mdir[512];
    tm_dir("bf16", mdir, sizeof mdir);
    snprintf(p, sizeof p, "%s/../../mtp/logits_norms.f32", mdir);
    float *want = tm_read_f32(p, (size_t)f->n * V);
    assert_non_null(want);
    grpo_mtp_w *t = f->m->mtp;
    for (int i = 0; i < H; i++) {
        t->enorm[i] = (float)(1 + 0.5 * sin(0.37 * i));
        t->hnorm[i] = (float)(1 + 0.5 * cos(0.23 * i));
        t->head_norm[i] = (float)(1 + 0.3 * sin(0.11 * i + 1));
    }
    grpo_kv *kv = mtp_kv(f->m);
    int32_t seq;
    grpo_kv_seq_new(kv, &seq);
    float *lg = malloc((size_t)f->n * V * 4);
    grpo_fwd_item it = {seq, 0, f->n, f->e.tokens + 1};
    assert_int_equal(grpo_model_mtp_forward(f->m, kv, &it, 1, f->hin, 1, lg), GRPO_OK);
    double w = 0, off = worst_vs_ref(f, lg, 0, f->n);
    for (int r = 0; r < f->n; r++) {
        double e = tm_rel_err(lg + (size_t)r * V, want + (size_t)r * V, (size_t)V);
        w = e > w ? e : w;
    }
    printf("    distinct norms: vs reference %.3g (the unit-norm logits are %.3g away)\n", w, off);
    assert_true(w <= TOL);
    assert_true(off > 100 * TOL);
    free(lg);
    free(want);
    grpo_kv_destroy(kv);
}

/* End to end: the main forward's hidden output (same logits bits as forward_all) fed to the MTP. */
static void
main_hidden_then_mtp(void **state)
{
    fx *f = *state;
    int T = f->e.n, H = f->H, V = f->V;
    grpo_kv *kv = NULL, *kv2 = NULL, *mk = mtp_kv(f->m);
    assert_int_equal(grpo_kv_create(&kv, grpo_model_get_config(f->m), 8u << 20), GRPO_OK);
    assert_int_equal(grpo_kv_create(&kv2, grpo_model_get_config(f->m), 8u << 20), GRPO_OK);
    int32_t a, b, c;
    grpo_kv_seq_new(kv, &a);
    grpo_kv_seq_new(kv2, &b);
    float *lg = malloc((size_t)T * V * 4), *lg2 = malloc((size_t)T * V * 4);
    float *hid = malloc((size_t)T * H * 4), *ml = malloc((size_t)f->n * V * 4);
    grpo_fwd_item it = {a, 0, T, f->e.tokens}, it2 = {b, 0, T, f->e.tokens};
    assert_int_equal(grpo_model_forward_hidden(f->m, kv, &it, 1, 1, lg, hid), GRPO_OK);
    assert_int_equal(grpo_model_forward_all(f->m, kv2, &it2, 1, lg2), GRPO_OK);
    assert_memory_equal(lg, lg2, (size_t)T * V * 4);
    double wh = 0;
    for (int t = 0; t < f->n; t++) {
        double r = tm_rel_err(hid + (size_t)t * H, f->hin + (size_t)t * H, (size_t)H);
        wh = r > wh ? r : wh;
    }
    grpo_kv_seq_new(mk, &c);
    grpo_fwd_item mi = {c, 0, f->n, f->e.tokens + 1};
    assert_int_equal(grpo_model_mtp_forward(f->m, mk, &mi, 1, hid, 1, ml), GRPO_OK);
    double w = worst_vs_ref(f, ml, 0, f->n);
    printf("    main hidden vs transformers %.3g; MTP on it vs reference %.3g\n", wh, w);
    assert_true(wh <= TOL && w <= TOL);
    free(lg);
    free(lg2);
    free(hid);
    free(ml);
    grpo_kv_destroy(kv);
    grpo_kv_destroy(kv2);
    grpo_kv_destroy(mk);
}

/* A 40-position chunk then single-position steps (the absorbed form, across the 64-row page):
 * each step within TOL of the reference and within 1e-5 of the prefill's row. */
static void
decode_matches_prefill(void **state)
{
    fx *f = *state;
    int V = f->V, H = f->H, P = 40;
    grpo_kv *kv = mtp_kv(f->m);
    int32_t s, p;
    grpo_kv_seq_new(kv, &s);
    grpo_kv_seq_new(kv, &p);
    float *all = malloc((size_t)f->n * V * 4), *row = malloc((size_t)V * 4);
    grpo_fwd_item pi = {p, 0, f->n, f->e.tokens + 1};
    assert_int_equal(grpo_model_mtp_forward(f->m, kv, &pi, 1, f->hin, 1, all), GRPO_OK);
    grpo_fwd_item ci = {s, 0, P, f->e.tokens + 1};
    assert_int_equal(grpo_model_mtp_forward(f->m, kv, &ci, 1, f->hin, 0, row), GRPO_OK);
    double wr = tm_rel_err(row, f->logits + (size_t)(P - 1) * V, (size_t)V), wp = 0;
    for (int t = P; t < f->n; t++) {
        grpo_fwd_item di = {s, t, 1, f->e.tokens + 1 + t};
        assert_int_equal(grpo_model_mtp_forward(f->m, kv, &di, 1, f->hin + (size_t)t * H, 0, row),
                         GRPO_OK);
        double r = tm_rel_err(row, f->logits + (size_t)t * V, (size_t)V);
        double q = tm_rel_err(row, all + (size_t)t * V, (size_t)V);
        wr = r > wr ? r : wr;
        wp = q > wp ? q : wp;
    }
    printf("    MTP decode %d..%d: vs reference %.3g, vs prefill %.3g\n", P, f->n - 1, wr, wp);
    assert_true(wr <= TOL);
    assert_true(wp <= 1e-5);
    assert_int_equal(grpo_kv_seq_len(kv, s), f->n);
    free(all);
    free(row);
    grpo_kv_destroy(kv);
}

/* Rows alone vs in mixed batches (chunks and single positions), on 1, 2 and 3 threads: same bits.
 */
static void
batch_and_threads_invariant(void **state)
{
    fx *f = *state;
    int V = f->V, H = f->H;
    const int32_t *tok = f->e.tokens + 1;
    const float *h = f->hin;
    assert_true(V <= 512);
    grpo_kernels_cpu_set_min_parallel(0);
    grpo_model *m1 = NULL, *m3 = NULL;
    grpo_model_opts o1 = {1, 0, 1, 0, 0}, o3 = {3, 0, 1, 0, 0};
    assert_int_equal(grpo_model_load(&m1, f->dir, &o1), GRPO_OK);
    assert_int_equal(grpo_model_load(&m3, f->dir, &o3), GRPO_OK);
    grpo_model *ms[3] = {f->m, m1, m3};
    /* a: positions 0..29 then 30; b: positions 40..59 of the sequence's tokens taken as its own
     * 0..19, then 20; c: 0..14 of tokens from 5 */
    static float solo[5][512], got[5][512];
    for (int mi = 0; mi < 3; mi++) {
        grpo_kv *kv = mtp_kv(ms[mi]);
        int32_t a, b, c;
        grpo_kv_seq_new(kv, &a);
        grpo_kv_seq_new(kv, &b);
        grpo_kv_seq_new(kv, &c);
        float(*dst)[512] = mi == 0 ? solo : got;
        grpo_fwd_item x[] = {{a, 0, 30, tok},
                             {a, 30, 1, tok + 30},
                             {b, 0, 20, tok + 40},
                             {b, 20, 1, tok + 60},
                             {c, 0, 15, tok + 5}};
        const float *hx[] = {h, h + 30 * H, h + 40 * H, h + 60 * H, h + 5 * H};
        for (int r = 0; r < 5; r++)
            assert_int_equal(grpo_model_mtp_forward(ms[mi], kv, &x[r], 1, hx[r], 0, dst[r]),
                             GRPO_OK);
        if (mi > 0)
            for (int r = 0; r < 5; r++)
                assert_memory_equal(solo[r], got[r], (size_t)V * 4);
        grpo_kv_destroy(kv);
    }
    /* mixed batches on the 2-thread model; hidden rows in item order */
    grpo_kv *kv = mtp_kv(f->m);
    int32_t a, b, c;
    grpo_kv_seq_new(kv, &a);
    grpo_kv_seq_new(kv, &b);
    grpo_kv_seq_new(kv, &c);
    float out[3 * 512], *hb = malloc((size_t)50 * H * 4);
    grpo_fwd_item first[2] = {{b, 0, 20, tok + 40}, {a, 0, 30, tok}};
    memcpy(hb, h + 40 * H, (size_t)20 * H * 4);
    memcpy(hb + 20 * H, h, (size_t)30 * H * 4);
    assert_int_equal(grpo_model_mtp_forward(f->m, kv, first, 2, hb, 0, out), GRPO_OK);
    assert_memory_equal(out, solo[2], (size_t)V * 4);
    assert_memory_equal(out + V, solo[0], (size_t)V * 4);
    grpo_fwd_item second[3] = {{a, 30, 1, tok + 30}, {c, 0, 15, tok + 5}, {b, 20, 1, tok + 60}};
    memcpy(hb, h + 30 * H, (size_t)H * 4);
    memcpy(hb + H, h + 5 * H, (size_t)15 * H * 4);
    memcpy(hb + 16 * H, h + 60 * H, (size_t)H * 4);
    assert_int_equal(grpo_model_mtp_forward(f->m, kv, second, 3, hb, 0, out), GRPO_OK);
    assert_memory_equal(out, solo[1], (size_t)V * 4);
    assert_memory_equal(out + V, solo[4], (size_t)V * 4);
    assert_memory_equal(out + 2 * V, solo[3], (size_t)V * 4);
    free(hb);
    grpo_kv_destroy(kv);
    grpo_model_destroy(m1);
    grpo_model_destroy(m3);
    grpo_kernels_cpu_set_min_parallel(262144);
}

/* BF16 and FP8 MTP caches (the model loaded with that kv dtype): the prefill stays near the
 * reference (bars about 4x the errors measured on 2026-12-02: bf16 2.5e-5, fp8 4.2e-4) and
 * single-position decode stays within 1e-4 of that prefill. */
#define BF16_BAR 1e-4
#define FP8_BAR 2e-3
static void
kv_dtypes_near_reference(void **state)
{
    fx *f = *state;
    int V = f->V, H = f->H, P = 50;
    const int dts[2] = {GRPO_KV_BF16, GRPO_KV_FP8};
    const double bars[2] = {BF16_BAR, FP8_BAR};
    for (int d = 0; d < 2; d++) {
        grpo_model *m = NULL;
        grpo_model_opts o = {2, 0, 1, 0, dts[d]};
        assert_int_equal(grpo_model_load(&m, f->dir, &o), GRPO_OK);
        grpo_kv *kv = mtp_kv(m);
        assert_int_equal(grpo_kv_get_dtype(kv), dts[d]);
        int32_t a, b;
        grpo_kv_seq_new(kv, &a);
        grpo_kv_seq_new(kv, &b);
        float *all = malloc((size_t)f->n * V * 4), *row = malloc((size_t)V * 4);
        grpo_fwd_item it = {a, 0, f->n, f->e.tokens + 1}, ci = {b, 0, P, f->e.tokens + 1};
        assert_int_equal(grpo_model_mtp_forward(m, kv, &it, 1, f->hin, 1, all), GRPO_OK);
        double w = worst_vs_ref(f, all, 0, f->n), wp = 0;
        assert_int_equal(grpo_model_mtp_forward(m, kv, &ci, 1, f->hin, 0, row), GRPO_OK);
        for (int t = P; t < f->n; t++) {
            grpo_fwd_item di = {b, t, 1, f->e.tokens + 1 + t};
            assert_int_equal(grpo_model_mtp_forward(m, kv, &di, 1, f->hin + (size_t)t * H, 0, row),
                             GRPO_OK);
            double q = tm_rel_err(row, all + (size_t)t * V, (size_t)V);
            wp = q > wp ? q : wp;
        }
        printf("    MTP with a %s cache: vs reference %.3g, decode vs prefill %.3g\n",
               grpo_kv_dtype_name(dts[d]), w, wp);
        assert_true(w <= bars[d]);
        assert_true(wp <= 1e-4);
        free(all);
        free(row);
        grpo_kv_destroy(kv);
        grpo_model_destroy(m);
    }
}

/* No MTP loaded, a main pool, a bad token, a wrong pos0: refused, the MTP cache untouched. */
static void
refuses_bad_inputs(void **state)
{
    fx *f = *state;
    grpo_model *plain = NULL;
    grpo_model_opts o = {1, 0, 0, 0, 0};
    assert_int_equal(grpo_model_load(&plain, f->dir, &o), GRPO_OK);
    assert_false(grpo_model_has_mtp(plain));
    grpo_kv *kv = NULL, *main_kv = NULL;
    assert_int_equal(grpo_kv_create_mtp(&kv, plain, 1u << 20), GRPO_EINVAL);
    assert_null(kv);
    kv = mtp_kv(f->m);
    assert_int_equal(grpo_kv_create(&main_kv, grpo_model_get_config(f->m), 4u << 20), GRPO_OK);
    int32_t s, ms;
    grpo_kv_seq_new(kv, &s);
    grpo_kv_seq_new(main_kv, &ms);
    float *lg = malloc((size_t)f->V * 4);
    int32_t bad[2] = {3, f->V};
    grpo_fwd_item ok = {s, 0, 2, f->e.tokens + 1}, wrong_tok = {s, 0, 2, bad};
    grpo_fwd_item wrong_pos = {s, 1, 1, f->e.tokens + 1}, on_main = {ms, 0, 2, f->e.tokens + 1};
    assert_int_equal(grpo_model_mtp_forward(plain, kv, &ok, 1, f->hin, 0, lg), GRPO_EINVAL);
    assert_int_equal(grpo_model_mtp_forward(f->m, main_kv, &on_main, 1, f->hin, 0, lg),
                     GRPO_EINVAL);
    assert_int_equal(grpo_model_mtp_forward(f->m, kv, &wrong_tok, 1, f->hin, 0, lg), GRPO_EINVAL);
    assert_int_equal(grpo_model_mtp_forward(f->m, kv, &wrong_pos, 1, f->hin, 0, lg), GRPO_EINVAL);
    assert_int_equal(grpo_model_mtp_forward(f->m, kv, &ok, 1, NULL, 0, lg), GRPO_EINVAL);
    assert_int_equal(grpo_kv_seq_len(kv, s), 0);
    assert_int_equal(grpo_kv_pages_used(kv), 0);
    free(lg);
    grpo_kv_destroy(kv);
    grpo_kv_destroy(main_kv);
    grpo_model_destroy(plain);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(prefill_matches_reference, setup, teardown),
        cmocka_unit_test_setup_teardown(distinct_norms_match_reference, setup, teardown),
        cmocka_unit_test_setup_teardown(main_hidden_then_mtp, setup, teardown),
        cmocka_unit_test_setup_teardown(decode_matches_prefill, setup, teardown),
        cmocka_unit_test_setup_teardown(batch_and_threads_invariant, setup, teardown),
        cmocka_unit_test_setup_teardown(kv_dtypes_near_reference, setup, teardown),
        cmocka_unit_test_setup_teardown(refuses_bad_inputs, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
