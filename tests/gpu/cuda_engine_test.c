/* The rollout engine (the scheduler, shared-prefix groups, continuous batching) on the
 * device-resident model (backend = 2), the tiny BF16 and FP8 models: what `grpo rollout --gpu`
 * runs, without the store and verifiers (the GPU-only build has neither). Two groups of 8 with
 * prompts of 23 and 70 tokens (prefilled in chunks of 32), 12 new tokens each:
 *   - run twice: the same completions bit for bit (tokens, both logprobs);
 *   - group 0 alone: the same bits as beside group 1 (--deterministic: a sample's tokens never
 *     depend on its batch), padded graph buckets and all;
 *   - the draws made on the device (the sampler inside the decode step) against draws made on the
 *     host from the copied logits: the same tokens, logprobs within 1e-5.
 * For the exact policy over an F32 cache and for --numerics fp8 over a BF16 cache (the tensor-core
 * GEMMs and MLA). And greedy sequences of the device-resident model against the CPU backend's
 * (exact, F32/BF16/FP8 caches): the same tokens, or where they part a near-tie (the two chosen
 * tokens' logprobs within 1e-4), which fp32 summation order may break either way. Exit 77 without
 * a device. */
#include "tests/gpu/gpu_test.h"
#include "tests/model_testutil.h"
#include "grpo/rollout.h"
#include "rollout/model/model_int.h"

enum { NG = 2, G = 8, NEW = 12, GREEDY = 24 };

typedef struct {
    grpo_rollout_group *g[NG];
} run_out;

/* The groups of mask (bit i: group i) through the engine; host_draws: the engine samples the
 * copied logits itself (the backend's forward_sample removed); greedy: one sample per group,
 * temperature 0, GREEDY tokens. */
static void
rollout_ex(grpo_model *m, unsigned mask, int host_draws, int greedy, run_out *out)
{
    static int32_t prompt[NG][70];
    grpo_kv *kv = NULL;
    grpo_rollout_backend be;
    grpo_rollout *r = NULL;
    memset(out, 0, sizeof *out);
    GT_OK(grpo_kv_create_for(&kv, m, 32u << 20));
    GT_OK(grpo_rollout_backend_model(&be, m, kv));
    GT_CHECK(be.forward_sample != NULL || m->k->sample == NULL,
             "the device-resident model offers no forward_sample");
    if (host_draws)
        be.forward_sample = NULL;
    grpo_rollout_opts o;
    memset(&o, 0, sizeof o);
    o.prefill_chunk = 32;
    GT_OK(grpo_rollout_create(&r, &be, &o));
    int V = grpo_model_get_config(m)->vocab_size;
    for (int g = 0; g < NG; g++) {
        if (!(mask >> g & 1))
            continue;
        for (int i = 0; i < 70; i++)
            prompt[g][i] = 2 + (i * (37 + 16 * g) + 11) % (V - 2);
        grpo_rollout_request q;
        memset(&q, 0, sizeof q);
        q.prompt = prompt[g], q.n_prompt = g ? 70 : 23, q.group_size = G, q.seed = 5;
        q.prompt_key = grpo_rollout_prompt_key(g ? "b" : "a");
        grpo_gen_params_default(&q.params);
        q.params.sampling = (grpo_sampling){1.0f, 0.9f, g ? 40 : 0, 0.0f};
        q.params.max_new_tokens = NEW, q.params.eos_id = -1;
        if (greedy)
            q.group_size = 1, q.params.sampling.temperature = 0.0f, q.params.max_new_tokens = GREEDY;
        q.params.logprobs = GRPO_LOGPROBS_BOTH;
        uint64_t id;
        GT_OK(grpo_rollout_submit(r, &q, &id));
    }
    GT_OK(grpo_rollout_run(r));
    for (grpo_rollout_group *x; (x = grpo_rollout_pop(r, 0)) != NULL;) {
        out->g[x->id] = x; /* ids in submit order: group 0 first */
    }
    grpo_rollout_destroy(r);
    grpo_rollout_backend_fini(&be);
    grpo_kv_destroy(kv);
    GT_OK(grpo_model__backend_status(m));
}

static void
rollout(grpo_model *m, unsigned mask, int host_draws, run_out *out)
{
    rollout_ex(m, mask, host_draws, 0, out);
}

static void
run_free(run_out *o)
{
    for (int g = 0; g < NG; g++)
        grpo_rollout_group_free(o->g[g]);
}

/* Group g of a and b: tokens identical, logprobs bit-identical (tol 0) or within tol; the worst
 * logprob difference into *worst. */
static int
same_group(const run_out *a, const run_out *b, int g, double tol, double *worst)
{
    if (a->g[g] == NULL || b->g[g] == NULL)
        return 0;
    for (int i = 0; i < G; i++) {
        const grpo_rollout_sample *x = &a->g[g]->samples[i], *y = &b->g[g]->samples[i];
        if (x->n_tokens != NEW || y->n_tokens != NEW ||
            memcmp(x->tokens, y->tokens, NEW * sizeof(int32_t)) != 0)
            return 0;
        for (int t = 0; t < NEW; t++) {
            double d = fmax(fabs((double)x->logprob_raw[t] - y->logprob_raw[t]),
                            fabs((double)x->logprob_processed[t] - y->logprob_processed[t]));
            *worst = d > *worst || isnan(d) ? d : *worst;
        }
    }
    return *worst <= tol;
}

static void
check(const char *name, const char *dir, const char *what, grpo_model_opts o)
{
    grpo_model *m = NULL;
    GT_OK(grpo_model_load(&m, dir, &o));
    if (m == NULL)
        return;
    run_out a, a2, alone, host;
    rollout(m, 3, 0, &a);
    rollout(m, 3, 0, &a2);
    rollout(m, 1, 0, &alone);
    rollout(m, 3, 1, &host);
    double w_rep = 0, w_alone = 0, w_host = 0;
    int rep = same_group(&a, &a2, 0, 0, &w_rep) && same_group(&a, &a2, 1, 0, &w_rep);
    int inv = same_group(&a, &alone, 0, 0, &w_alone);
    int hd = same_group(&a, &host, 0, 1e-5, &w_host) && same_group(&a, &host, 1, 1e-5, &w_host);
    printf("  %s, %s: %d groups of %d x %d tokens, %ld graph replays: rerun %s; group alone vs "
           "beside another %s; device draws vs host draws: tokens %s, worst logprob difference "
           "%.3g\n",
           name, what, NG, G, NEW, m->graph_launches, rep ? "identical" : "DIFFERS",
           inv ? "identical" : "DIFFERS", hd ? "identical" : "DIFFER", w_host);
    GT_CHECK(rep, "%s %s: a rerun differs", name, what);
    GT_CHECK(inv, "%s %s: a group's completions depend on its batch", name, what);
    GT_CHECK(hd, "%s %s: device draws differ from host draws (%.3g)", name, what, w_host);
    run_free(&a), run_free(&a2), run_free(&alone), run_free(&host);
    grpo_model_destroy(m);
}

/* Greedy sequences of the device-resident model (exact) against the CPU backend's over a cache
 * of kv_dtype: the same tokens, or a near-tie where they part. */
static void
greedy_vs_cpu(const char *name, const char *dir, int kv_dtype)
{
    grpo_model *mc = NULL, *mg = NULL;
    grpo_model_opts oc = {.n_threads = 2, .kv_dtype = kv_dtype};
    grpo_model_opts og = {.n_threads = 1, .backend = 2, .kv_dtype = kv_dtype};
    GT_OK(grpo_model_load(&mc, dir, &oc));
    GT_OK(grpo_model_load(&mg, dir, &og));
    run_out c, d;
    rollout_ex(mc, 3, 0, 1, &c);
    rollout_ex(mg, 3, 0, 1, &d);
    int ok = 1, same = 0;
    for (int g = 0; g < NG; g++) {
        const grpo_rollout_sample *x = &c.g[g]->samples[0], *y = &d.g[g]->samples[0];
        int t = 0;
        while (t < x->n_tokens && t < y->n_tokens && x->tokens[t] == y->tokens[t])
            t++;
        same += t;
        if (t < GREEDY) {
            double gap = fabs((double)x->logprob_raw[t] - y->logprob_raw[t]);
            printf("  %s, kv %s: group %d parts at token %d of %d (%d vs %d, logprobs %.6f vs "
                   "%.6f)\n",
                   name, grpo_kv_dtype_name(kv_dtype), g, t, GREEDY, x->tokens[t], y->tokens[t],
                   x->logprob_raw[t], y->logprob_raw[t]);
            ok &= t < x->n_tokens && t < y->n_tokens && gap <= 1e-4;
        }
    }
    printf("  %s, kv %s: greedy sequences, device-resident vs the CPU backend: %d of %d tokens "
           "identical\n",
           name, grpo_kv_dtype_name(kv_dtype), same, NG * GREEDY);
    GT_CHECK(ok, "%s kv %s: greedy sequences differ from the CPU's beyond a near-tie", name,
             grpo_kv_dtype_name(kv_dtype));
    run_free(&c), run_free(&d);
    grpo_model_destroy(mc), grpo_model_destroy(mg);
}

int
main(void)
{
    gt_init("cuda_engine_test");
    const char *const models[2] = {"bf16", "fp8"};
    for (int i = 0; i < 2; i++) {
        char dir[512];
        tm_dir(models[i], dir, sizeof dir);
        grpo_model_opts exact = {.n_threads = 1, .backend = 2};
        grpo_model_opts fast = {.n_threads = 1, .backend = 2, .numerics = GRPO_NUMERICS_FP8,
                                .kv_dtype = GRPO_KV_BF16};
        check(models[i], dir, "exact, f32 cache", exact);
        check(models[i], dir, "--numerics fp8, bf16 cache", fast);
        for (int kv = GRPO_KV_F32; kv <= GRPO_KV_FP8; kv++)
            greedy_vs_cpu(models[i], dir, kv);
    }
    return gt_finish("cuda_engine_test");
}
