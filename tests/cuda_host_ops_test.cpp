/* The CUDA row, element-wise and MoE data-movement bodies (kernels/cuda/ops_body.h, the code the
 * kernels of ops.cu and moe.cu run) executed on the host, with one POSIX thread per "CUDA thread"
 * and a barrier for __syncthreads where a body has one, against the CPU backend's ops (RMSNorm,
 * RoPE, SiLU-and-multiply, embedding over F32/BF16/F16/FP8 rows, the DeepSeek-V3 router) and the
 * host MoE plan (kernels/cuda/plan.c); the combine against its definition; the device-mode
 * memory entries against the host helpers of kernels/mem.c. Runs in CI without a device; the CUDA
 * execution is tests/gpu/cuda_ops_test.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include <cmocka.h>
}

#include "kernels/cuda/kv_body.h"
#include "kernels/cuda/ops_body.h"
#include "kernels/cuda/plan.h"
#include "tests/cuda_host_mma.h"
extern "C" {
#include "rollout/model/model_int.h" /* grpo_model__route_softmax: the host route */
}

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static float
frand(void) /* uniform in [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) / (double)(1 << 24)) * 2.0f - 1.0f;
}

struct host_ctx {
    int t, n;
    pthread_barrier_t *bar;
    int tid() const
    {
        return t;
    }
    int nt() const
    {
        return n;
    }
    void sync()
    {
        pthread_barrier_wait(bar);
    }
};

/* Runs body(cx) on NT host threads sharing one barrier: one simulated block. */
template <class F>
static void
run_block(int NT, F body)
{
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)NT);
    host_threads(NT, [&](int t) {
        host_ctx cx{t, NT, &bar};
        body(cx);
    });
    pthread_barrier_destroy(&bar);
}

static grpo_kernels *
cpu(void)
{
    grpo_kernels *k = NULL;
    assert_int_equal(grpo_kernels_cpu_create(&k, 1), GRPO_OK);
    return k;
}

/* RMSNorm rows of several widths, with and without the fused residual add: within 2e-6 of the
 * CPU op (its sum of squares runs in another order), the residual written back exactly. */
static void
rmsnorm_rows(void **state)
{
    (void)state;
    grpo_kernels *k = cpu();
    const int M = 3, widths[] = {7, 256, 300, 2048};
    for (int wi = 0; wi < 4; wi++) {
        int n = widths[wi];
        std::vector<float> x(M * n), add(M * n), w(n), y(M * n), want(M * n), xs(M * n);
        for (auto &v : x)
            v = frand() * 3.0f;
        for (auto &v : add)
            v = frand();
        for (auto &v : w)
            v = 1.0f + 0.1f * frand();
        for (int with_add = 0; with_add <= 1; with_add++) {
            xs = x;
            std::vector<float> sh(256);
            for (int m = 0; m < M; m++)
                run_block(256, [&](host_ctx &cx) {
                    ob_rmsnorm_row(cx, sh.data(), n, xs.data() + (size_t)m * n,
                                   with_add ? add.data() + (size_t)m * n : NULL, w.data(), 1e-6f,
                                   y.data() + (size_t)m * n);
                });
            std::vector<float> ref = x;
            if (with_add)
                for (int i = 0; i < M * n; i++)
                    ref[i] = x[i] + add[i];
            assert_memory_equal(xs.data(), ref.data(), (size_t)M * n * 4);
            k->rmsnorm(k, M, ref.data(), n, w.data(), n, 1e-6f, want.data(), n);
            for (int i = 0; i < M * n; i++)
                assert_true(fabsf(y[i] - want[i]) <= 2e-6f * (fabsf(want[i]) + 1e-6f));
        }
    }
    grpo_kernels_destroy(k);
}

/* RoPE (both pair layouts, an mscale, heads with a stride), SiLU-and-multiply and the embedding
 * of every dtype: the CPU ops' arithmetic, so the same bits. */
static void
elementwise_same_bits(void **state)
{
    (void)state;
    grpo_kernels *k = cpu();
    const int M = 4, nh = 3, hs = 40, dim = 32, ld = nh * hs + 5;
    std::vector<int32_t> pos = {0, 1, 17, 4095};
    std::vector<float> inv(dim / 2);
    for (int i = 0; i < dim / 2; i++)
        inv[i] = powf(10000.0f, -2.0f * i / dim);
    for (int il = 0; il <= 1; il++) {
        std::vector<float> x(M * ld), a, b;
        for (auto &v : x)
            v = frand();
        a = b = x;
        for (size_t t = 0; t < (size_t)M * nh * (dim / 2) + 7; t++) /* past the end: no-ops */
            ob_rope_elem(t, M, a.data(), ld, nh, hs, dim, pos.data(), inv.data(), 1.25f, il);
        k->rope(k, M, b.data(), ld, nh, hs, dim, pos.data(), inv.data(), 1.25f, il);
        assert_memory_equal(a.data(), b.data(), a.size() * 4);
    }
    const int n = 77;
    std::vector<float> g(M * n), u(M * n), y1(M * n), y2(M * n);
    for (int i = 0; i < M * n; i++)
        g[i] = 8.0f * frand(), u[i] = frand();
    for (size_t t = 0; t < (size_t)M * n; t++)
        ob_silu_elem(t, M, n, g.data(), n, u.data(), n, y1.data(), n);
    k->silu_mul(k, M, n, g.data(), n, u.data(), n, y2.data(), n);
    assert_memory_equal(y1.data(), y2.data(), y1.size() * 4);

    const int V = 300, C = 260; /* ragged FP8 blocks in both directions */
    std::vector<int32_t> tok = {0, 299, 128, 5};
    grpo_dtype dts[] = {GRPO_DT_F32, GRPO_DT_BF16, GRPO_DT_F16, GRPO_DT_F8E4M3};
    for (grpo_dtype dt : dts) {
        std::vector<uint8_t> data((size_t)V * C * grpo_dtype_size(dt));
        for (auto &v : data) {
            v = (uint8_t)(frand() * 127.0f + 128.0f);
            if (dt == GRPO_DT_F8E4M3 && (v & 0x7f) == 0x7f)
                v ^= 1; /* no NaN codes */
        }
        if (dt == GRPO_DT_F32)
            for (size_t i = 0; i < (size_t)V * C; i++) {
                float f = frand();
                memcpy(&data[i * 4], &f, 4);
            }
        if (dt == GRPO_DT_F16) /* finite halves: exponent below 31 */
            for (size_t i = 0; i < (size_t)V * C; i++)
                data[i * 2 + 1] &= 0xbb;
        std::vector<float> scale(3 * 3);
        for (size_t i = 0; i < scale.size(); i++)
            scale[i] = 0.001f * (float)(i + 1);
        grpo_kw w = {data.data(), dt,  V, C, dt == GRPO_DT_F8E4M3 ? scale.data() : NULL,
                     128,         128, 3, 0};
        cu_kw cw = cu_kw_of(&w);
        std::vector<float> e1(tok.size() * C), e2(tok.size() * C);
        for (size_t t = 0; t < tok.size() * C; t++)
            ob_embed_elem(t, (int)tok.size(), tok.data(), cw, e1.data(), C);
        k->embed(k, (int)tok.size(), tok.data(), &w, e2.data(), C);
        assert_memory_equal(e1.data(), e2.data(), e1.size() * 4);
    }
    grpo_kernels_destroy(k);
}

/* The router on random logits and biases over V3-like and ragged groupings: the CPU router's
 * experts, in the same order, and its weights within 1e-6. */
static void
router_matches_cpu(void **state)
{
    (void)state;
    grpo_kernels *k = cpu();
    struct {
        int E, n_group, topk_group, top_k, norm;
        float scale;
    } cases[] = {{256, 8, 4, 8, 1, 2.5f},
                 {64, 1, 1, 6, 1, 1.0f},
                 {32, 8, 4, 6, 0, 1.5f},
                 {384, 1, 1, 8, 1, 2.827f},
                 {16, 4, 2, 4, 1, 1.0f}};
    for (auto &c : cases) {
        const int M = 6;
        std::vector<float> l(M * c.E), bias(c.E), sc(c.E), ch(c.E), gs(256), w1(M * c.top_k),
            w2(M * c.top_k);
        std::vector<unsigned char> taken(c.E), gt(256);
        std::vector<int32_t> i1(M * c.top_k), i2(M * c.top_k);
        for (auto &v : l)
            v = 4.0f * frand();
        for (auto &v : bias)
            v = 0.5f * frand();
        for (int m = 0; m < M; m++)
            run_block(64, [&](host_ctx &cx) {
                ob_router_row(cx, l.data() + (size_t)m * c.E, c.E, bias.data(), c.n_group,
                              c.topk_group, c.top_k, c.norm, c.scale,
                              i1.data() + (size_t)m * c.top_k, w1.data() + (size_t)m * c.top_k,
                              sc.data(), ch.data(), taken.data(), gs.data(), gt.data());
            });
        k->router(k, M, l.data(), c.E, bias.data(), c.n_group, c.topk_group, c.top_k, c.norm,
                  c.scale, i2.data(), w2.data());
        assert_memory_equal(i1.data(), i2.data(), i1.size() * 4);
        for (size_t i = 0; i < w1.size(); i++)
            assert_true(fabsf(w1[i] - w2[i]) <= 1e-6f * fabsf(w2[i]));
    }
    grpo_kernels_destroy(k);
}

/* The softmax gates (ob_router_softmax_row) on random logits over Qwen3-MoE, DeepSeek-V2 (greedy
 * and group-limited) and ragged groupings: the forward's host route's experts and weights bit for
 * bit (the host's expf on both sides; the device's differs in the last bits). */
static void
router_softmax_matches_host(void **state)
{
    (void)state;
    struct {
        int E, n_group, topk_group, top_k, norm;
        float scale;
    } cases[] = {{128, 1, 1, 8, 1, 1.0f},
                 {160, 8, 3, 6, 0, 16.0f},
                 {64, 1, 1, 6, 0, 1.0f},
                 {60, 4, 2, 4, 1, 2.5f},
                 {1024, 1, 1, 8, 1, 1.0f}};
    for (auto &c : cases) {
        const int M = 5;
        std::vector<float> l(M * c.E), host, p(c.E), gs(256), w1(M * c.top_k), w2(M * c.top_k);
        std::vector<unsigned char> gt(256);
        std::vector<int32_t> i1(M * c.top_k), i2(M * c.top_k);
        for (auto &v : l)
            v = 6.0f * frand();
        float mx = 0.0f;
        for (int m = 0; m < M; m++)
            run_block(64, [&](host_ctx &cx) {
                ob_router_softmax_row(cx, l.data() + (size_t)m * c.E, c.E, c.n_group, c.topk_group,
                                      c.top_k, c.norm, c.scale, i1.data() + (size_t)m * c.top_k,
                                      w1.data() + (size_t)m * c.top_k, p.data(), &mx, gs.data(),
                                      gt.data());
            });
        host = l;
        grpo_model__route_softmax(M, host.data(), c.E, c.n_group, c.topk_group, c.top_k, c.norm,
                                  c.scale, i2.data(), w2.data());
        assert_memory_equal(i1.data(), i2.data(), i1.size() * 4);
        assert_memory_equal(w1.data(), w2.data(), w1.size() * 4);
    }
}

/* The MoE plan by a simulated block equals the host plan (plan.c) for batches with unused and
 * crowded experts; permute gathers each slot's token row; combine equals its definition (fmaf
 * over the token's slots in order), plain and accumulating. */
static void
moe_movement(void **state)
{
    (void)state;
    const int M = 9, top_k = 3, E = 48, n = 33; /* ids up to 45 */
    std::vector<int32_t> idx(M * top_k);
    for (int m = 0; m < M; m++) /* distinct per token, skewed towards low ids */
        for (int j = 0; j < top_k; j++)
            idx[m * top_k + j] = (int32_t)((m % 4) * 3 + j * (j + 1) + (m > 6 ? 30 : 0));
    std::vector<int32_t> cnt(E + 1), offs(E + 1), src(M * top_k), dst(M * top_k);
    int NT = (E + 1 + 31) / 32 * 32;
    run_block(NT, [&](host_ctx &cx) {
        ob_moe_plan(cx, M * top_k, E, idx.data(), cnt.data(), offs.data(), src.data(), dst.data());
    });
    grpo_moe_plan p;
    assert_int_equal(grpo_moe_plan_init(&p, M, top_k, E, idx.data()), GRPO_OK);
    assert_memory_equal(offs.data(), p.offs, (size_t)(E + 1) * 4);
    assert_memory_equal(src.data(), p.src, (size_t)M * top_k * 4);
    assert_memory_equal(dst.data(), p.dst, (size_t)M * top_k * 4);
    grpo_moe_plan_fini(&p);
    /* the op table's moe_sort in device mode (the plan, then each slot's token and weight)
     * against its host helper */
    std::vector<float> cw(M * top_k), slot_w(M * top_k), slot_w2(M * top_k);
    std::vector<int32_t> slot_tok(M * top_k), slot_tok2(M * top_k), offs2(E + 1);
    for (auto &v : cw)
        v = frand();
    for (int sl = 0; sl < M * top_k; sl++)
        ob_moe_slot_elem(sl, M * top_k, top_k, src.data(), cw.data(), slot_tok.data(),
                         slot_w.data());
    grpo_kernels host;
    memset(&host, 0, sizeof host);
    grpo_kernels_moe_sort(&host, M, top_k, E, idx.data(), cw.data(), offs2.data(), slot_tok2.data(),
                          slot_w2.data());
    assert_memory_equal(offs.data(), offs2.data(), (size_t)(E + 1) * 4);
    assert_memory_equal(slot_tok.data(), slot_tok2.data(), (size_t)M * top_k * 4);
    assert_memory_equal(slot_w.data(), slot_w2.data(), (size_t)M * top_k * 4);

    std::vector<float> x(M * (n + 2)), xp(M * top_k * n);
    for (auto &v : x)
        v = frand();
    for (size_t t = 0; t < xp.size(); t++)
        ob_moe_permute_elem(t, M * top_k, top_k, n, x.data(), n + 2, src.data(), xp.data());
    for (int r = 0; r < M * top_k; r++)
        assert_memory_equal(&xp[(size_t)r * n], &x[(size_t)(src[r] / top_k) * (n + 2)], n * 4);

    std::vector<float> wts(M * top_k), y(M * n), base(M * n);
    for (auto &v : wts)
        v = 0.5f + 0.5f * frand();
    for (auto &v : base)
        v = frand();
    for (int accumulate = 0; accumulate <= 1; accumulate++) {
        y = base;
        for (size_t t = 0; t < y.size(); t++)
            ob_moe_combine_elem(t, M, top_k, n, xp.data(), dst.data(), wts.data(), y.data(), n,
                                accumulate);
        for (int m = 0; m < M; m++)
            for (int c = 0; c < n; c++) {
                float acc = 0.0f;
                for (int s = 0; s < top_k; s++)
                    acc = fmaf(wts[m * top_k + s], xp[(size_t)dst[m * top_k + s] * n + c], acc);
                float want = accumulate ? base[m * n + c] + acc : acc;
                assert_memory_equal(&y[m * n + c], &want, 4);
                /* and the slot's row is the token's own input row */
                assert_memory_equal(&xp[(size_t)dst[m * top_k] * n + c], &x[m * (n + 2) + c], 4);
            }
    }
}

/* Cache rows in every format (kv_body.h, the bodies of kv_write and kv_read in device mode) against
 * the host helpers (kernels/kv_row.c): the same bytes, written to rows scattered over the cache
 * out of order; read back the same floats; F32 rows come back exactly. The FP8 rows are the MLA
 * layout scaled down (nq = 3/4 of n in blocks of 16, with a short last block); one row is all
 * zeros (scale 0). */
static void
kv_rows(int M, int n, int ld, std::vector<float> x, const std::vector<int32_t> &dst)
{
    grpo_kernels host;
    memset(&host, 0, sizeof host);
    for (int r = 0; r < n; r++)
        x[(size_t)1 * ld + r] = 0.0f;
    const grpo_dtype dts[3] = {GRPO_DT_F32, GRPO_DT_BF16, GRPO_DT_F8E4M3};
    for (int d = 0; d < 3; d++) {
        grpo_kv_fmt f = grpo_kv_fmt_make(dts[d], n, n * 3 / 4, 16);
        cu_kvf kf = cu_kvf_of(&f);
        size_t stride = ((size_t)f.bytes + 15) / 16 * 16 * 2;
        std::vector<uint8_t> cache((size_t)M * stride, 0xA5), c2 = cache;
        std::vector<float> back((size_t)M * ld, 0.0f), back2 = back;
        std::vector<uint8_t *> rows(M), rows2(M);
        for (int r = 0; r < M; r++)
            rows[r] = cache.data() + (size_t)dst[r] * stride,
            rows2[r] = c2.data() + (size_t)dst[r] * stride;
        for (size_t t = 0; t < (size_t)M * kb_units(kf); t++)
            kb_encode_unit(t, M, kf, x.data(), ld, rows.data(), 0);
        grpo_kernels_kv_write(&host, &f, M, x.data(), ld, (void *const *)rows2.data());
        assert_memory_equal(cache.data(), c2.data(), cache.size());
        for (size_t t = 0; t < (size_t)M * n; t++)
            kb_decode_elem(t, M, kf, rows.data(), back.data(), ld);
        grpo_kernels_kv_read(&host, &f, M, (const void *const *)rows2.data(), back2.data(), ld);
        assert_memory_equal(back.data(), back2.data(), back.size() * 4);
        if (dts[d] == GRPO_DT_F32)
            for (int r = 0; r < M; r++)
                assert_memory_equal(&back[(size_t)r * ld], &x[(size_t)r * ld], (size_t)n * 4);
        printf("    cache rows %s (%d bytes): the host helpers' bytes and values\n",
               grpo_dtype_name(dts[d]), f.bytes);
    }
}

/* The device-mode memory entries (residual add, row copies with and without indices, the MoE
 * combine, the cache rows of every format through pointer arrays) against the host helpers the
 * CPU backend runs (kernels/mem.c), bit for bit. */
static void
memory_entries(void **state)
{
    (void)state;
    grpo_kernels host;
    memset(&host, 0, sizeof host); /* every memory entry NULL: the host helpers */
    const int M = 13, n = 70, ld = 75, S = 40, T = 9;
    std::vector<float> x((size_t)M * ld), y0((size_t)M * ld), y1, y2;
    for (auto &v : x)
        v = frand();
    for (auto &v : y0)
        v = frand();
    y1 = y0, y2 = y0;
    for (size_t t = 0; t < (size_t)M * n; t++)
        ob_add_rows_elem(t, M, n, y1.data(), ld, x.data(), ld);
    grpo_kernels_add_rows(&host, M, n, y2.data(), ld, x.data(), ld);
    assert_memory_equal(y1.data(), y2.data(), y1.size() * 4);
    std::vector<int32_t> src(M), dst(M);
    for (int r = 0; r < M; r++)
        src[r] = (r * 5) % M, dst[r] = (r * 7 + 3) % M; /* permutations of the rows */
    for (int c = 0; c < 4; c++) {
        const int32_t *ps = c & 1 ? src.data() : NULL, *pd = c & 2 ? dst.data() : NULL;
        y1 = y0, y2 = y0;
        for (size_t t = 0; t < (size_t)M * n; t++)
            ob_copy_rows_elem(t, M, n, ps, x.data(), ld, pd, y1.data(), ld);
        grpo_kernels_copy_rows(&host, M, n, ps, x.data(), ld, pd, y2.data(), ld);
        assert_memory_equal(y1.data(), y2.data(), y1.size() * 4);
    }
    std::vector<int32_t> tok(S);
    std::vector<float> w(S), ys((size_t)S * ld), a0((size_t)T * n), a1, a2;
    for (int s = 0; s < S; s++)
        tok[s] = (s * 11) % T, w[s] = frand();
    for (auto &v : ys)
        v = frand() * 4.0f;
    for (auto &v : a0)
        v = frand();
    a1 = a0, a2 = a0;
    for (int c = 0; c < n; c++)
        ob_combine_rows_col(c, S, n, tok.data(), w.data(), ys.data(), ld, a1.data(), n);
    grpo_kernels_combine_rows(&host, S, n, tok.data(), w.data(), ys.data(), ld, a2.data(), n);
    assert_memory_equal(a1.data(), a2.data(), a1.size() * 4);
    kv_rows(M, n, ld, x, dst);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rmsnorm_rows),       cmocka_unit_test(elementwise_same_bits),
        cmocka_unit_test(router_matches_cpu), cmocka_unit_test(router_softmax_matches_host),
        cmocka_unit_test(moe_movement),       cmocka_unit_test(memory_entries),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
