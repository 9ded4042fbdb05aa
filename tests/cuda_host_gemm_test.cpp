/* The CUDA GEMM bodies (kernels/cuda/gemm_body.h: the tiled fp32-activation GEMM behind the
 * generic gemm, gemm_heads and gemm_t_heads, and the warp-per-column grouped expert GEMM) executed
 * on the host by POSIX threads (256 per tile with a barrier for __syncthreads; 32 per warp with
 * the xor butterfly replayed in order), against the CPU backend's GEMMs: F32/BF16/F16/FP8 weights,
 * ragged shapes, an FP8 row view, per-head forms, experts with 0..many rows, both weight paths of
 * the grouped GEMM. The tensor-core GEMM of the deterministic fast policy (kernels/cuda/tc_body.h)
 * the same way, its mma instructions emulated from the PTX ISA's fragment layouts, against the CPU
 * twin (act_round), with its activations prepared by tc_prep_k's own body; the activation
 * roundings of quant_body.h (FP8 quantization, BF16) bit for bit against the twin's. Runs in CI
 * without a device; the CUDA execution is in cuda_ops_test.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include <cmocka.h>
}

#include "kernels/cuda/gemm_body.h"
#include "kernels/cuda/plan.h"
#include "kernels/cuda/quant_body.h"
#include "kernels/cuda/tc_body.h"
#include "tests/cuda_host_mma.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

static uint64_t rng = 0xD1B54A32D192ED03ull;

static float
frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    float v = (float)((rng >> 40) / (double)(1 << 24)) * 2.0f - 1.0f;
    return v == 0.0f ? 0.5f : v;
}

struct weight {
    std::vector<uint8_t> data;
    std::vector<float> scale;
    grpo_kw kw;
};

static void
make_weight(weight &w, grpo_dtype dt, int rows, int cols)
{
    size_t n = (size_t)rows * cols, es = grpo_dtype_size(dt);
    w.data.resize(n * es);
    for (size_t i = 0; i < n; i++) {
        float v = frand();
        if (dt == GRPO_DT_F32) {
            float f = v * 0.1f;
            memcpy(&w.data[i * 4], &f, 4);
        } else if (dt == GRPO_DT_BF16 || dt == GRPO_DT_F16) {
            uint16_t h = dt == GRPO_DT_BF16 ? grpo_f32_to_bf16(v * 0.1f)
                                            : (uint16_t)(0x2c00 + (rng >> 50) % 0x800 + (v < 0) * 0x8000);
            memcpy(&w.data[i * 2], &h, 2);
        } else {
            uint8_t c = (uint8_t)(rng >> 33);
            w.data[i] = (c & 0x7f) == 0x7f ? 0x3e : c;
        }
    }
    memset(&w.kw, 0, sizeof w.kw);
    w.kw.data = w.data.data(), w.kw.dt = dt, w.kw.rows = rows, w.kw.cols = cols;
    if (dt == GRPO_DT_F8E4M3) {
        int sr = (rows + 127) / 128, sc = (cols + 127) / 128;
        w.scale.resize((size_t)sr * sc);
        for (auto &s : w.scale)
            s = (1.5f + frand()) * 1e-3f;
        w.kw.scale = w.scale.data(), w.kw.br = 128, w.kw.bc = 128, w.kw.scale_cols = sc;
    }
}

/* ---- the tiled GEMM: a grid of 256-thread blocks ---- */
struct tile_ctx {
    float *xs, *ws;
    int t;
    pthread_barrier_t *bar;
    int tid() const { return t; }
    void sync() { pthread_barrier_wait(bar); }
};

struct tile_launch {
    int M, N, K, H, ldx, xhs, wrs, trans, ldy, yhs;
    const float *x;
    cu_kw w;
    float *y, *xs, *ws;
    pthread_barrier_t bar;
};

struct tile_arg {
    tile_launch *L;
    int t;
};

static void *
tile_thread(void *p)
{
    tile_arg *a = (tile_arg *)p;
    tile_launch *L = a->L;
    tile_ctx cx = {L->xs, L->ws, a->t, &L->bar};
    int gx = (L->N + GB_BN - 1) / GB_BN, gy = (L->M + GB_BM - 1) / GB_BM;
    for (int z = 0; z < L->H; z++)
        for (int by = 0; by < gy; by++)
            for (int bx = 0; bx < gx; bx++)
                gemm_tile(cx, z, by, bx, L->M, L->N, L->K, L->x, L->ldx, L->xhs, L->w, L->wrs,
                          L->trans, L->y, L->ldy, L->yhs);
    return NULL;
}

static void
run_tiles(tile_launch &L)
{
    std::vector<float> xs(GB_BK * (GB_BM + 1)), ws(GB_BK * (GB_BN + 1));
    L.xs = xs.data(), L.ws = ws.data();
    pthread_barrier_init(&L.bar, NULL, 256);
    std::vector<pthread_t> th(256);
    std::vector<tile_arg> args(256);
    for (int t = 0; t < 256; t++) {
        args[t] = tile_arg{&L, t};
        assert_int_equal(pthread_create(&th[t], NULL, tile_thread, &args[t]), 0);
    }
    for (int t = 0; t < 256; t++)
        pthread_join(th[t], NULL);
    pthread_barrier_destroy(&L.bar);
}

static double
rel(const std::vector<float> &a, const std::vector<float> &b)
{
    double md = 0, mb = 0;
    for (size_t i = 0; i < a.size(); i++) {
        double d = fabs((double)a[i] - b[i]);
        md = d > md || isnan(d) ? d : md;
        mb = fabs((double)b[i]) > mb ? fabs((double)b[i]) : mb;
    }
    return md / mb;
}

static void
tiled_gemm_matches_cpu(void **state)
{
    (void)state;
    grpo_kernels *cpu = NULL;
    assert_int_equal(grpo_kernels_cpu_create(&cpu, 1), GRPO_OK);
    const int sh[][3] = {{1, 160, 256}, {7, 300, 200}, {70, 96, 130}};
    grpo_dtype dts[] = {GRPO_DT_F32, GRPO_DT_BF16, GRPO_DT_F16, GRPO_DT_F8E4M3};
    for (int d = 0; d < 4; d++)
        for (int s = 0; s < 3; s++) {
            int M = sh[s][0], N = sh[s][1], K = sh[s][2], r0 = dts[d] == GRPO_DT_F8E4M3 ? 64 : 0;
            weight w;
            make_weight(w, dts[d], N + r0, K);
            grpo_kw v = grpo_kw_rows(&w.kw, r0, N);
            int ldx = K + 3, ldy = N + 4;
            std::vector<float> x((size_t)M * ldx), y((size_t)M * ldy), ref;
            for (auto &e : x)
                e = frand();
            for (auto &e : y)
                e = frand();
            ref = y;
            cpu->gemm(cpu, M, x.data(), ldx, &v, ref.data(), ldy);
            tile_launch L;
            L.M = M, L.N = N, L.K = K, L.H = 1, L.ldx = ldx, L.xhs = 0, L.wrs = 0, L.trans = 0;
            L.ldy = ldy, L.yhs = 0, L.x = x.data(), L.w = cu_kw_of(&v), L.y = y.data();
            run_tiles(L);
            double r = rel(y, ref);
            printf("    gemm %s M=%d N=%d K=%d row0=%d: rel %.3g\n", grpo_dtype_name(dts[d]), M, N,
                   K, r0, r);
            assert_true(r <= 1e-5); /* padding columns included: they must be untouched */
        }
    /* per-head forms: W_UV (gemm_heads) and W_UK (gemm_t_heads) */
    for (int trans = 0; trans < 2; trans++) {
        int M = 5, H = 4, X = 128, Y = trans ? 512 : 128, wrs = trans ? X + 8 : Y + 8;
        weight w;
        make_weight(w, GRPO_DT_F8E4M3, H * wrs, trans ? Y : X);
        int xhs = X + 2, yhs = Y + 1, ldx = H * xhs + 3, ldy = H * yhs + 5;
        std::vector<float> x((size_t)M * ldx), y((size_t)M * ldy), ref;
        for (auto &e : x)
            e = frand();
        for (auto &e : y)
            e = frand();
        ref = y;
        if (trans)
            cpu->gemm_t_heads(cpu, M, H, x.data(), ldx, xhs, &w.kw, wrs, X, ref.data(), ldy, yhs);
        else
            cpu->gemm_heads(cpu, M, H, x.data(), ldx, xhs, &w.kw, wrs, Y, ref.data(), ldy, yhs);
        tile_launch L;
        L.M = M, L.N = Y, L.K = X, L.H = H, L.ldx = ldx, L.xhs = xhs, L.wrs = wrs, L.trans = trans;
        L.ldy = ldy, L.yhs = yhs, L.x = x.data(), L.w = cu_kw_of(&w.kw), L.y = y.data();
        run_tiles(L);
        double r = rel(y, ref);
        printf("    %s H=%d: rel %.3g\n", trans ? "gemm_t_heads" : "gemm_heads", H, r);
        assert_true(r <= 1e-5);
    }
    grpo_kernels_destroy(cpu);
}

/* ---- the grouped expert GEMM: one warp per (expert, column) ---- */
struct warp_ctx {
    int l;
    float *buf;
    pthread_barrier_t *bar;
    int lane() const { return l; }
    float warp_sum(float v)
    {
        for (int o = 16; o > 0; o >>= 1) {
            buf[l] = v;
            pthread_barrier_wait(bar);
            float other = buf[l ^ o];
            pthread_barrier_wait(bar);
            v += other;
        }
        return v;
    }
};

struct gemv_launch {
    int E, N, K, ldx, ldy;
    const float *x;
    const cu_kw *wg;
    const int32_t *offs;
    float *y, buf[32];
    pthread_barrier_t bar;
};

struct gemv_arg {
    gemv_launch *L;
    int l;
};

static void *
gemv_thread(void *p)
{
    gemv_arg *a = (gemv_arg *)p;
    gemv_launch *L = a->L;
    warp_ctx cx = {a->l, L->buf, &L->bar};
    for (int e = 0; e < L->E; e++)
        for (int n = 0; n < L->N; n++)
            gemv_column(cx, e, n, L->N, L->K, L->x, L->ldx, L->wg, L->offs, L->y, L->ldy);
    return NULL;
}

static void
grouped_gemm_matches_cpu(void **state)
{
    (void)state;
    grpo_kernels *cpu = NULL;
    assert_int_equal(grpo_kernels_cpu_create(&cpu, 1), GRPO_OK);
    for (int c = 0; c < 2; c++) {
        /* c = 0: FP8, K % 16 == 0 (16-byte path); c = 1: BF16 with K = 200 (element path) */
        int E = 6, N = 40, K = c ? 200 : 256;
        int32_t counts[6] = {3, 0, 1, 17, 8, 2}, offs[7] = {0};
        for (int e = 0; e < E; e++)
            offs[e + 1] = offs[e] + counts[e];
        int R = offs[E], ldx = K + 5, ldy = N + 3;
        std::vector<weight> w(E);
        std::vector<cu_kw> wg(E);
        for (int e = 0; e < E; e++) {
            make_weight(w[e], c ? GRPO_DT_BF16 : GRPO_DT_F8E4M3, N, K);
            wg[e] = cu_kw_of(&w[e].kw);
        }
        std::vector<float> x((size_t)R * ldx), y((size_t)R * ldy, 0.0f), ref((size_t)R * ldy, 0.0f);
        for (auto &v : x)
            v = frand();
        for (int e = 0; e < E; e++)
            if (counts[e] > 0)
                cpu->gemm(cpu, counts[e], &x[(size_t)offs[e] * ldx], ldx, &w[e].kw,
                          &ref[(size_t)offs[e] * ldy], ldy);
        gemv_launch L;
        L.E = E, L.N = N, L.K = K, L.ldx = ldx, L.ldy = ldy, L.x = x.data(), L.wg = wg.data();
        L.offs = offs, L.y = y.data();
        pthread_barrier_init(&L.bar, NULL, 32);
        std::vector<pthread_t> th(32);
        std::vector<gemv_arg> args(32);
        for (int l = 0; l < 32; l++) {
            args[l] = gemv_arg{&L, l};
            assert_int_equal(pthread_create(&th[l], NULL, gemv_thread, &args[l]), 0);
        }
        for (int l = 0; l < 32; l++)
            pthread_join(th[l], NULL);
        pthread_barrier_destroy(&L.bar);
        double r = rel(y, ref);
        printf("    grouped %s E=%d rows %d N=%d K=%d: rel %.3g\n", c ? "BF16" : "FP8", E, R, N, K, r);
        assert_true(r <= 1e-5);
    }
    grpo_kernels_destroy(cpu);
}

/* ---- the tensor-core GEMM: 32 threads per warp, mma emulated from the PTX layouts ---- */

/* One simulated thread of a tensor-core block (tests/cuda_host_mma.h) and the block's shared
 * reduction array (tc_block). */
struct tc_block_ctx : host_thread {
    float *red;
};

enum { TC_NT = TC_WARPS * 32 };

struct tc_launch {
    const tc_jobs *jobs;
    int E; /* experts of a grouped job */
    host_warp w[TC_WARPS];
    float red[TC_WARPS * TC_TILES * 4 * 32];
    pthread_barrier_t bar;
};

struct tc_arg {
    tc_launch *L;
    int t;
};

/* Every block of the launch in turn, as tc_gemm_k's grid would run them. */
static void *
tc_thread(void *p)
{
    tc_arg *g = (tc_arg *)p;
    tc_launch *L = g->L;
    tc_block_ctx cx;
    cx.t = g->t, cx.hw = L->w, cx.bar = &L->bar, cx.red = L->red;
    const tc_job &gj = L->jobs->j[0];
    if (gj.offs != NULL) { /* grouped: every expert, every token chunk in turn */
        for (int e = 0; e < L->E; e++) {
            tc_job jb = tc_expert(gj, e);
            for (int bx = 0; bx < tc_blocks_x(jb); bx++)
                for (int t0 = 0; t0 < jb.M; t0 += TC_TOK)
                    tc_block(cx, jb, bx, t0);
        }
        return NULL;
    }
    for (int j = 0; j < L->jobs->n; j++) {
        const tc_job &jb = L->jobs->j[j];
        for (int bx = 0; bx < tc_blocks_x(jb); bx++)
            for (int t0 = 0; t0 < jb.M; t0 += TC_TOK)
                tc_block(cx, jb, bx, t0);
    }
    return NULL;
}

static void
run_tc(const tc_jobs &jobs, int E = 0)
{
    tc_launch *L = new tc_launch;
    L->jobs = &jobs, L->E = E;
    pthread_barrier_init(&L->bar, NULL, TC_NT);
    for (int w = 0; w < TC_WARPS; w++)
        pthread_barrier_init(&L->w[w].bar, NULL, 32);
    std::vector<pthread_t> th(TC_NT);
    std::vector<tc_arg> args(TC_NT);
    for (int t = 0; t < TC_NT; t++) {
        args[t] = tc_arg{L, t};
        assert_int_equal(pthread_create(&th[t], NULL, tc_thread, &args[t]), 0);
    }
    for (int t = 0; t < TC_NT; t++)
        pthread_join(th[t], NULL);
    pthread_barrier_destroy(&L->bar);
    for (int w = 0; w < TC_WARPS; w++)
        pthread_barrier_destroy(&L->w[w].bar);
    delete L;
}

/* The prepared activations of one job as tc.cu's prep kernel makes them (the twin's roundings):
 * E4M3 bytes with scales qs[b * M + m] for an FP8 weight, BF16 for a BF16 one. */
struct tc_acts {
    std::vector<uint8_t> q;
    std::vector<float> qs;
};

/* Runs f(cx) on the 32 threads of one simulated warp (shuffles through its barrier). */
template <class F>
static void
run_warp(F f)
{
    host_warp *hw = new host_warp;
    pthread_barrier_t bar;
    pthread_barrier_init(&hw->bar, NULL, 32);
    pthread_barrier_init(&bar, NULL, 32);
    host_threads(32, [&](int t) {
        host_thread cx;
        cx.t = t, cx.hw = hw, cx.bar = &bar;
        f(cx);
    });
    pthread_barrier_destroy(&bar);
    pthread_barrier_destroy(&hw->bar);
    delete hw;
}

/* The prepared activations of one job made by tc_prep_k's body (quant_body.h qb_tc_prep) on a
 * simulated warp, every (row, block) in turn. */
static void
tc_prep_host(tc_acts &p, int fp8, int M, int K, const float *x, int ldx)
{
    int kbs = (K + 127) / 128;
    p.q.assign((size_t)M * K * (fp8 ? 1 : 2), 0);
    p.qs.assign((size_t)kbs * M, 0.0f);
    tc_job j;
    memset(&j, 0, sizeof j);
    j.q = p.q.data(), j.qs = p.qs.data(), j.x = x, j.ldx = ldx, j.M = M, j.ldq = K, j.qsld = M;
    j.prep = 1, j.w.dt = fp8 ? GRPO_DT_F8E4M3 : GRPO_DT_BF16, j.w.cols = K;
    run_warp([&](host_thread &cx) {
        for (int wi = 0; wi < M * kbs + 3; wi++) /* past the last: nothing */
            qb_tc_prep(cx, j, wi);
    });
}

/* ---- the activation roundings (quant_body.h) against the CPU twin ---- */

/* quant_k's, act_fp8_k's and tc_prep_k's bodies against grpo_act_fp8_round (bit for bit: the
 * E4M3 values times their scales, and each scale amax / 448 of its block), to_bf16_k's and
 * round_bf16_k's against grpo_f32_to_bf16; ragged K, row strides past K, all-zero blocks,
 * magnitudes from subnormal to 1e30, signed zeros. */
static void
quant_bodies_match_twin(void **state)
{
    (void)state;
    const int sh[][3] = {{5, 300, 311}, {3, 128, 128}, {2, 1000, 1000}, {1, 7, 9}, {6, 257, 260}};
    for (int s = 0; s < 5; s++) {
        int M = sh[s][0], K = sh[s][1], ldx = sh[s][2], kbs = (K + 127) / 128;
        std::vector<float> x((size_t)M * ldx);
        for (size_t i = 0; i < x.size(); i++) {
            float v = frand();
            int kind = (int)(i % 11);
            x[i] = kind == 0 ? v * 1e30f : kind == 1 ? v * 1e-40f : kind == 2 ? -0.0f : v;
        }
        if (K > 128) /* an all-zero block */
            for (int c = 128; c < 256 && c < K; c++)
                x[(size_t)(M - 1) * ldx + c] = c % 2 ? 0.0f : -0.0f;
        std::vector<float> ref((size_t)M * K), got((size_t)M * K, 7.0f);
        grpo_act_fp8_round(M, K, x.data(), ldx, ref.data());
        int64_t sld = grpo_cuda_ascale_ld(M);
        std::vector<uint8_t> q((size_t)M * K);
        std::vector<float> qs((size_t)kbs * sld, -1.0f);
        run_warp([&](host_thread &cx) {
            for (int m = 0; m < M; m++)
                for (int kb = 0; kb < kbs; kb++) {
                    const float *xr = &x[(size_t)m * ldx];
                    qb_quant(cx, xr, K, kb * 128, &q[(size_t)m * K], &qs[(size_t)kb * sld + m]);
                    qb_fp8_round(cx, xr, K, kb * 128, &got[(size_t)m * K]);
                }
        });
        assert_memory_equal(got.data(), ref.data(), got.size() * sizeof(float));
        for (int m = 0; m < M; m++)
            for (int kb = 0; kb < kbs; kb++) {
                float amax = 0.0f;
                for (int c = kb * 128; c < K && c < kb * 128 + 128; c++)
                    amax = fmaxf(amax, fabsf(x[(size_t)m * ldx + c]));
                float sc = qs[(size_t)kb * sld + m];
                assert_true(sc == (amax > 0.0f ? amax / 448.0f : 1.0f));
                for (int c = kb * 128; c < K && c < kb * 128 + 128; c++) {
                    float v = grpo_e4m3_to_f32(q[(size_t)m * K + c]) * sc;
                    assert_memory_equal(&v, &ref[(size_t)m * K + c], sizeof v);
                }
            }
        tc_acts p8, p16;
        tc_prep_host(p8, 1, M, K, x.data(), ldx);
        tc_prep_host(p16, 0, M, K, x.data(), ldx);
        assert_memory_equal(p8.q.data(), q.data(), q.size());
        for (int m = 0; m < M; m++)
            for (int kb = 0; kb < kbs; kb++)
                assert_true(p8.qs[(size_t)kb * M + m] == qs[(size_t)kb * sld + m]);
        std::vector<uint16_t> b16((size_t)M * K, 0x7777);
        std::vector<float> r16((size_t)M * K, 7.0f);
        for (size_t t = 0; t < (size_t)M * K + 40; t++) { /* past the end: nothing */
            qb_bf16_elem(t, M, K, x.data(), ldx, b16.data());
            qb_bf16_round_elem(t, M, K, x.data(), ldx, r16.data());
        }
        for (int m = 0; m < M; m++)
            for (int c = 0; c < K; c++) {
                size_t i = (size_t)m * K + c;
                uint16_t h = grpo_f32_to_bf16(x[(size_t)m * ldx + c]), ph;
                float f = grpo_bf16_to_f32(h);
                memcpy(&ph, &p16.q[i * 2], 2);
                assert_int_equal(b16[i], h);
                assert_int_equal(ph, h);
                assert_memory_equal(&r16[i], &f, sizeof f);
            }
        printf("    roundings M=%d K=%d ldx=%d: E4M3 and BF16 bit for bit\n", M, K, ldx);
    }
}

static tc_job
tc_job_of(const tc_acts &p, const grpo_kw &w, int M, float *y, int ldy)
{
    tc_job j;
    memset(&j, 0, sizeof j);
    j.q = p.q.data(), j.qs = p.qs.data(), j.y = y, j.w = cu_kw_of(&w);
    j.M = M, j.ldq = w.cols, j.qsld = M, j.ldy = ldy;
    return j;
}

/* Against the CPU twin (act_round: the same roundings, then the exact fp32 GEMM): FP8 weights with
 * whole and partial 128-column blocks, row views at 64 and at 8 (a warp's rows then straddle a
 * scale row), BF16 weights with a ragged last chunk; padding columns of y untouched. */
static void
tc_gemm_matches_twin(void **state)
{
    (void)state;
    grpo_kernels *cpu = NULL;
    assert_int_equal(grpo_kernels_cpu_create(&cpu, 1), GRPO_OK);
    cpu->act_round = 1;
    const int sh[][5] = {{1, 160, 256, 0, 1},  {37, 96, 384, 64, 1}, {5, 200, 96, 8, 1},
                         {33, 48, 1024, 0, 1}, {3, 72, 200, 0, 0},   {40, 24, 512, 16, 0}};
    for (int s = 0; s < 6; s++) {
        int M = sh[s][0], N = sh[s][1], K = sh[s][2], r0 = sh[s][3], fp8 = sh[s][4];
        weight w;
        make_weight(w, fp8 ? GRPO_DT_F8E4M3 : GRPO_DT_BF16, N + r0, K);
        grpo_kw v = grpo_kw_rows(&w.kw, r0, N);
        int ldx = K + 3, ldy = N + 4;
        std::vector<float> x((size_t)M * ldx), y((size_t)M * ldy), ref;
        for (auto &e : x)
            e = frand() * (1 + s);
        for (auto &e : y)
            e = frand();
        ref = y;
        cpu->gemm(cpu, M, x.data(), ldx, &v, ref.data(), ldy);
        tc_acts p;
        tc_prep_host(p, fp8, M, K, x.data(), ldx);
        tc_jobs jobs;
        jobs.n = 1;
        jobs.j[0] = tc_job_of(p, v, M, y.data(), ldy);
        run_tc(jobs);
        double r = rel(y, ref);
        printf("    tc %s M=%d N=%d K=%d row0=%d: rel %.3g\n", fp8 ? "FP8" : "BF16", M, N, K, r0,
               r);
        assert_true(r <= 1e-5);
    }
    grpo_kernels_destroy(cpu);
}

/* A token's outputs do not depend on its batch: rows computed among 37, alone, or as part of
 * another job of the same launch are bit-identical. */
static void
tc_gemm_rows_batch_invariant(void **state)
{
    (void)state;
    int M = 37, N = 96, K = 384, ldx = K, ldy = N;
    weight w, wb;
    make_weight(w, GRPO_DT_F8E4M3, N, K);
    make_weight(wb, GRPO_DT_BF16, 40, 128);
    std::vector<float> x((size_t)M * ldx), xb(5 * 128);
    for (auto &e : x)
        e = frand();
    for (auto &e : xb)
        e = frand();
    std::vector<float> all((size_t)M * ldy), one(ldy), part((size_t)10 * ldy), yb(5 * 40);
    tc_acts pa, p1, pp, pb;
    tc_prep_host(pa, 1, M, K, x.data(), ldx);
    tc_prep_host(p1, 1, 1, K, &x[(size_t)20 * ldx], ldx);
    tc_prep_host(pp, 1, 10, K, &x[(size_t)3 * ldx], ldx);
    tc_prep_host(pb, 0, 5, 128, xb.data(), 128);
    tc_jobs jobs;
    jobs.n = 1;
    jobs.j[0] = tc_job_of(pa, w.kw, M, all.data(), ldy);
    run_tc(jobs);
    jobs.n = 3; /* one launch: the row alone, rows 3..12, and an unrelated BF16 job */
    jobs.j[0] = tc_job_of(p1, w.kw, 1, one.data(), ldy);
    jobs.j[1] = tc_job_of(pb, wb.kw, 5, yb.data(), 40);
    jobs.j[2] = tc_job_of(pp, w.kw, 10, part.data(), ldy);
    run_tc(jobs);
    assert_memory_equal(one.data(), &all[(size_t)20 * ldy], (size_t)ldy * sizeof(float));
    assert_memory_equal(part.data(), &all[(size_t)3 * ldy], (size_t)10 * ldy * sizeof(float));
}

/* The grouped form (the MoE experts with device offsets, grpo_cuda_moe_gemm_tc): expert rows
 * (0 to 40, so one expert takes two token chunks) of one prepared matrix against each expert's
 * rows as its own job (bit for bit) and the twin (1e-5). */
static void
tc_gemm_grouped_matches_single(void **state)
{
    (void)state;
    grpo_kernels *cpu = NULL;
    assert_int_equal(grpo_kernels_cpu_create(&cpu, 1), GRPO_OK);
    cpu->act_round = 1;
    enum { E = 6 };
    int N = 48, K = 256;
    int32_t counts[E] = {3, 0, 1, 40, 8, 2}, offs[E + 1] = {0};
    for (int e = 0; e < E; e++)
        offs[e + 1] = offs[e] + counts[e];
    int R = offs[E];
    weight w;
    make_weight(w, GRPO_DT_F8E4M3, E * N, K);
    std::vector<cu_kw> tab(E);
    std::vector<grpo_kw> views(E);
    for (int e = 0; e < E; e++)
        views[e] = grpo_kw_rows(&w.kw, e * N, N), tab[e] = cu_kw_of(&views[e]);
    std::vector<float> x((size_t)R * K), y((size_t)R * N, 0.0f), one((size_t)R * N, 0.0f),
        ref((size_t)R * N, 0.0f);
    for (auto &v : x)
        v = frand();
    tc_acts p;
    tc_prep_host(p, 1, R, K, x.data(), K);
    tc_jobs g;
    g.n = 1;
    g.j[0] = tc_job_of(p, views[0], R, y.data(), N);
    g.j[0].offs = offs, g.j[0].wtab = tab.data();
    run_tc(g, E);
    for (int e = 0; e < E; e++) {
        if (counts[e] == 0)
            continue;
        tc_acts pe;
        tc_prep_host(pe, 1, counts[e], K, &x[(size_t)offs[e] * K], K);
        tc_jobs s;
        s.n = 1;
        s.j[0] = tc_job_of(pe, views[e], counts[e], &one[(size_t)offs[e] * N], N);
        run_tc(s);
        cpu->gemm(cpu, counts[e], &x[(size_t)offs[e] * K], K, &views[e], &ref[(size_t)offs[e] * N],
                  N);
    }
    assert_memory_equal(y.data(), one.data(), y.size() * sizeof(float));
    double r = rel(y, ref);
    printf("    tc grouped FP8 E=%d rows %d N=%d K=%d: rel %.3g, = the experts one by one\n", E, R,
           N, K, r);
    assert_true(r <= 1e-5);
    grpo_kernels_destroy(cpu);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(tiled_gemm_matches_cpu),
                                       cmocka_unit_test(grouped_gemm_matches_cpu),
                                       cmocka_unit_test(tc_gemm_matches_twin),
                                       cmocka_unit_test(tc_gemm_rows_batch_invariant),
                                       cmocka_unit_test(tc_gemm_grouped_matches_single),
                                       cmocka_unit_test(quant_bodies_match_twin)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
