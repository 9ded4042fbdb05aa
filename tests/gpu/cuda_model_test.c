/* The tiny DeepSeek-V3 models (tests/data/tiny_models, transformers fixtures) run on the CUDA
 * kernels: the unchanged model forward with its op table swapped for the CUDA table in staged
 * mode. Checks, per model (BF16 and FP8):
 *   - prefill logits of every position against the CPU backend and against transformers (1e-4 of
 *     the largest logit, the CPU model test's bar), exact-GEMM policy;
 *   - decode (absorbed MLA, one token at a time) against the GPU prefill at the same positions;
 *   - the fast policy (cuBLASLt; FP8 activations at FP8 weights, BF16 at BF16 weights): its
 *     distance from the exact logits (median over positions of 1 - 2 sum xy / sum (x^2 + y^2))
 *     at most twice that of the CPU twin of its numerics (act_round);
 *   - the device-resident model (grpo_model_opts.backend = 2: weights, activations and the KV
 *     pool in device memory): prefill logits bit-identical to the staged table's (the same
 *     kernels; the memory entries have the host arithmetic), decode against its prefill, and two
 *     forks decoded in one batch equal to each decoded alone; with numerics fp8 (the
 *     deterministic fast policy: our tensor-core GEMMs), the fast policy's check, and a
 *     sequence's decode logits the same bits alone and batched with another; with BF16 and FP8
 *     latent caches, prefill and decode logits against the CPU backend with the same cache; decode
 *     steps replayed from CUDA graphs bit-identical to the same steps run op by op; draws made on
 *     the device (grpo_model__forward_sample: the sampler inside the recorded step, the logits
 *     never copied out) against the host sampler over the copied logits.
 * Then the GQA families (Qwen2 with tied embeddings, Qwen3 FP8, Qwen3-MoE, Llama 3) and
 * deepseek_v2 on the device-resident model against the CPU backend over each cache dtype, and
 * the dense GQA models' decode steps replayed from CUDA graphs against the same steps op by op.
 * Exit 77 without a device. */
#include "tests/gpu/gpu_test.h"
#include "tests/model_testutil.h"
#include "grpo/rollout.h" /* grpo_sample_ex: the host sampler, compiled in */
#include "rollout/model/model_int.h"

static float *
prefill_all(grpo_model *m, const tm_expected *e)
{
    grpo_kv *kv = NULL;
    int32_t seq;
    GT_OK(grpo_kv_create_for(&kv, m, 8u << 20)); /* in device memory for backend 2 */
    GT_OK(grpo_kv_seq_new(kv, &seq));
    float *lg = malloc((size_t)e->n * e->vocab * sizeof *lg);
    grpo_fwd_item it = {seq, 0, e->n, e->tokens};
    GT_OK(grpo_model_forward_all(m, kv, &it, 1, lg));
    grpo_kv_destroy(kv);
    return lg;
}

static double
worst_rows(const float *a, const float *b, int n, int V)
{
    double w = 0;
    for (int t = 0; t < n; t++) {
        double r = tm_rel_err(a + (size_t)t * V, b + (size_t)t * V, (size_t)V);
        w = r > w || isnan(r) ? r : w;
    }
    return w;
}

/* 8 decode steps of 3 sequences (prefills of 4, 6 and 9 tokens): the 24 logits rows. */
static float *
decode_steps(grpo_model *m, const tm_expected *e)
{
    int V = e->vocab;
    grpo_kv *kv = NULL;
    int32_t sq[3];
    GT_OK(grpo_kv_create_for(&kv, m, 8u << 20));
    float *lg = malloc((size_t)27 * V * sizeof *lg);
    const int pre[3] = {4, 6, 9};
    for (int i = 0; i < 3; i++) {
        GT_OK(grpo_kv_seq_new(kv, &sq[i]));
        grpo_fwd_item it = {sq[i], 0, pre[i], e->tokens + i};
        GT_OK(grpo_model_forward(m, kv, &it, 1, lg));
    }
    for (int t = 0; t < 8; t++) {
        grpo_fwd_item d[3];
        for (int i = 0; i < 3; i++)
            d[i] = (grpo_fwd_item){sq[i], pre[i] + t, 1, e->tokens + (pre[i] + t + i) % e->n};
        GT_OK(grpo_model_forward(m, kv, d, 3, lg + (size_t)3 * t * V));
    }
    grpo_kv_destroy(kv);
    return lg;
}

/* A decode step recorded as a CUDA graph and replayed equals the step run op by op: the same 8
 * steps with graphs on (recorded at the first step of the shape, replayed at the 7 others) and
 * off, logits bit-identical. */
static void
graph_vs_eager(const char *name, const char *what, grpo_model *m, const tm_expected *e)
{
    long l0 = m->graph_launches;
    float *a = decode_steps(m, e);
    long launched = m->graph_launches - l0;
    m->graphs_off = 1;
    float *b = decode_steps(m, e);
    m->graphs_off = 0;
    GT_OK(grpo_model__backend_status(m));
    int same = memcmp(a, b, (size_t)24 * e->vocab * sizeof *a) == 0;
    printf("  %s: %s decode, CUDA graph replays (%ld) vs op by op: %s\n", name, what, launched,
           same ? "identical" : "DIFFER");
    GT_CHECK(same && launched >= 7, "%s %s: graph replay vs eager (%ld replays)", name, what,
             launched);
    free(a), free(b);
}

/* n_items decode items from tokens tok (one each) and one draw per item plus one more from item
 * 0's row (a group's shared row), keyed by step t; the draws' tokens into out. device: made by
 * the backend (grpo_model__forward_sample); else the logits copied out (lg) and sampled here. */
static void
draw_step(grpo_model *m, grpo_kv *kv, const int32_t *sq, const int32_t *len, const int32_t *tok,
          int n_items, int t, int device, float *lg, int32_t *out, float *lps)
{
    grpo_fwd_item it[8];
    int32_t rows[9];
    grpo_sample_key keys[9];
    float lr[9], lp[9];
    int nd = n_items + 1;
    for (int i = 0; i < n_items; i++)
        it[i] = (grpo_fwd_item){sq[i], len[i], 1, &tok[i]};
    for (int i = 0; i < nd; i++) {
        rows[i] = i < n_items ? i : 0;
        keys[i] = (grpo_sample_key){11,   0xABCDEFull,         (uint32_t)i, (uint32_t)t,
                                    1.0f, i % 2 ? 0.9f : 1.0f, 0.0f,        i % 3 == 2 ? 20 : 0};
    }
    if (device) {
        grpo_model_draws d = {nd, rows, keys, out, lr, lp};
        GT_OK(grpo_model__forward_sample(m, kv, it, n_items, NULL, &d));
    } else {
        int V = grpo_model_get_config(m)->vocab_size;
        GT_OK(grpo_model_forward(m, kv, it, n_items, lg));
        for (int i = 0; i < nd; i++) {
            const grpo_sample_key *q = &keys[i];
            grpo_sampling sp = {q->temperature, q->top_p, q->top_k, q->min_p};
            grpo_rng_key rk = {q->seed, q->prompt_key, q->sample, q->pos};
            out[i] = grpo_sample_ex(lg + (size_t)rows[i] * V, V, &sp, rk, &lr[i], &lp[i], NULL);
        }
    }
    for (int i = 0; i < nd; i++)
        lps[2 * i] = lr[i], lps[2 * i + 1] = lp[i];
}

/* Draws made by the backend where the logits are (the sampler inside the recorded decode step)
 * against the host sampler over the copied logits: 5 sequences (3 prompts, 2 forks) decoded 10
 * steps on two pools in lockstep, each step's tokens fed back; the same tokens, logprobs within
 * 1e-5 (the device's exp and the host's may differ in a double's last bit). */
static void
device_draws(const char *name, grpo_model *m, const tm_expected *e)
{
    enum { N = 5, STEPS = 10 };
    grpo_kv *kv[2] = {NULL, NULL};
    int32_t sq[2][N], len[N], tok[2][N + 1];
    float *lg = malloc((size_t)N * e->vocab * sizeof *lg), lps[2][2 * (N + 1)];
    const int pre[3] = {4, 6, 9};
    for (int p = 0; p < 2; p++) {
        GT_OK(grpo_kv_create_for(&kv[p], m, 8u << 20));
        for (int i = 0; i < 3; i++) {
            GT_OK(grpo_kv_seq_new(kv[p], &sq[p][i]));
            grpo_fwd_item it = {sq[p][i], 0, pre[i], e->tokens + i};
            GT_OK(grpo_model_forward(m, kv[p], &it, 1, lg));
            len[i] = pre[i];
        }
        GT_OK(grpo_kv_seq_fork(kv[p], sq[p][0], &sq[p][3]));
        GT_OK(grpo_kv_seq_fork(kv[p], sq[p][0], &sq[p][4]));
        len[3] = len[4] = pre[0];
        for (int i = 0; i < N; i++)
            tok[p][i] = e->tokens[(i + 7) % e->n];
    }
    long l0 = m->graph_launches;
    int same = 1, steps = 0;
    double worst = 0;
    for (int t = 0; t < STEPS && same; t++, steps++) {
        for (int p = 0; p < 2; p++)
            draw_step(m, kv[p], sq[p], len, tok[p], N, t, p == 0, lg, tok[p], lps[p]);
        same = memcmp(tok[0], tok[1], sizeof tok[0]) == 0 && tok[0][0] >= 0;
        for (int i = 0; i < 2 * (N + 1); i++) {
            double d = fabs((double)lps[0][i] - lps[1][i]);
            worst = d > worst || isnan(d) ? d : worst;
        }
        for (int i = 0; i < N; i++)
            len[i]++;
    }
    long replays = m->graph_launches - l0;
    GT_OK(grpo_model__backend_status(m));
    printf("  %s: %d steps of draws on the device (%ld graph replays) vs on the host: tokens %s, "
           "worst logprob difference %.3g\n",
           name, steps, replays, same ? "identical" : "DIFFER", worst);
    GT_CHECK(same && worst <= 1e-5 && replays > 0, "%s device draws", name);
    grpo_kv_destroy(kv[0]), grpo_kv_destroy(kv[1]);
    free(lg);
}

/* The device-resident model against the staged table's prefill (gpu_lg, bit for bit) and itself
 * (decode vs prefill; forks in one batch vs alone). */
static void
run_resident(const char *name, const char *dir, const tm_expected *e, const float *gpu_lg)
{
    grpo_model *m = NULL;
    grpo_model_opts o = {.n_threads = 1, .backend = 2};
    GT_OK(grpo_model_load(&m, dir, &o));
    if (m == NULL)
        return;
    int n = e->n, V = e->vocab;
    float *lg = prefill_all(m, e);
    GT_OK(grpo_model__backend_status(m));
    int same = memcmp(lg, gpu_lg, (size_t)n * V * sizeof *lg) == 0;
    printf("  %s: device-resident prefill vs staged: %s (worst %.3g)\n", name,
           same ? "identical" : "DIFFER", worst_rows(lg, gpu_lg, n, V));
    GT_CHECK(same, "%s device-resident prefill differs from staged", name);
    grpo_kv *kv = NULL;
    int32_t seq, f1, f2;
    GT_OK(grpo_kv_create_for(&kv, m, 8u << 20));
    GT_OK(grpo_kv_seq_new(kv, &seq));
    float *one = malloc((size_t)3 * V * sizeof *one);
    grpo_fwd_item it = {seq, 0, 5, e->tokens};
    GT_OK(grpo_model_forward(m, kv, &it, 1, one));
    double worst = 0;
    for (int t = 5; t < n - 1; t++) {
        grpo_fwd_item d = {seq, t, 1, e->tokens + t};
        GT_OK(grpo_model_forward(m, kv, &d, 1, one));
        double r = tm_rel_err(one, lg + (size_t)t * V, (size_t)V);
        worst = r > worst || isnan(r) ? r : worst;
    }
    printf("  %s: device-resident decode vs its prefill: %.3g (tol 1e-4)\n", name, worst);
    GT_CHECK(worst <= 1e-4, "%s device-resident decode %.3g", name, worst);
    GT_OK(grpo_kv_seq_fork(kv, seq, &f1));
    GT_OK(grpo_kv_seq_fork(kv, seq, &f2));
    grpo_fwd_item two[2] = {{f1, n - 1, 1, e->tokens}, {f2, n - 1, 1, e->tokens + 1}};
    GT_OK(grpo_model_forward(m, kv, two, 2, one));
    grpo_fwd_item a1 = {seq, n - 1, 1, e->tokens + 1};
    GT_OK(grpo_model_forward(m, kv, &a1, 1, one + 2 * (size_t)V)); /* the parent, as f2 */
    GT_OK(grpo_model__backend_status(m));
    int forks = memcmp(one + V, one + 2 * (size_t)V, (size_t)V * sizeof *one) == 0;
    printf("  %s: device-resident forks in one batch vs alone: %s\n", name,
           forks ? "identical" : "DIFFER");
    GT_CHECK(forks, "%s device-resident fork batch differs", name);
    grpo_kv_destroy(kv);
    graph_vs_eager(name, "device-resident", m, e);
    device_draws(name, m, e);
    free(lg), free(one);
    grpo_model_destroy(m);
}

/* The fast policy's logits lg (the numerics of --numerics fp8: FP8 activations at FP8 weights,
 * BF16 at BF16 weights) against the exact CPU logits and the CPU twin's (act_round: the same
 * roundings on the exact kernels). Each op is checked against the twin in cuda_ops_test; a tiny
 * random model is too chaotic for that here (cuBLASLt's shorter tensor-core sums tip some
 * roundings and routing ties, and three layers spread them: on an H200, 2026-12-04, fast vs twin
 * median 1 - cos 0.0034, twin vs exact 0.0047 on the FP8 model), so the check is that lg's
 * distance from the exact logits is the roundings' own: its median over positions at most twice
 * the twin's, every position finite. A wrong scale or block moves it by orders. */
static void
check_fast(const char *name, const char *what, const float *lg, const float *cpu_lg,
           const float *twin_lg, int n, int V)
{
    double *d_ex = calloc((size_t)n, sizeof *d_ex), *d_tw = calloc((size_t)n, sizeof *d_tw),
           *d_te = calloc((size_t)n, sizeof *d_te);
    if (d_ex == NULL || d_tw == NULL || d_te == NULL || n <= 0) {
        printf("FAIL: %s %s: no positions or out of memory\n", name, what);
        gt_failures++;
        free(d_ex), free(d_tw), free(d_te);
        return;
    }
    for (int t = 0; t < n; t++) {
        size_t o = (size_t)t * V;
        d_ex[t] = gt_diff(lg + o, cpu_lg + o, (size_t)V);
        d_tw[t] = gt_diff(lg + o, twin_lg + o, (size_t)V);
        d_te[t] = gt_diff(twin_lg + o, cpu_lg + o, (size_t)V);
    }
    double ex_max = gt_max(d_ex, n), ex_med = gt_median(d_ex, n), tw_med = gt_median(d_tw, n),
           te_med = gt_median(d_te, n);
    printf("  %s: %s, 1 - cos per position: vs exact median %.3g max %.3g; vs the CPU twin "
           "median %.3g max %.3g; twin vs exact median %.3g\n",
           name, what, ex_med, ex_max, tw_med, gt_max(d_tw, n), te_med);
    if (te_med == 0) /* neither FP8 nor BF16 weights: nothing is rounded */
        GT_CHECK(ex_max < 5e-3, "%s %s vs exact %.3g", name, what, ex_max);
    else
        GT_CHECK(ex_med <= 2 * te_med && !isnan(ex_max),
                 "%s %s vs exact: median %.3g, its twin's %.3g", name, what, ex_med, te_med);
    free(d_ex), free(d_tw), free(d_te);
}

/* The deterministic promise (--numerics fp8 on CUDA: the tensor-core GEMMs, a fixed MLA split):
 * a sequence's decode logits are the same bits alone and in one batch with another sequence of
 * other tokens and length. */
static void
batch_invariant(const char *name, grpo_model *m, const tm_expected *e)
{
    int V = e->vocab;
    grpo_kv *kv = NULL;
    int32_t s, o, f;
    GT_OK(grpo_kv_create_for(&kv, m, 8u << 20));
    GT_OK(grpo_kv_seq_new(kv, &s));
    GT_OK(grpo_kv_seq_new(kv, &o));
    float *lg = malloc((size_t)3 * V * sizeof *lg);
    grpo_fwd_item pre[2] = {{s, 0, 5, e->tokens}, {o, 0, 9, e->tokens + 2}};
    GT_OK(grpo_model_forward(m, kv, pre, 2, lg));
    GT_OK(grpo_kv_seq_fork(kv, s, &f));
    grpo_fwd_item alone = {f, 5, 1, e->tokens + 5};
    GT_OK(grpo_model_forward(m, kv, &alone, 1, lg));
    grpo_fwd_item both[2] = {{o, 9, 1, e->tokens + 11}, {s, 5, 1, e->tokens + 5}};
    GT_OK(grpo_model_forward(m, kv, both, 2, lg + V));
    GT_OK(grpo_model__backend_status(m));
    int same = memcmp(lg, lg + 2 * (size_t)V, (size_t)V * sizeof *lg) == 0;
    printf("  %s: --numerics fp8 decode alone vs batched with another sequence: %s\n", name,
           same ? "identical" : "DIFFER");
    GT_CHECK(same, "%s: --numerics fp8 decode depends on its batch", name);
    grpo_kv_destroy(kv);
    free(lg);
}

/* --numerics fp8 on the device-resident model (grpo_model_opts: backend 2, GRPO_NUMERICS_FP8:
 * the deterministic fast policy, tensor-core GEMMs): checked as the staged cuBLASLt table is
 * (check_fast), then batch_invariant. */
static void
resident_fp8(const char *name, const char *dir, const tm_expected *e, const float *cpu_lg,
             const float *twin_lg)
{
    grpo_model *m = NULL;
    grpo_model_opts o = {.n_threads = 1, .backend = 2, .numerics = GRPO_NUMERICS_FP8};
    GT_OK(grpo_model_load(&m, dir, &o));
    if (m == NULL)
        return;
    float *lg = prefill_all(m, e);
    GT_OK(grpo_model__backend_status(m));
    check_fast(name, "device-resident --numerics fp8", lg, cpu_lg, twin_lg, e->n, e->vocab);
    batch_invariant(name, m, e);
    graph_vs_eager(name, "--numerics fp8", m, e);
    free(lg);
    grpo_model_destroy(m);
}

/* Logits of a 5-token prefill then every later token decoded one at a time (n - 4 rows). */
static float *
decode_all(grpo_model *m, const tm_expected *e)
{
    int V = e->vocab, p0 = 5;
    grpo_kv *kv = NULL;
    int32_t seq;
    GT_OK(grpo_kv_create_for(&kv, m, 8u << 20));
    GT_OK(grpo_kv_seq_new(kv, &seq));
    float *lg = malloc((size_t)(e->n - p0 + 1) * V * sizeof *lg);
    grpo_fwd_item it = {seq, 0, p0, e->tokens};
    GT_OK(grpo_model_forward(m, kv, &it, 1, lg));
    for (int t = p0; t < e->n; t++) {
        grpo_fwd_item d = {seq, t, 1, e->tokens + t};
        GT_OK(grpo_model_forward(m, kv, &d, 1, lg + (size_t)(t - p0 + 1) * V));
    }
    grpo_kv_destroy(kv);
    return lg;
}

/* The device-resident model over BF16 and FP8 latent caches (--kv-dtype) against the CPU backend
 * with the same cache dtype: prefill logits and decode logits (1e-4 of the largest logit). */
static void
resident_kv(const char *name, const char *dir, const tm_expected *e)
{
    const int dts[2] = {GRPO_KV_BF16, GRPO_KV_FP8};
    for (int d = 0; d < 2; d++) {
        grpo_model *mc = NULL, *mg = NULL;
        grpo_model_opts oc = {.n_threads = 2, .kv_dtype = dts[d]};
        grpo_model_opts og = {.n_threads = 1, .backend = 2, .kv_dtype = dts[d]};
        GT_OK(grpo_model_load(&mc, dir, &oc));
        GT_OK(grpo_model_load(&mg, dir, &og));
        if (mc == NULL || mg == NULL) {
            grpo_model_destroy(mc), grpo_model_destroy(mg);
            return;
        }
        float *pc = prefill_all(mc, e), *pg = prefill_all(mg, e);
        float *dc = decode_all(mc, e), *dg = decode_all(mg, e);
        GT_OK(grpo_model__backend_status(mg));
        double wp = worst_rows(pg, pc, e->n, e->vocab), wd = worst_rows(dg, dc, e->n - 4, e->vocab);
        printf("  %s: device-resident, kv dtype %s, vs the CPU backend with it: prefill %.3g, "
               "decode %.3g (tol 1e-4)\n",
               name, grpo_kv_dtype_name(dts[d]), wp, wd);
        GT_CHECK(wp <= 1e-4 && wd <= 1e-4, "%s kv %s: prefill %.3g decode %.3g", name,
                 grpo_kv_dtype_name(dts[d]), wp, wd);
        free(pc), free(pg), free(dc), free(dg);
        grpo_model_destroy(mc), grpo_model_destroy(mg);
    }
}

/* --numerics fp8 over a BF16 and an FP8 latent cache: the absorbed MLA decode on the tensor cores
 * (BF16 queries and probabilities) against the same model with the fp32 attention kernel
 * (GRPO_CUDA_MLA_TC=0) over the same cache: decode logits within 3e-2 of the largest (the
 * kernels' own distance is 3.5e-3 of the largest output in the host simulation); the tensor-core
 * decode's batch invariance and its graph replays. */
static void
resident_fp8_tc(const char *name, const char *dir, const tm_expected *e)
{
    const int dts[2] = {GRPO_KV_BF16, GRPO_KV_FP8};
    for (int d = 0; d < 2; d++) {
        grpo_model *m = NULL;
        grpo_model_opts o = {
            .n_threads = 1, .backend = 2, .numerics = GRPO_NUMERICS_FP8, .kv_dtype = dts[d]};
        GT_OK(grpo_model_load(&m, dir, &o));
        if (m == NULL)
            return;
        long t0 = grpo_cuda_mla_tc_count(m->k);
        float *tc = decode_all(m, e);
        long ran = grpo_cuda_mla_tc_count(m->k) - t0;
        setenv("GRPO_CUDA_MLA_TC", "0", 1);
        float *f32 = decode_all(m, e);
        unsetenv("GRPO_CUDA_MLA_TC");
        GT_OK(grpo_model__backend_status(m));
        double w = worst_rows(tc, f32, e->n - 4, e->vocab);
        printf("  %s: --numerics fp8, kv %s: tensor-core MLA decode (%ld launches) vs the fp32 "
               "kernel: worst %.3g of the largest logit (tol 3e-2)\n",
               name, grpo_kv_dtype_name(dts[d]), ran, w);
        GT_CHECK(ran > 0 && w <= 3e-2, "%s kv %s: tensor-core MLA %.3g (%ld launches)", name,
                 grpo_kv_dtype_name(dts[d]), w, ran);
        batch_invariant(name, m, e);
        graph_vs_eager(name, "--numerics fp8, tensor-core MLA", m, e);
        free(tc), free(f32);
        grpo_model_destroy(m);
    }
}

/* The MTP module on the device-resident model (its weights uploaded with the model's): the MTP
 * prefill over the main model's final states and one MTP decode step against the CPU backend
 * (1e-4 of the largest logit). The tiny BF16 model only (the one with an MTP layer). */
static void
resident_mtp(const char *name, const char *dir, const tm_expected *e)
{
    grpo_model *ms[2] = {NULL, NULL};
    grpo_model_opts oc = {.n_threads = 2, .load_mtp = 1};
    grpo_model_opts og = {.n_threads = 1, .backend = 2, .load_mtp = 1};
    GT_OK(grpo_model_load(&ms[0], dir, &oc));
    if (!grpo_model_has_mtp(ms[0])) {
        grpo_model_destroy(ms[0]);
        return;
    }
    GT_OK(grpo_model_load(&ms[1], dir, &og));
    int V = e->vocab, H = grpo_model_get_config(ms[0])->hidden_size, n = e->n - 1;
    float *lg[2];
    for (int v = 0; v < 2; v++) {
        grpo_kv *kv = NULL, *mkv = NULL;
        int32_t sq, mq;
        GT_OK(grpo_kv_create_for(&kv, ms[v], 8u << 20));
        GT_OK(grpo_kv_create_mtp(&mkv, ms[v], 8u << 20));
        GT_OK(grpo_kv_seq_new(kv, &sq));
        GT_OK(grpo_kv_seq_new(mkv, &mq));
        float *main_lg = malloc((size_t)n * V * sizeof *main_lg);
        float *hid = malloc((size_t)n * H * sizeof *hid);
        lg[v] = malloc((size_t)n * V * sizeof *lg[v]);
        grpo_fwd_item p = {sq, 0, n, e->tokens};
        GT_OK(grpo_model_forward_hidden(ms[v], kv, &p, 1, 1, main_lg, hid));
        grpo_fwd_item q = {mq, 0, n - 1, e->tokens + 1};
        GT_OK(grpo_model_mtp_forward(ms[v], mkv, &q, 1, hid, 1, lg[v]));
        grpo_fwd_item d = {mq, n - 1, 1, e->tokens + n};
        GT_OK(grpo_model_mtp_forward(ms[v], mkv, &d, 1, hid + (size_t)(n - 1) * H, 0,
                                     lg[v] + (size_t)(n - 1) * V));
        GT_OK(grpo_model__backend_status(ms[v]));
        free(main_lg), free(hid);
        grpo_kv_destroy(mkv), grpo_kv_destroy(kv);
    }
    double w = worst_rows(lg[1], lg[0], n, V);
    printf("  %s: MTP module on the device-resident model vs the CPU backend: %d rows, worst "
           "%.3g (tol 1e-4)\n",
           name, n, w);
    GT_CHECK(w <= 1e-4, "%s: MTP on the device %.3g", name, w);
    free(lg[0]), free(lg[1]);
    grpo_model_destroy(ms[0]), grpo_model_destroy(ms[1]);
}

static void
run_model(const char *name)
{
    char dir[512];
    tm_dir(name, dir, sizeof dir);
    tm_expected e;
    if (tm_expected_load(dir, &e) != 0) {
        printf("FAIL: cannot load %s fixtures\n", dir);
        gt_failures++;
        return;
    }
    grpo_model *m = NULL;
    grpo_model_opts o = {.n_threads = 2};
    GT_OK(grpo_model_load(&m, dir, &o));
    int n = e.n, V = e.vocab;
    float *cpu_lg = prefill_all(m, &e);
    grpo_kernels *cpu = m->k, *gx = NULL, *gf = NULL;
    GT_OK(grpo_kernels_cuda_create(&gx, 0, GRPO_CUDA_STAGED, GRPO_CUDA_GEMM_EXACT));
    GT_OK(grpo_kernels_cuda_create(&gf, 0, GRPO_CUDA_STAGED, GRPO_CUDA_GEMM_FAST));

    m->k = gx;
    float *gpu_lg = prefill_all(m, &e);
    GT_OK(grpo_kernels_cuda_status(gx));
    double vs_cpu = worst_rows(gpu_lg, cpu_lg, n, V), vs_hf = worst_rows(gpu_lg, e.logits, n, V);
    printf("  %s: prefill of %d tokens: vs CPU backend %.3g, vs transformers %.3g (tol 1e-4)\n",
           name, n, vs_cpu, vs_hf);
    GT_CHECK(vs_cpu <= 1e-4 && vs_hf <= 1e-4, "%s prefill", name);

    /* decode against prefill: a short prefill, then one token at a time */
    grpo_kv *kv = NULL;
    int32_t seq;
    GT_OK(grpo_kv_create(&kv, grpo_model_get_config(m), 8u << 20));
    GT_OK(grpo_kv_seq_new(kv, &seq));
    int p0 = 5;
    float *lg = malloc((size_t)V * sizeof *lg);
    grpo_fwd_item it = {seq, 0, p0, e.tokens};
    GT_OK(grpo_model_forward(m, kv, &it, 1, lg));
    double worst = tm_rel_err(lg, gpu_lg + (size_t)(p0 - 1) * V, (size_t)V);
    for (int t = p0; t < n; t++) {
        grpo_fwd_item d = {seq, t, 1, e.tokens + t};
        GT_OK(grpo_model_forward(m, kv, &d, 1, lg));
        double r = tm_rel_err(lg, gpu_lg + (size_t)t * V, (size_t)V);
        worst = r > worst || isnan(r) ? r : worst;
    }
    GT_OK(grpo_kernels_cuda_status(gx));
    printf("  %s: decode of %d tokens vs GPU prefill: %.3g (tol 1e-4)\n", name, n - p0, worst);
    GT_CHECK(worst <= 1e-4, "%s decode vs prefill %.3g", name, worst);
    grpo_kv_destroy(kv);

    m->k = gf;
    float *fast_lg = prefill_all(m, &e);
    GT_OK(grpo_kernels_cuda_status(gf));
    m->k = cpu;
    cpu->act_round = 1;
    float *twin_lg = prefill_all(m, &e);
    cpu->act_round = 0;
    check_fast(name, "fast policy (staged)", fast_lg, cpu_lg, twin_lg, n, V);

    m->k = cpu; /* the model destroys its own (CPU) table */
    run_resident(name, dir, &e, gpu_lg);
    resident_fp8(name, dir, &e, cpu_lg, twin_lg);
    resident_kv(name, dir, &e);
    resident_fp8_tc(name, dir, &e);
    resident_mtp(name, dir, &e);
    free(twin_lg);
    grpo_kernels_cuda_destroy(gx);
    grpo_kernels_cuda_destroy(gf);
    free(cpu_lg), free(gpu_lg), free(fast_lg), free(lg);
    grpo_model_destroy(m);
    tm_expected_free(&e);
}

/* The other families on the device-resident model (GQA attention on the device, the softmax
 * gates of deepseek_v2 and qwen3_moe on the host from the copied router logits): prefill logits
 * against the CPU backend and transformers, and the decode steps of decode_steps against the CPU
 * backend's, over F32, BF16 and FP8 caches (1e-4 of the largest logit; the cache dtypes against
 * the CPU with the same cache). */
static void
run_family(const char *sub)
{
    char dir[512];
    const char *src = getenv("GRPO_SOURCE_DIR");
    snprintf(dir, sizeof dir, "%s%sdata/%s", src ? src : "", src ? "/tests/" : "", sub);
    tm_expected e;
    if (tm_expected_load(dir, &e) != 0) {
        printf("FAIL: cannot load %s fixtures\n", dir);
        gt_failures++;
        return;
    }
    const int kvs[3] = {GRPO_KV_F32, GRPO_KV_BF16, GRPO_KV_FP8};
    const char *kvn[3] = {"f32", "bf16", "fp8"};
    for (int c = 0; c < 3; c++) {
        grpo_model *mc = NULL, *md = NULL;
        grpo_model_opts oc = {.n_threads = 2, .kv_dtype = kvs[c]};
        grpo_model_opts od = {.n_threads = 1, .backend = 2, .kv_dtype = kvs[c]};
        GT_OK(grpo_model_load(&mc, dir, &oc));
        GT_OK(grpo_model_load(&md, dir, &od));
        if (mc == NULL || md == NULL) {
            grpo_model_destroy(mc), grpo_model_destroy(md);
            break;
        }
        float *pc = prefill_all(mc, &e), *pd = prefill_all(md, &e);
        GT_OK(grpo_model__backend_status(md));
        double vs_cpu = worst_rows(pd, pc, e.n, e.vocab);
        double vs_hf = c == 0 ? worst_rows(pd, e.logits, e.n, e.vocab) : 0;
        float *dc = decode_steps(mc, &e), *dd = decode_steps(md, &e);
        GT_OK(grpo_model__backend_status(md));
        double dec = worst_rows(dd, dc, 24, e.vocab);
        printf("  %s (%s cache) on the device: prefill vs CPU %.3g, vs transformers %.3g; 8 decode "
               "steps of 3 vs CPU %.3g (tol 1e-4)\n",
               sub, kvn[c], vs_cpu, vs_hf, dec);
        GT_CHECK(vs_cpu <= 1e-4 && vs_hf <= 1e-4 && dec <= 1e-4, "%s %s cache on the device", sub,
                 kvn[c]);
        if (grpo_model_get_config(md)->n_routed_experts == 0) /* no host router: recorded */
            graph_vs_eager(sub, kvn[c], md, &e);
        free(pc), free(pd), free(dc), free(dd);
        grpo_model_destroy(mc), grpo_model_destroy(md);
    }
    tm_expected_free(&e);
}

int
main(void)
{
    gt_init("cuda_model_test");
    run_model("bf16");
    run_model("fp8");
    run_family("gqa_models/qwen2_tied");
    run_family("gqa_models/qwen3_fp8");
    run_family("gqa_models/qwen3_moe_64x8");
    run_family("gqa_models/llama3_bf16");
    run_family("v2_models/v2_group_f32");
    return gt_finish("cuda_model_test");
}
