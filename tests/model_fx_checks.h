/* Checks shared by the model tests over transformers fixtures (tm_fx): a fresh KV pool, one
 * forward, the prefill against transformers and greedy decoding against generate(). Include
 * after cmocka.h and tests/model_testutil.h, with TOL (relative error bar) and MAXV (largest
 * vocabulary) defined and fx = tm_fx. */
#ifndef GRPO_MODEL_FX_CHECKS_H
#define GRPO_MODEL_FX_CHECKS_H

static grpo_kv *
new_kv(grpo_model *m)
{
    grpo_kv *kv = NULL;
    assert_int_equal(grpo_kv_create(&kv, grpo_model_get_config(m), 8u << 20), GRPO_OK);
    return kv;
}

static void
fwd(grpo_model *m, grpo_kv *kv, int32_t seq, int pos0, int n, const int32_t *tok, float *out,
    int all)
{
    grpo_fwd_item it = {seq, pos0, n, tok};
    grpo_err err =
        all ? grpo_model_forward_all(m, kv, &it, 1, out) : grpo_model_forward(m, kv, &it, 1, out);
    if (err != GRPO_OK)
        fail_msg("forward: %s", grpo_error_last());
}

/* Every position of one prefill within TOL of transformers; the last-token form the same bits. */
static void
check_prefill(fx *f)
{
    grpo_kv *kv = new_kv(f->m);
    int n = f->e.n, V = f->e.vocab;
    float *lg = malloc((size_t)n * V * 4), last[MAXV];
    int32_t a, b;
    grpo_kv_seq_new(kv, &a);
    grpo_kv_seq_new(kv, &b);
    fwd(f->m, kv, a, 0, n, f->e.tokens, lg, 1);
    double r = tm_rel_err(lg, f->e.logits, (size_t)n * V);
    printf("    %s: prefill of %d tokens, relative error %.3g\n", f->dir, n, r);
    assert_true(r <= TOL);
    fwd(f->m, kv, b, 0, n, f->e.tokens, last, 0);
    assert_memory_equal(last, lg + (size_t)(n - 1) * V, (size_t)V * 4);
    free(lg);
    grpo_kv_destroy(kv);
}

static int
argmax(const float *v, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        b = v[i] > v[b] ? i : b;
    return b;
}

/* Greedy decoding from the fixture's prompt: transformers' tokens, and each step's logits within
 * TOL of those generate() computed through its own KV cache. */
static void
check_greedy(fx *f)
{
    grpo_kv *kv = new_kv(f->m);
    int V = f->e.vocab, pos = f->n_gprompt;
    float lg[MAXV];
    int32_t s, tok;
    grpo_kv_seq_new(kv, &s);
    fwd(f->m, kv, s, 0, f->n_gprompt, f->gprompt, lg, 0);
    double worst = 0;
    for (int i = 0; i < f->n_gtok; i++) {
        double r = tm_rel_err(lg, f->dec + (size_t)i * V, (size_t)V);
        worst = r > worst ? r : worst;
        tok = argmax(lg, V);
        if (tok != f->gtok[i])
            fail_msg("%s: greedy step %d: token %d, transformers %d", f->dir, i, tok, f->gtok[i]);
        if (i + 1 < f->n_gtok)
            fwd(f->m, kv, s, pos++, 1, &tok, lg, 0);
    }
    printf("    %s: %d greedy tokens equal, decode relative error %.3g\n", f->dir, f->n_gtok,
           worst);
    assert_true(worst <= TOL);
    grpo_kv_destroy(kv);
}

#endif
