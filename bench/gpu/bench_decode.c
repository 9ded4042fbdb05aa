/* Decode tokens/s for a GRPO group of G = 64 samples on a slice of DeepSeek-V3 at full width
 * (hidden 7168, 128 heads, MLA ranks 1536/512/64, 256 routed experts of 2048 + 1 shared, top-8 in
 * 8 groups keep 4) with random FP8 weights, every op on the CUDA backend (FP8 GEMMs through
 * cuBLASLt, absorbed MLA over a paged cache whose prompt pages the 64 samples share, device
 * router + MoE plan + grouped expert GEMMs, lm_head BF16 + GPU sampling), each block captured in a
 * CUDA graph. Measured per block; the whole slice step is also timed as one graph. Then a
 * projection to 61 layers on 8 GPUs (assumptions printed with it). Everything twice: with the
 * FAST policy (cuBLASLt, CUDA-core grouped expert GEMM: numerics fp8-nondet) and with the
 * deterministic FAST_DET policy (--numerics fp8: our tensor-core GEMMs, dense and grouped).
 *   bench_decode [--out FILE] [--layers 2] [--ctx 1024] [--prompt 512] */
#include "bench/gpu/bench_util.h"
#include "kernels/cuda/plan.h"
#include "common/common_int.h"

#include <math.h>

#define HID 7168
#define NH 128
#define QL 1536
#define KVL 512
#define DR 64
#define QK 192
#define INTER 2048
#define NE 256
#define TOPK 8
#define G 64
#define VOCAB 129280

static uint64_t seed = 100;
static grpo_kernels *K;
static int det; /* K is the FAST_DET table: the grouped expert GEMMs on the tensor cores */

static grpo_kw
fp8_weight(int rows, int cols)
{
    grpo_kw w = {.dt = GRPO_DT_F8E4M3, .rows = rows, .cols = cols, .br = 128, .bc = 128};
    w.scale_cols = (cols + 127) / 128;
    size_t ns = (size_t)((rows + 127) / 128) * w.scale_cols;
    void *d;
    float *s;
    B_OK(grpo_cuda_malloc(&d, (size_t)rows * cols));
    B_OK(grpo_cuda_malloc((void **)&s, ns * 4));
    B_OK(grpo_cuda_fill_random(K, d, (size_t)rows * cols, 1, 240.0f, seed++));
    B_OK(grpo_cuda_fill_random(K, s, ns, 3, 2e-4f, seed++));
    w.data = d, w.scale = s;
    return w;
}

static float *
f32(size_t n, int kind, float scale)
{
    float *d;
    B_OK(grpo_cuda_malloc((void **)&d, n * 4));
    B_OK(grpo_cuda_fill_random(K, d, n, kind, scale, seed++));
    return d;
}

typedef struct {
    float *attn_norm, *q_norm, *kv_norm, *ffn_norm, *bias;
    grpo_kw q_a, q_b, kv_a, kv_b, kv_bv, o, gate, s_gu, s_dn, d_gu, d_dn;
    void *tab_gu, *tab_dn; /* device tables of the routed experts */
    int n_exp;
    const float *const *ptab;
    int maxp;
} layer;

typedef struct {
    layer *ly;
    int n_layers, ctx;
    float *x, *xn, *qa, *q, *kva, *ql, *qr, *ol, *ao, *tmp, *lg, *wts, *xp, *gu, *hh, *yp, *sgu, *sh,
        *y, *inv, *logits, *lp1, *lp2;
    int32_t *pos, *idx, *offs, *src, *dst, *dlen, *tok;
    grpo_kw lm_head;
    grpo_cuda_sample_key keys[G];
    void *dkeys;
    int which, layer_i, moe_e; /* block to run */
} dctx;

static void
make_layer(layer *l, int n_exp, int dense, int ctx, int prompt)
{
    memset(l, 0, sizeof *l);
    l->attn_norm = f32(HID, 3, 1.0f), l->q_norm = f32(QL, 3, 1.0f), l->kv_norm = f32(KVL, 3, 1.0f);
    l->ffn_norm = f32(HID, 3, 1.0f), l->bias = f32(NE, 0, 0.01f);
    l->q_a = fp8_weight(QL, HID), l->q_b = fp8_weight(NH * QK, QL);
    l->kv_a = fp8_weight(KVL + DR, HID), l->kv_b = fp8_weight(NH * 256, KVL);
    l->kv_bv = grpo_kw_rows(&l->kv_b, 128, NH * 256 - 128);
    l->o = fp8_weight(HID, NH * 128);
    l->gate = (grpo_kw){.dt = GRPO_DT_BF16, .rows = n_exp, .cols = HID};
    void *g;
    B_OK(grpo_cuda_malloc(&g, (size_t)n_exp * HID * 2));
    B_OK(grpo_cuda_fill_random(K, g, (size_t)n_exp * HID, 2, 0.02f, seed++));
    l->gate.data = g;
    int inter = dense ? 18432 : INTER;
    l->s_gu = fp8_weight(2 * inter, HID), l->s_dn = fp8_weight(HID, inter);
    l->n_exp = dense ? 0 : n_exp;
    if (!dense) {
        grpo_kw *gu = malloc((size_t)n_exp * sizeof *gu), *dn = malloc((size_t)n_exp * sizeof *dn);
        l->d_gu = fp8_weight(n_exp * 2 * INTER, HID); /* one allocation per matrix kind */
        l->d_dn = fp8_weight(n_exp * HID, INTER);
        for (int e = 0; e < n_exp; e++) {
            gu[e] = grpo_kw_rows(&l->d_gu, e * 2 * INTER, 2 * INTER);
            dn[e] = grpo_kw_rows(&l->d_dn, e * HID, HID);
        }
        B_OK(grpo_cuda_moe_table(&l->tab_gu, n_exp, gu));
        B_OK(grpo_cuda_moe_table(&l->tab_dn, n_exp, dn));
        free(gu), free(dn);
    }
    /* the cache: `prompt` tokens in pages shared by the G samples, the rest per sample */
    int maxp = (ctx + 63) / 64, sp = prompt / 64, own = maxp - sp;
    size_t page = 64 * (KVL + DR), npool = (size_t)sp + (size_t)G * own;
    float *pool = f32(npool * page, 0, 1.0f);
    const float **h = malloc((size_t)G * maxp * sizeof *h);
    for (int b = 0; b < G; b++)
        for (int i = 0; i < maxp; i++)
            h[(size_t)b * maxp + i] =
                pool + page * (i < sp ? (size_t)i : (size_t)sp + (size_t)b * own + (i - sp));
    void *pt;
    B_OK(grpo_cuda_malloc(&pt, (size_t)G * maxp * sizeof *h));
    B_OK(grpo_cuda_h2d(pt, h, (size_t)G * maxp * sizeof *h));
    free(h);
    l->ptab = pt, l->maxp = maxp;
}

/* attention block of layer l: x -> x + o_proj(MLA(norm(x))); leaves norm for the FFN in xn */
static grpo_err
attn(dctx *c, layer *l)
{
    grpo_err e = GRPO_OK;
    K->rmsnorm(K, G, c->x, HID, l->attn_norm, HID, 1e-6f, c->xn, HID);
    K->gemm(K, G, c->xn, HID, &l->q_a, c->qa, QL);
    K->rmsnorm(K, G, c->qa, QL, l->q_norm, QL, 1e-6f, c->qa, QL);
    K->gemm(K, G, c->qa, QL, &l->q_b, c->q, NH * QK);
    K->gemm(K, G, c->xn, HID, &l->kv_a, c->kva, KVL + DR);
    K->rmsnorm(K, G, c->kva, KVL + DR, l->kv_norm, KVL, 1e-6f, c->kva, KVL + DR);
    K->rope(K, G, c->kva + KVL, KVL + DR, 1, DR, DR, c->pos, c->inv, 1.0f, 1);
    K->rope(K, G, c->q + 128, NH * QK, NH, QK, DR, c->pos, c->inv, 1.0f, 1);
    K->gemm_t_heads(K, G, NH, c->q, NH * QK, QK, &l->kv_b, 256, 128, c->ql, NH * KVL, KVL);
    cudaError_t ce = cudaMemcpy2DAsync(c->qr, DR * 4, c->q + 128, QK * 4, DR * 4, (size_t)G * NH,
                                       cudaMemcpyDeviceToDevice,
                                       (cudaStream_t)grpo_kernels_cuda_stream(K));
    if (ce != cudaSuccess)
        return grpo__fail(GRPO_EIO, "cuda: rope query copy: %s", cudaGetErrorString(ce));
    if ((e = grpo_cuda_mla_decode_dev(K, G, NH, KVL, DR, c->ql, c->qr, l->ptab, l->maxp, c->dlen,
                                      c->ctx, 64, KVL + DR, 0.1352338f, c->ol)) != GRPO_OK)
        return e;
    K->gemm_heads(K, G, NH, c->ol, NH * KVL, KVL, &l->kv_bv, 256, 128, c->ao, NH * 128, 128);
    K->gemm(K, G, c->ao, NH * 128, &l->o, c->tmp, HID);
    return grpo_cuda_add_rmsnorm(K, G, HID, c->x, HID, c->tmp, HID, l->ffn_norm, 1e-6f, c->xn, HID);
}

/* FFN block: shared (or dense) MLP + routed experts; y added to x */
/* The grouped expert GEMM of the policy: CUDA cores, or (det) tensor cores. */
static grpo_err
experts(dctx *c, const layer *l, const void *tab, const grpo_kw *all, int N, int Kd, const float *x,
        float *y)
{
    if (!det)
        return grpo_cuda_moe_gemm_dev(K, l->n_exp, G * TOPK, c->offs, x, Kd, tab, N, Kd, y, N);
    grpo_kw w0 = grpo_kw_rows(all, 0, N);
    return grpo_cuda_moe_gemm_tc(K, l->n_exp, G * TOPK, c->offs, x, Kd, tab, &w0, y, N);
}

static grpo_err
ffn(dctx *c, layer *l, int n_exp)
{
    grpo_err e = GRPO_OK;
    int inter = l->s_dn.cols;
    K->gemm(K, G, c->xn, HID, &l->s_gu, c->sgu, 2 * inter);
    K->silu_mul(K, G, inter, c->sgu, 2 * inter, c->sgu + inter, 2 * inter, c->sh, inter);
    K->gemm(K, G, c->sh, inter, &l->s_dn, c->y, HID);
    if (l->n_exp > 0) {
        int ng = n_exp >= 64 ? 8 : 1, kg = n_exp >= 64 ? 4 : 1;
        K->gemm(K, G, c->xn, HID, &l->gate, c->lg, n_exp);
        K->router(K, G, c->lg, n_exp, l->bias, ng, kg, TOPK, 1, 2.5f, c->idx, c->wts);
        if ((e = grpo_cuda_moe_plan(K, G, TOPK, n_exp, c->idx, c->offs, c->src, c->dst)) ||
            (e = grpo_cuda_moe_permute(K, G, TOPK, HID, c->xn, HID, c->src, c->xp)) ||
            (e = experts(c, l, l->tab_gu, &l->d_gu, 2 * INTER, HID, c->xp, c->gu)))
            return e;
        K->silu_mul(K, G * TOPK, INTER, c->gu, 2 * INTER, c->gu + INTER, 2 * INTER, c->hh, INTER);
        if ((e = experts(c, l, l->tab_dn, &l->d_dn, HID, INTER, c->hh, c->yp)) ||
            (e = grpo_cuda_moe_combine(K, G, TOPK, HID, c->yp, c->dst, c->wts, c->y, HID, 1)))
            return e;
    }
    return grpo_cuda_add_rmsnorm(K, G, HID, c->x, HID, c->y, HID, l->attn_norm, 1e-6f, c->tmp, HID);
}

static grpo_err
head(dctx *c)
{
    K->gemm(K, G, c->xn, HID, &c->lm_head, c->logits, VOCAB);
    return grpo_cuda_sample_dev(K, G, VOCAB, c->logits, NULL, c->dkeys, c->tok, c->lp1, c->lp2);
}

static grpo_err
run(grpo_kernels *k, void *p)
{
    (void)k;
    dctx *c = p;
    switch (c->which) {
    case 0: return attn(c, &c->ly[c->layer_i]);
    case 1: return ffn(c, &c->ly[c->layer_i], c->ly[c->layer_i].n_exp);
    case 2: return head(c);
    default:
        for (int i = 0; i < c->n_layers; i++) {
            grpo_err e = attn(c, &c->ly[i]);
            if (e == GRPO_OK)
                e = ffn(c, &c->ly[i], c->ly[i].n_exp);
            if (e != GRPO_OK)
                return e;
        }
        return head(c);
    }
}

static double
time_block(dctx *c, int which, int layer_i)
{
    c->which = which, c->layer_i = layer_i;
    return bench_ms(K, run, c, 3, 5);
}

/* Timings of one policy, ms. */
typedef struct {
    double attn, moe, dense, ep, head, step;
    long lt, fb, tc;
} timings;

/* The table of both policies (t[0] FAST, t[1] FAST_DET), then the 61-layer projections. */
static void
report(FILE *out, const timings *t, int ctx, int prompt, int n_moe)
{
    B_ROW(out, "\n### Decode, G = %d samples, context %d (%d-token prompt shared), FP8 weights\n\n",
          G, ctx, prompt);
    B_ROW(out, "| block (one layer, full V3 width) | fp8-nondet: cuBLASLt + CUDA-core experts, ms "
               "| --numerics fp8: tensor-core GEMMs, ms |\n|---|---|---|\n");
    B_ROW(out,
          "| attention (norms, q/kv projections, RoPE, absorbed MLA, o_proj) | %.3f | %.3f |\n",
          t[0].attn, t[1].attn);
    B_ROW(out,
          "| MoE, 256 experts on this GPU (router, plan, grouped FP8, shared, combine) | %.3f | "
          "%.3f |\n",
          t[0].moe, t[1].moe);
    B_ROW(out,
          "| MoE, 32 experts (one GPU's share at EP = 8, 16 rows per expert) | %.3f | %.3f |\n",
          t[0].ep, t[1].ep);
    B_ROW(out, "| dense MLP 18432 (layers 0-2) | %.3f | %.3f |\n", t[0].dense, t[1].dense);
    B_ROW(out, "| lm_head (BF16, 129280) + GPU sampling | %.3f | %.3f |\n", t[0].head, t[1].head);
    B_ROW(out, "| whole step: %d MoE layers + head, one CUDA graph | %.3f | %.3f |\n", n_moe,
          t[0].step, t[1].step);
    B_ROW(out, "\nSlice: %.0f / %.0f tokens/s for the group (%d layers + head on one GPU).\n",
          G / (t[0].step * 1e-3), G / (t[1].step * 1e-3), n_moe);
    /* projection: 61 layers (3 dense + 58 MoE) on 8 GPUs, EP = 8, data-parallel attention */
    double a2a = 2.0 * ((double)G * TOPK * 7 / 8 * HID * 4 / 450e9 + 20e-6) * 1e3;
    for (int p = 0; p < 2; p++) {
        double t61 = 3 * (t[p].attn + t[p].dense) + 58 * (t[p].attn + t[p].ep + a2a) + t[p].head;
        B_ROW(out,
              "\nProjection to 61 layers on 8 H200s (%s): %.2f ms per step, %.0f tokens/s per "
              "GPU (%.0f for 8 GPUs, %.1f per sample).\n",
              p ? "--numerics fp8" : "fp8-nondet", t61, G / (t61 * 1e-3), 8 * G / (t61 * 1e-3),
              1.0 / (t61 * 1e-3));
    }
    B_ROW(out,
          "Assumptions: each GPU decodes its own group of %d (data-parallel attention, measured "
          "above); experts split 32 per GPU, so each GPU's MoE sees 512 routed rows = the "
          "32-expert row; two all-to-alls per MoE layer of 7/8 of 512 fp32 rows of 7168 at an "
          "assumed 450 GB/s NVLink plus 20 us latency each (%.3f ms per layer, not measured); "
          "routing balanced; no MTP, no overlap of communication with compute; the KV-cache "
          "append and the host's scheduling are not included.\n",
          G, a2a);
    B_ROW(out,
          "GEMM calls through cuBLASLt: %ld; fallen back to the generic kernel: %ld; on the "
          "tensor-core kernel (--numerics fp8): %ld.\n",
          t[0].lt, t[0].fb, t[1].tc);
}

static void *
dalloc(size_t n)
{
    void *d;
    B_OK(grpo_cuda_malloc(&d, n ? n : 1));
    return d;
}

int
main(int argc, char **argv)
{
    K = bench_init("bench_decode", GRPO_CUDA_GEMM_FAST);
    FILE *out = bench_out(argc, argv);
    int n_moe = bench_arg(argc, argv, "--layers", 2), ctx = bench_arg(argc, argv, "--ctx", 1024);
    int prompt = bench_arg(argc, argv, "--prompt", 512) / 64 * 64;
    dctx c;
    memset(&c, 0, sizeof c);
    c.n_layers = n_moe, c.ctx = ctx;
    c.ly = calloc((size_t)n_moe + 2, sizeof *c.ly);
    for (int i = 0; i < n_moe; i++)
        make_layer(&c.ly[i], NE, 0, ctx, prompt);
    make_layer(&c.ly[n_moe], NE, 1, ctx, prompt);      /* dense MLP 18432 (layers 0-2) */
    make_layer(&c.ly[n_moe + 1], 32, 0, ctx, prompt);  /* one GPU's slice at EP = 8 */
    size_t R = (size_t)G * TOPK;
    c.x = f32((size_t)G * HID, 0, 1.0f);
    c.xn = dalloc((size_t)G * HID * 4), c.qa = dalloc((size_t)G * QL * 4);
    c.q = dalloc((size_t)G * NH * QK * 4), c.kva = dalloc((size_t)G * (KVL + DR) * 4);
    c.ql = dalloc((size_t)G * NH * KVL * 4), c.ol = dalloc((size_t)G * NH * KVL * 4);
    c.qr = dalloc((size_t)G * NH * DR * 4), c.ao = dalloc((size_t)G * NH * 128 * 4);
    c.tmp = dalloc((size_t)G * HID * 4), c.lg = dalloc((size_t)G * NE * 4);
    c.wts = dalloc(R * 4), c.idx = dalloc(R * 4), c.src = dalloc(R * 4), c.dst = dalloc(R * 4);
    c.offs = dalloc((NE + 1) * 4), c.xp = dalloc(R * HID * 4), c.gu = dalloc(R * 2 * INTER * 4);
    c.hh = dalloc(R * INTER * 4), c.yp = dalloc(R * HID * 4), c.y = dalloc((size_t)G * HID * 4);
    c.sgu = dalloc((size_t)G * 2 * 18432 * 4), c.sh = dalloc((size_t)G * 18432 * 4);
    c.logits = dalloc((size_t)G * VOCAB * 4), c.tok = dalloc(G * 4);
    c.lp1 = dalloc(G * 4), c.lp2 = dalloc(G * 4);
    int32_t pos[G], len[G];
    float inv[DR / 2];
    for (int i = 0; i < G; i++)
        pos[i] = ctx - 1, len[i] = ctx;
    for (int i = 0; i < DR / 2; i++)
        inv[i] = powf(10000.0f, -2.0f * i / DR);
    c.pos = dalloc(sizeof pos), c.dlen = dalloc(sizeof len), c.inv = dalloc(sizeof inv);
    B_OK(grpo_cuda_h2d(c.pos, pos, sizeof pos));
    B_OK(grpo_cuda_h2d(c.dlen, len, sizeof len));
    B_OK(grpo_cuda_h2d(c.inv, inv, sizeof inv));
    c.lm_head = (grpo_kw){.dt = GRPO_DT_BF16, .rows = VOCAB, .cols = HID};
    void *lm = dalloc((size_t)VOCAB * HID * 2);
    B_OK(grpo_cuda_fill_random(K, lm, (size_t)VOCAB * HID, 2, 0.02f, seed++));
    c.lm_head.data = lm;
    for (int b = 0; b < G; b++)
        c.keys[b] = (grpo_cuda_sample_key){.seed = 7, .prompt_key = 42, .sample = (uint32_t)b,
                                           .pos = (uint32_t)ctx, .temperature = 0.6f,
                                           .top_p = 0.95f, .top_k = 0, .min_p = 0.0f};
    c.dkeys = dalloc(sizeof c.keys);
    B_OK(grpo_cuda_h2d(c.dkeys, c.keys, sizeof c.keys));

    /* [0]: FAST (fp8-nondet), [1]: FAST_DET (--numerics fp8) */
    timings tm[2];
    grpo_kernels *tab[2] = {K, NULL};
    for (int p = 0; p < 2; p++) {
        if (p == 1) { /* the inputs were made on the first table's stream */
            B_OK(grpo_kernels_cuda_status(tab[0]));
            B_OK(grpo_kernels_cuda_create(&tab[1], 0, GRPO_CUDA_DEVICE, GRPO_CUDA_GEMM_FAST_DET));
        }
        K = tab[p], det = p;
        timings *t = &tm[p];
        t->attn = time_block(&c, 0, 0), t->moe = time_block(&c, 1, 0);
        t->dense = time_block(&c, 1, n_moe), t->ep = time_block(&c, 1, n_moe + 1);
        t->head = time_block(&c, 2, 0), t->step = time_block(&c, 3, 0);
        grpo_kernels_cuda_counts(K, &t->lt, &t->fb, &t->tc);
    }
    report(out, tm, ctx, prompt, n_moe);
    if (out)
        fclose(out);
    grpo_kernels_cuda_destroy(tab[1]);
    K = tab[0];
    grpo_kernels_cuda_destroy(K);
    return 0;
}
