/* The absorbed-MLA decode block and split combine (kernels/cuda/mla_body.h, the code the CUDA
 * kernels run) executed on the host: 256 POSIX threads per block, a barrier for __syncthreads, one
 * barrier per warp for __syncwarp, the shuffle butterflies replayed through shared arrays in the
 * same order. Against the CPU backend's mla_absorbed on random inputs: sequences sharing prompt
 * pages, lengths from 1 to several 512-position splits, head counts that are and are not multiples
 * of the 16-head group, the V3 widths (512 + 64). The tensor-core decode block likewise, and the
 * naive prefill block against the CPU's mla_naive. Runs in CI without a device; checks the
 * kernels' indexing, online softmax and combine, not the CUDA execution
 * (tests/gpu/cuda_ops_test.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include <cmocka.h>
}

#include "kernels/cuda/gqa_body.h"
#include "kernels/cuda/mla_body.h"
#include "kernels/cuda/mla_tc_body.h"
#include "kernels/cuda/plan.h"
#include "tests/cuda_host_mma.h"
extern "C" {
#include "kernels/kernels.h"
}

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <vector>

/* The tensor-core block against its BF16-input reference (relative to the largest output). */
#define TC_TOL 4e-3

struct hctx {
    float *smem, *wbuf;
    int t;
    pthread_barrier_t *bar, *wbar;
    int tid() const { return t; }
    void sync() { pthread_barrier_wait(bar); }
    void syncwarp() { pthread_barrier_wait(&wbar[t / 32]); }
    float butterfly(float v, int is_max)
    {
        float *buf = wbuf + (t / 32) * 32;
        int lane = t % 32;
        for (int o = 16; o > 0; o >>= 1) {
            buf[lane] = v;
            syncwarp();
            float other = buf[lane ^ o];
            syncwarp();
            v = is_max ? fmaxf(v, other) : v + other;
        }
        return v;
    }
    float warp_max(float v) { return butterfly(v, 1); }
    float warp_sum(float v) { return butterfly(v, 0); }
};

struct launch {
    int B, H, dc, dr, max_pages, page_len, chunk, nsm;
    cu_kvf kf;
    const float *ql, *qr;
    const uint8_t *const *ptab;
    const int32_t *len;
    float scale, *part;
    float *smem, *wbuf;
    pthread_barrier_t bar, wbar[MLA_NT / 32];
};

struct thr {
    launch *L;
    int t;
};

static void *
block_thread(void *p)
{
    thr *th = (thr *)p;
    launch *L = th->L;
    hctx cx = {L->smem, L->wbuf, th->t, &L->bar, L->wbar};
    int groups = (L->H + MLA_HG - 1) / MLA_HG;
    for (int b = 0; b < L->B; b++)
        for (int g = 0; g < groups; g++)
            for (int sp = 0; sp < L->nsm; sp++) {
                mla_decode_block(cx, b, g, sp, L->H, L->dc, L->dr, L->ql, L->qr, L->ptab,
                                 L->max_pages, L->len, L->page_len, L->kf, 0, L->scale, L->chunk,
                                 L->nsm, L->part);
                cx.sync(); /* the next block reuses the shared memory */
            }
    return NULL;
}

/* L's decode by the fp32 block, 256 threads. */
static void
run_fp32_blocks(launch *L)
{
    pthread_barrier_init(&L->bar, NULL, MLA_NT);
    for (int w = 0; w < MLA_NT / 32; w++)
        pthread_barrier_init(&L->wbar[w], NULL, 32);
    std::vector<pthread_t> th(MLA_NT);
    std::vector<thr> args(MLA_NT);
    for (int t = 0; t < MLA_NT; t++) {
        args[t] = thr{L, t};
        assert_int_equal(pthread_create(&th[t], NULL, block_thread, &args[t]), 0);
    }
    for (int t = 0; t < MLA_NT; t++)
        pthread_join(th[t], NULL);
    pthread_barrier_destroy(&L->bar);
    for (int w = 0; w < MLA_NT / 32; w++)
        pthread_barrier_destroy(&L->wbar[w]);
}

/* ---- the tensor-core block (mla_tc_body.h): 64 threads per head tile, the mma and shuffles
 * emulated per warp (tests/cuda_host_mma.h), asynchronous copies done at once ---- */
struct tc_ctx : host_thread {
    uint8_t *smem;
    int n;
    int tid() const
    {
        return t;
    }
    int nt() const
    {
        return n;
    }
    void cp_async(uint8_t *dst, const uint8_t *src, int bytes)
    {
        assert_true((bytes == 4 || bytes == 16) && (uintptr_t)dst % bytes == 0 &&
                    (uintptr_t)src % bytes == 0);
        memcpy(dst, src, (size_t)bytes);
    }
    void ldsm(uint32_t r[4], const uint8_t *p)
    {
        assert_true((uintptr_t)p % 16 == 0); /* ldmatrix rows are 16-byte aligned */
        host_thread::ldsm(r, p);
    }
    void ldsm_t(uint32_t r[4], const uint8_t *p)
    {
        assert_true((uintptr_t)p % 16 == 0);
        host_thread::ldsm_t(r, p);
    }
    void cp_wait() {}
};

struct tc_launch {
    launch *L;
    int nt;
    uint8_t *smem;
    host_warp hw[2 * MTC_MAXT];
    pthread_barrier_t bar;
};

struct tc_thr {
    tc_launch *T;
    int t;
};

static void *
tc_block_thread(void *p)
{
    tc_thr *th = (tc_thr *)p;
    tc_launch *T = th->T;
    launch *L = T->L;
    tc_ctx cx;
    cx.t = th->t, cx.hw = T->hw, cx.bar = &T->bar, cx.smem = T->smem, cx.n = T->nt;
    int groups = (L->H + MTC_HT * mtc_tiles(L->H) - 1) / (MTC_HT * mtc_tiles(L->H));
    for (int b = 0; b < L->B; b++)
        for (int g = 0; g < groups; g++)
            for (int sp = 0; sp < L->nsm; sp++) {
                mla_tc_block(cx, b, g, sp, L->H, L->dc, L->dr, L->ql, L->qr, L->ptab, L->max_pages,
                             L->len, L->page_len, L->kf, 0, L->scale, L->chunk, L->nsm, L->part);
                cx.sync(); /* the next block reuses the shared memory */
            }
    return NULL;
}

/* L's decode by the tensor-core block, every block of the grid in turn. */
static void
run_tc_blocks(launch *L)
{
    tc_launch *T = new tc_launch;
    T->L = L, T->nt = 64 * mtc_tiles(L->H);
    size_t bytes = mtc_smem_bytes(L->H, L->dc, L->dr, L->kf);
    T->smem = (uint8_t *)aligned_alloc(128, (bytes + 127) / 128 * 128);
    memset(T->smem, 0xFF, bytes); /* NaN everywhere: what is read before it is written shows */
    pthread_barrier_init(&T->bar, NULL, (unsigned)T->nt);
    for (int w = 0; w < T->nt / 32; w++)
        pthread_barrier_init(&T->hw[w].bar, NULL, 32);
    std::vector<pthread_t> th(T->nt);
    std::vector<tc_thr> args(T->nt);
    for (int t = 0; t < T->nt; t++) {
        args[t] = tc_thr{T, t};
        assert_int_equal(pthread_create(&th[t], NULL, tc_block_thread, &args[t]), 0);
    }
    for (int t = 0; t < T->nt; t++)
        pthread_join(th[t], NULL);
    pthread_barrier_destroy(&T->bar);
    for (int w = 0; w < T->nt / 32; w++)
        pthread_barrier_destroy(&T->hw[w].bar);
    free(T->smem);
    delete T;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static float
frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    float v = (float)((rng >> 40) / (double)(1 << 24)) * 2.0f - 1.0f;
    return v == 0.0f ? 0.5f : v;
}

/* dt: the cache rows' format (F32, BF16, or FP8 with the latent in 128-blocks of E4M3). */
/* The tensor-core block's inputs in double: the queries and the cache values rounded to BF16 as
 * the block rounds them, an exact softmax; out (B, H, dc). */
static void
bf16_reference(int B, int H, int dc, int dr, const float *ql, const float *qr,
               const std::vector<const uint8_t *> &ptab, int tabp, const int32_t *len,
               const grpo_kv_fmt &fmt, float scale, std::vector<double> &out)
{
    int row = dc + dr;
    std::vector<float> v(row);
    out.assign((size_t)B * H * dc, 0.0);
    for (int b = 0; b < B; b++) {
        int L = len[b];
        std::vector<double> kv((size_t)(L > 0 ? L : 1) * row), sc(L > 0 ? L : 1);
        for (int j = 0; j < L; j++) {
            grpo_kv_row_decode(&fmt,
                               ptab[(size_t)b * tabp + j / 64] + (size_t)(j % 64) * 2 * fmt.bytes,
                               0, row, v.data());
            for (int d = 0; d < row; d++)
                kv[(size_t)j * row + d] = grpo_bf16_to_f32(grpo_f32_to_bf16(v[d]));
        }
        for (int h = 0; h < H && L > 0; h++) {
            size_t hq = (size_t)b * H + h;
            double mx = -INFINITY, l = 0;
            for (int j = 0; j < L; j++) {
                double a = 0;
                for (int d = 0; d < row; d++) {
                    float q = d < dc ? ql[hq * dc + d] : qr[hq * dr + d - dc];
                    a += (double)grpo_bf16_to_f32(grpo_f32_to_bf16(q)) * kv[(size_t)j * row + d];
                }
                sc[j] = a * scale;
                mx = sc[j] > mx ? sc[j] : mx;
            }
            for (int j = 0; j < L; j++)
                l += sc[j] = exp(sc[j] - mx);
            for (int d = 0; d < dc; d++) {
                double o = 0;
                for (int j = 0; j < L; j++)
                    o += sc[j] * kv[(size_t)j * row + d];
                out[hq * dc + d] = o / l;
            }
        }
    }
}

/* tc: the tensor-core block (mla_tc_body.h) instead of the fp32 one; its result is held against
 * the BF16-input reference (the remaining error: P in BF16, fp32 sums) and reported against the
 * CPU attention. */
static void
run_case(int B, int H, int dc, int dr, const int32_t *len, int cap, grpo_dtype dt = GRPO_DT_F32,
         int tc = 0)
{
    int row = dc + dr, maxp = 1, page_len = 64;
    for (int b = 0; b < B; b++)
        maxp = (len[b] + 63) / 64 > maxp ? (len[b] + 63) / 64 : maxp;
    /* the table is as wide as the capacity; pages past the live lengths are never read */
    int tabp = cap > 0 ? (cap + 63) / 64 : maxp;
    /* page pool; every sequence's first two pages are the shared prompt's; layer 1 of 2: a row
     * holds two layers' rows of fmt.bytes, the pages point at the second */
    grpo_kv_fmt fmt = grpo_kv_fmt_make(dt, row, dc, 128), f2 = fmt;
    f2.bytes = 2 * fmt.bytes; /* the rows as the attention steps over them */
    std::vector<std::vector<uint8_t>> pool((size_t)B * maxp,
                                           std::vector<uint8_t>((size_t)64 * f2.bytes));
    std::vector<float> v(row);
    for (auto &pg : pool)
        for (int j = 0; j < 2 * 64; j++) {
            for (auto &e : v)
                e = frand();
            grpo_kv_row_encode(&fmt, v.data(), pg.data() + (size_t)j * fmt.bytes);
        }
    std::vector<const uint8_t *> ptab((size_t)B * tabp);
    std::vector<const void *const *> pages_of(B);
    for (int b = 0; b < B; b++) {
        for (int i = 0; i < tabp; i++)
            ptab[(size_t)b * tabp + i] =
                i < maxp ? pool[i < 2 ? i : (size_t)b * maxp + i].data() + fmt.bytes : NULL;
        pages_of[b] = (const void *const *)&ptab[(size_t)b * tabp];
    }
    std::vector<float> ql((size_t)B * H * dc), qr((size_t)B * H * dr);
    for (auto &v : ql)
        v = frand();
    for (auto &v : qr)
        v = frand();
    float scale = 0.1352338f;
    std::vector<float> ref((size_t)B * H * dc), out((size_t)B * H * dc, NAN);
    grpo_kernels *cpu = NULL;
    assert_int_equal(grpo_kernels_cpu_create(&cpu, 1), GRPO_OK);
    cpu->mla_absorbed(cpu, B, H, dc, dr, ql.data(), qr.data(), pages_of.data(), len, page_len, &f2,
                      scale, ref.data());
    grpo_kernels_destroy(cpu);

    launch L;
    L.B = B, L.H = H, L.dc = dc, L.dr = dr, L.max_pages = tabp, L.page_len = page_len;
    L.kf = cu_kvf_of(&f2), L.chunk = grpo_cuda_mla_chunk(0), L.nsm = 1;
    for (int b = 0; b < B; b++)
        L.nsm = grpo_cuda_mla_nsplit(len[b]) > L.nsm ? grpo_cuda_mla_nsplit(len[b]) : L.nsm;
    if (cap > 0) { /* captured: the plan frozen from the capacity, not from these lengths */
        grpo_cuda_mla_plan pl = grpo_cuda_mla_plan_for(cap);
        L.chunk = pl.chunk, L.nsm = pl.nsm;
    }
    L.ql = ql.data(), L.qr = qr.data(), L.ptab = ptab.data(), L.len = len, L.scale = scale;
    std::vector<float> part((size_t)B * H * L.nsm * (2 + dc), NAN);
    std::vector<float> smem((size_t)mla_decode_smem_floats(dc, dr)), wbuf(MLA_NT);
    L.part = part.data(), L.smem = smem.data(), L.wbuf = wbuf.data();
    if (tc)
        run_tc_blocks(&L);
    else
        run_fp32_blocks(&L);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            mla_combine_one(0, 1, b, h, H, dc, len, L.chunk, L.nsm, part.data(), out.data());
    double md = 0, mr = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        double d = fabs((double)out[i] - ref[i]);
        md = d > md || isnan(d) ? d : md;
        mr = fabs((double)ref[i]) > mr ? fabs((double)ref[i]) : mr;
    }
    if (!tc) {
        printf(
            "    %s rows, B=%d H=%d dc=%d dr=%d cap=%d chunk=%d splits=%d: max |gpu body - cpu| / "
            "max |cpu| = %.3g\n",
            grpo_dtype_name(dt), B, H, dc, dr, cap, L.chunk, L.nsm, md / mr);
        assert_true(md / mr <= 2e-5);
        return;
    }
    std::vector<double> r16;
    bf16_reference(B, H, dc, dr, ql.data(), qr.data(), ptab, tabp, len, fmt, scale, r16);
    double m16 = 0;
    for (size_t i = 0; i < r16.size(); i++) {
        double d = fabs((double)out[i] - r16[i]);
        m16 = d > m16 || isnan(d) ? d : m16;
    }
    printf(
        "    tensor cores, %s rows, B=%d H=%d dc=%d dr=%d cap=%d splits=%d: max |body - bf16-input "
        "ref| / max |ref| = %.3g; against the fp32 CPU %.3g\n",
        grpo_dtype_name(dt), B, H, dc, dr, cap, L.nsm, m16 / mr, md / mr);
    assert_true(m16 / mr <= TC_TOL);
    assert_true(md / mr <= 2e-2);
}

static void
decode_matches_cpu(void **state)
{
    (void)state;
    const int32_t a[] = {1, 65, 600, 1100};
    run_case(4, 20, 64, 16, a, 0); /* 2 head groups, the second partial; up to 3 splits */
    const int32_t c[] = {70, 513};
    run_case(2, 16, 512, 64, c, 0); /* V3 widths, a split boundary at 512 */
    const int32_t d[] = {0, 3};
    run_case(2, 5, 32, 8, d, 0); /* an empty sequence gives zeros, as the CPU */
    /* the latent cache in BF16 and in FP8 (FlashMLA's 656-byte row at V3 widths; a short last
     * scale block at dc = 200), converted as the tiles are loaded */
    run_case(2, 16, 512, 64, c, 0, GRPO_DT_BF16);
    run_case(2, 16, 512, 64, c, 0, GRPO_DT_F8E4M3);
    const int32_t e[] = {5, 130, 700};
    run_case(3, 20, 200, 16, e, 0, GRPO_DT_F8E4M3);
}

/* The tensor-core block (the fast policies over a BF16 or FP8 cache) against the double-precision
 * attention over its BF16-rounded inputs: head counts of 1 to 4 head tiles per block (a partial
 * one, two blocks of heads at 128), latent and rope widths that are not multiples of 16 (zero
 * pads), an empty sequence, split boundaries, rows copied by 16 or by 4 bytes (FP8 rows of 100),
 * F32 rows rounded as they are loaded, and a plan frozen from a capacity. */
static void
tc_decode_matches_reference(void **state)
{
    (void)state;
    const int32_t a[] = {1, 65, 600, 1100};
    run_case(4, 20, 64, 16, a, 0, GRPO_DT_BF16, 1);
    run_case(4, 20, 64, 16, a, 0, GRPO_DT_F8E4M3, 1); /* rows of 100 bytes */
    const int32_t c[] = {70, 513};
    run_case(2, 16, 512, 64, c, 0, GRPO_DT_BF16, 1);
    run_case(2, 16, 512, 64, c, 0, GRPO_DT_F8E4M3, 1);
    const int32_t d[] = {0, 3};
    run_case(2, 5, 32, 8, d, 0, GRPO_DT_BF16, 1);
    const int32_t e[] = {5, 130, 700};
    run_case(3, 20, 200, 16, e, 0, GRPO_DT_F8E4M3, 1);
    run_case(3, 36, 40, 24, e, 0, GRPO_DT_F32, 1);
    const int32_t f[] = {97};
    run_case(1, 128, 512, 64, f, 0, GRPO_DT_BF16, 1);
    run_case(4, 20, 64, 16, a, 2048, GRPO_DT_BF16, 1);
}

/* A captured decode replayed at other lengths: the grid and the combine use the plan made from
 * the capacity, whatever the live lengths (here far shorter, and different from the ones a
 * capture would have seen); past the clamp the chunk grows and the result still matches. */
static void
captured_plan_matches_cpu(void **state)
{
    (void)state;
    const int32_t a[] = {1, 513, 1100, 2048};
    run_case(4, 20, 64, 16, a, 2048); /* chunk 512, 4 splits frozen; lengths 1 .. cap */
    const int32_t b[] = {0, 577, 1300};
    run_case(3, 16, 32, 8, b, 40000); /* clamped: 64 splits of 640 positions */
}

/* The combine reads no partial its grid did not write: with nsm = 2 frozen and a length that
 * would need 5 chunks, the unwritten slots (NaN here, as on a device they hold another head's
 * partials or garbage) are never touched. */
static void
combine_reads_only_frozen_splits(void **state)
{
    (void)state;
    const int H = 2, dc = 3, nsm = 2, chunk = 64;
    const int32_t len[] = {300};
    std::vector<float> part((size_t)H * nsm * (2 + dc), NAN), ol((size_t)H * dc, NAN);
    for (int h = 0; h < H; h++)
        for (int s = 0; s < nsm; s++) {
            float *pp = &part[((size_t)h * nsm + s) * (2 + dc)];
            pp[0] = 0.5f * (float)s, pp[1] = 2.0f;
            for (int d = 0; d < dc; d++)
                pp[2 + d] = (float)(d + 1) * (s ? 3.0f : 1.0f);
        }
    part[(size_t)1 * nsm * (2 + dc)] = NAN; /* head 1's first split: must reach only head 1 */
    mla_combine_one(0, 1, 0, 0, H, dc, len, chunk, nsm, part.data(), ol.data());
    /* head 0: M = 0.5, l = 2 e^-0.5 + 2, out_d = ((d+1) e^-0.5 + 3 (d+1)) / l */
    double e = exp(-0.5), l = 2 * e + 2;
    for (int d = 0; d < dc; d++)
        assert_float_equal(ol[d], ((d + 1) * e + 3.0 * (d + 1)) / l, 1e-6);
}

/* ---- the naive prefill block (mla_naive_block): 256 threads, every (query, head) in turn ---- */

struct naive_launch {
    int n, pos0, H, dn, dr, dv, page_len, kr_stride, kr_off;
    const float *q, *kvb;
    const float *const *pages;
    float scale, *out;
    float sh[MLA_NAIVE_SMEM];
    pthread_barrier_t bar;
};

/* Against the CPU backend's mla_naive on random inputs: chunks starting at 0 and past a page, one
 * that crosses the 256-position tile (the online softmax's rescale), the V3 widths (128 + 64,
 * 128), rope keys at an offset into cache rows of another stride; shared memory pre-filled with
 * NaN. */
static void
naive_matches_cpu(void **state)
{
    (void)state;
    grpo_kernels *cpu = NULL;
    assert_int_equal(grpo_kernels_cpu_create(&cpu, 1), GRPO_OK);
    const int cs[][6] = {/* n, pos0, H, dn, dr, dv */
                         {5, 0, 3, 16, 8, 12},
                         {4, 70, 2, 24, 8, 40},
                         {3, 300, 2, 16, 16, 16},
                         {2, 130, 2, 128, 64, 128},
                         {1, 511, 1, 8, 4, 256}};
    for (int c = 0; c < 5; c++) {
        int n = cs[c][0], pos0 = cs[c][1], H = cs[c][2], dn = cs[c][3], dr = cs[c][4];
        int dv = cs[c][5], P = pos0 + n, page_len = 64, kr_stride = dr + 37, kr_off = 29;
        std::vector<float> q((size_t)n * H * (dn + dr)), kvb((size_t)P * H * (dn + dv));
        for (auto &v : q)
            v = frand();
        for (auto &v : kvb)
            v = frand();
        int np = (P + page_len - 1) / page_len;
        std::vector<std::vector<float>> pg(np, std::vector<float>((size_t)page_len * kr_stride));
        std::vector<const float *> pages(np);
        for (int i = 0; i < np; i++) {
            for (auto &v : pg[i])
                v = frand();
            pages[i] = pg[np - 1 - i].data(); /* pages in no particular order */
        }
        float scale = 1.0f / sqrtf((float)(dn + dr));
        std::vector<float> ref((size_t)n * H * dv), got((size_t)n * H * dv, 7.0f);
        cpu->mla_naive(cpu, n, pos0, H, dn, dr, dv, q.data(), kvb.data(), pages.data(), page_len,
                       kr_stride, kr_off, scale, ref.data());
        naive_launch *L = new naive_launch;
        L->n = n, L->pos0 = pos0, L->H = H, L->dn = dn, L->dr = dr, L->dv = dv;
        L->page_len = page_len, L->kr_stride = kr_stride, L->kr_off = kr_off;
        L->q = q.data(), L->kvb = kvb.data(), L->pages = pages.data(), L->scale = scale;
        L->out = got.data();
        for (float &v : L->sh)
            v = NAN;
        pthread_barrier_init(&L->bar, NULL, MLA_NT);
        host_threads(MLA_NT, [L](int t) {
            hctx cx = {NULL, NULL, t, &L->bar, NULL};
            for (int i = 0; i < L->n; i++)
                for (int h = 0; h < L->H; h++) {
                    mla_naive_block(cx, i, h, L->pos0, L->H, L->dn, L->dr, L->dv, L->q, L->kvb,
                                    L->pages, L->page_len, L->kr_stride, L->kr_off, L->scale,
                                    L->out, L->sh);
                    cx.sync(); /* the next block reuses the shared memory */
                }
        });
        pthread_barrier_destroy(&L->bar);
        delete L;
        double worst = 0, big = 0;
        for (size_t i = 0; i < ref.size(); i++) {
            worst = fmax(worst, fabs((double)got[i] - ref[i]));
            big = fmax(big, fabs((double)ref[i]));
        }
        printf("    naive n=%d pos0=%d H=%d dn=%d dr=%d dv=%d: worst %.3g of max %.3g\n", n, pos0,
               H, dn, dr, dv, worst, big);
        assert_true(worst <= 1e-5 * big);
    }
    grpo_kernels_destroy(cpu);
}

/* ---- grouped-query attention (gqa_body.h gqa_block): 256 threads per (row, head) ---- */

/* Against the CPU backend's gqa_attn: items of prefill chunks and single decode tokens in one
 * batch (a chunk from position 0, one crossing a page, a token past the 256-position tile), GQA,
 * MQA and MHA head groupings (groups of 1 to 12 query heads: one and two blocks per KV head),
 * head dims 16 to 128, F32/BF16/FP8 cache rows (the GQA layouts:
 * keys then values, E4M3 in blocks of d), pages in no particular order, shared memory pre-filled
 * with NaN; the decode form over per-row tables (gqa_tab_k, pages at an offset) bit for bit the
 * same. */
static void
gqa_matches_cpu(void **state)
{
    (void)state;
    grpo_kernels *cpu = NULL;
    assert_int_equal(grpo_kernels_cpu_create(&cpu, 1), GRPO_OK);
    const int hs[][3] = {
        {4, 2, 16}, {8, 1, 128}, {3, 3, 40}, {12, 1, 64}, {20, 2, 32}}; /* H, KVH, d */
    const grpo_dtype dts[3] = {GRPO_DT_F32, GRPO_DT_BF16, GRPO_DT_F8E4M3};
    const int B = 3, q0[3] = {0, 5, 6}, n[3] = {5, 1, 3}, pos0[3] = {0, 300, 62}, T = 9;
    int32_t item[9];
    for (int b = 0; b < B; b++)
        for (int i = 0; i < n[b]; i++)
            item[q0[b] + i] = b;
    for (int c = 0; c < 15; c++) {
        int H = hs[c % 5][0], KVH = hs[c % 5][1], d = hs[c % 5][2], page_len = 64;
        grpo_kv_fmt fmt = grpo_kv_fmt_make(dts[c / 5], 2 * KVH * d, 2 * KVH * d, d);
        std::vector<float> q((size_t)T * H * d), row(2 * KVH * d);
        for (auto &v : q)
            v = frand();
        /* each item's pages, allocated in reverse so that their addresses are out of order */
        int maxp = 0;
        for (int b = 0; b < B; b++)
            maxp = std::max(maxp, (pos0[b] + n[b] + page_len - 1) / page_len);
        std::vector<std::vector<uint8_t>> pg((size_t)B * maxp);
        std::vector<const void *> flat((size_t)B * maxp, (const void *)NULL);
        std::vector<const void *const *> pages_of(B);
        for (int b = 0; b < B; b++) {
            int np = (pos0[b] + n[b] + page_len - 1) / page_len;
            for (int p = np - 1; p >= 0; p--) {
                std::vector<uint8_t> &v = pg[(size_t)b * maxp + p];
                v.resize((size_t)page_len * fmt.bytes);
                for (int j = 0; j < page_len; j++) {
                    for (auto &x : row)
                        x = frand();
                    grpo_kv_row_encode(&fmt, row.data(), &v[(size_t)j * fmt.bytes]);
                }
                flat[(size_t)b * maxp + p] = v.data();
            }
            pages_of[b] = &flat[(size_t)b * maxp];
        }
        float scale = 1.0f / sqrtf((float)d);
        std::vector<float> ref((size_t)T * H * d), got((size_t)T * H * d, 7.0f);
        cpu->gqa_attn(cpu, B, q0, n, pos0, H, KVH, d, q.data(), pages_of.data(), page_len, &fmt,
                      scale, ref.data());
        std::vector<float> sh(GQ_SMEM, NAN);
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, GQ_NT);
        cu_kvf kf = cu_kvf_of(&fmt);
        const uint8_t *const *ptab = (const uint8_t *const *)flat.data();
        /* gqa_attn_k's blocks */
        host_threads(GQ_NT, [&](int t) {
            hctx cx = {NULL, NULL, t, &bar, NULL};
            for (int r = 0; r < T; r++)
                for (int y = 0; y < gqa_blocks_y(H, KVH); y++) {
                    int b = item[r];
                    gqa_block(cx, r, y, pos0[b] + r - q0[b], ptab + (size_t)b * maxp, 0, H, KVH, d,
                              q.data(), page_len, kf, scale, got.data(), sh.data());
                    cx.sync(); /* the next block reuses the shared memory */
                }
        });
        /* gqa_tab_k's blocks: every row its own table, the pages 40 bytes past the pointers */
        std::vector<const uint8_t *> tab((size_t)T * maxp, (const uint8_t *)NULL);
        std::vector<int32_t> len(T);
        std::vector<float> got_tab((size_t)T * H * d, 7.0f);
        for (int r = 0; r < T; r++) {
            int b = item[r];
            len[r] = pos0[b] + r - q0[b] + 1;
            for (int p = 0; p < maxp; p++)
                if (flat[(size_t)b * maxp + p] != NULL)
                    tab[(size_t)r * maxp + p] = (const uint8_t *)flat[(size_t)b * maxp + p] - 40;
        }
        host_threads(GQ_NT, [&](int t) {
            hctx cx = {NULL, NULL, t, &bar, NULL};
            for (int r = 0; r < T; r++)
                for (int y = 0; y < gqa_blocks_y(H, KVH); y++) {
                    gqa_block(cx, r, y, len[r] - 1, tab.data() + (size_t)r * maxp, 40, H, KVH, d,
                              q.data(), page_len, kf, scale, got_tab.data(), sh.data());
                    cx.sync();
                }
        });
        assert_memory_equal(got_tab.data(), got.data(), got.size() * sizeof(float));
        pthread_barrier_destroy(&bar);
        double worst = 0, big = 0;
        for (size_t i = 0; i < ref.size(); i++) {
            worst = fmax(worst, fabs((double)got[i] - ref[i]));
            big = fmax(big, fabs((double)ref[i]));
        }
        const char *dn[3] = {"F32", "BF16", "FP8"};
        printf("    gqa %s H=%d KVH=%d d=%d: worst %.3g of max %.3g\n", dn[c / 5], H, KVH, d, worst,
               big);
        assert_true(worst <= 1e-5 * big);
    }
    grpo_kernels_destroy(cpu);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(decode_matches_cpu),
                                       cmocka_unit_test(tc_decode_matches_reference),
                                       cmocka_unit_test(captured_plan_matches_cpu),
                                       cmocka_unit_test(combine_reads_only_frozen_splits),
                                       cmocka_unit_test(naive_matches_cpu),
                                       cmocka_unit_test(gqa_matches_cpu)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
