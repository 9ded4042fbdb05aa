/* Host-side planning of the CUDA backend (kernels/cuda/plan.c), run in CI without a device: the
 * MoE permutation plan against a brute-force stable sort, expert-parallel send offsets, expert
 * ownership and the all-to-all overflow verdict against a direct count, page tables, the FP8
 * scale layouts (the padded weight grid element by element), GEMM scratch plans and pointer
 * alignment, the MLA split rules (per call and frozen from a capacity), and the NCCL unique-id
 * file exchange between two processes with a stale file of an earlier launch in the way. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kernels/cuda/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static uint32_t
rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32) % n;
}

/* Routing like the router's: top_k distinct experts per token (ascending), skewed to a few. */
static void
random_routing(int M, int top_k, int E, int32_t *idx)
{
    for (int m = 0; m < M; m++) {
        int n = 0;
        while (n < top_k) {
            int32_t e = (int32_t)(rnd(4) == 0 ? rnd(4) : rnd((uint32_t)E));
            int dup = 0;
            for (int j = 0; j < n; j++)
                dup |= idx[m * top_k + j] == e;
            if (!dup)
                idx[m * top_k + n++] = e;
        }
    }
}

static void
test_moe_plan(void **state)
{
    (void)state;
    const int shapes[][3] = {{1, 1, 1}, {7, 2, 4}, {64, 8, 256}, {300, 8, 256}, {33, 3, 8}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        int M = shapes[c][0], k = shapes[c][1], E = shapes[c][2], n = M * k;
        int32_t *idx = malloc((size_t)n * sizeof *idx);
        random_routing(M, k, E, idx);
        grpo_moe_plan p;
        assert_int_equal(grpo_moe_plan_init(&p, M, k, E, idx), GRPO_OK);
        /* Brute force: for each expert in order, the pairs routed to it in pair order. */
        int r = 0;
        for (int e = 0; e < E; e++) {
            assert_int_equal(p.offs[e], r);
            for (int i = 0; i < n; i++)
                if (idx[i] == e) {
                    assert_int_equal(p.src[r], i);
                    assert_int_equal(p.dst[i], r);
                    r++;
                }
        }
        assert_int_equal(p.offs[E], n);
        /* Expert parallelism over R ranks: rows sent to rank r are exactly its experts'. */
        for (int R = 1; R <= 8 && R <= E; R++) {
            int32_t off[9];
            grpo_ep_send_offsets(&p, R, off);
            assert_int_equal(off[0], 0);
            assert_int_equal(off[R], n);
            for (int rank = 0; rank < R; rank++)
                for (int row = off[rank]; row < off[rank + 1]; row++)
                    assert_int_equal(grpo_ep_rank_of_expert(idx[p.src[row]], E, R), rank);
        }
        grpo_moe_plan_fini(&p);
        free(idx);
    }
    int32_t bad[2] = {0, 5};
    grpo_moe_plan p;
    assert_int_equal(grpo_moe_plan_init(&p, 1, 2, 4, bad), GRPO_EINVAL);
    assert_non_null(strstr(grpo_error_last(), "expert 5 of 4"));
}

static void
test_ep_ownership(void **state)
{
    (void)state;
    const int cases[][2] = {{256, 8}, {256, 3}, {10, 4}, {7, 7}, {16, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int E = cases[c][0], R = cases[c][1], total = 0;
        for (int r = 0; r < R; r++) {
            int lo = grpo_ep_first_expert(r, E, R), hi = grpo_ep_first_expert(r + 1, E, R);
            assert_true(hi - lo >= E / R && hi - lo <= E / R + 1);
            for (int e = lo; e < hi; e++)
                assert_int_equal(grpo_ep_rank_of_expert(e, E, R), r);
            total += hi - lo;
        }
        assert_int_equal(total, E);
    }
}

static void
test_page_table(void **state)
{
    (void)state;
    /* Two samples of a group share the prompt's two pages and own one page each. */
    int32_t a[] = {4, 9, 2}, b[] = {4, 9, 7}, c[] = {1};
    const int32_t *pages_of[] = {a, b, c};
    int32_t len[] = {150, 129, 5}, table[3 * 4];
    assert_int_equal(grpo_cuda_page_table(3, pages_of, len, 64, 10, 4, table), GRPO_OK);
    int32_t want[] = {4, 9, 2, -1, 4, 9, 7, -1, 1, -1, -1, -1};
    assert_memory_equal(table, want, sizeof want);
    assert_int_equal(grpo_cuda_distinct_pages(3, 4, table), 5);
    assert_int_equal(grpo_cuda_page_table(3, pages_of, len, 64, 10, 2, table), GRPO_EINVAL);
    assert_int_equal(grpo_cuda_page_table(3, pages_of, len, 64, 8, 4, table), GRPO_EINVAL);
    assert_non_null(strstr(grpo_error_last(), "sequence 0 page 1 is 9"));
}

static void
test_fp8_layout(void **state)
{
    (void)state;
    assert_int_equal(grpo_cuda_ascale_ld(1), 4);
    assert_int_equal(grpo_cuda_ascale_ld(64), 64);
    assert_int_equal(grpo_cuda_ascale_ld(65), 68);
    /* weight-scale rows: ceil(K / 128) blocks rounded up to 4 floats */
    assert_int_equal(grpo_cuda_wscale_ld(7168), 56);
    assert_int_equal(grpo_cuda_wscale_ld(640), 8);
    assert_int_equal(grpo_cuda_wscale_ld(129), 4);
    assert_int_equal(grpo_cuda_wscale_ld(1), 4);
    assert_int_equal(grpo_cuda_wscale_ld(512), 4);
    /* cuBLASLt FP8 takes any M and any ceil(K / 128) now (M padded, the grid repacked); N and K
     * stay multiples of 16 */
    assert_true(grpo_cuda_fp8_lt_shape_ok(64, 7168, 7168) &&
                grpo_cuda_fp8_lt_shape_ok(1, 256, 640));
    assert_true(grpo_cuda_fp8_lt_shape_ok(6, 7168, 7168) && grpo_cuda_fp8_lt_shape_ok(33, 16, 384));
    assert_false(grpo_cuda_fp8_lt_shape_ok(64, 200, 7168) || grpo_cuda_fp8_lt_shape_ok(0, 16, 512));
    assert_false(grpo_cuda_fp8_lt_shape_ok(4, 256, 200) || grpo_cuda_fp8_lt_shape_ok(33, 256, 96) ||
                 grpo_cuda_fp8_lt_shape_ok(8, 192, 320));
}

/* The padded grid element by element on ragged grids: every checkpoint scale at (r, c) lands at
 * r * ld + c, every pad slot is 0, and nothing past rows * ld is written. */
static void
test_wscale_pad(void **state)
{
    (void)state;
    const int shapes[][2] = {{1, 1}, {3, 5}, {2, 4}, {7, 3}, {56, 56}, {16, 144}, {5, 13}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        int rows = shapes[c][0], cols = shapes[c][1];
        int64_t ld = grpo_cuda_wscale_ld((int64_t)cols * 128);
        assert_true(ld % 4 == 0 && ld >= cols && ld < cols + 4);
        float *grid = malloc((size_t)rows * cols * sizeof *grid);
        float *out = malloc(((size_t)rows * ld + 8) * sizeof *out);
        for (int i = 0; i < rows * cols; i++)
            grid[i] = 1e-3f * (float)(1 + rnd(1000));
        for (int64_t i = 0; i < rows * ld + 8; i++)
            out[i] = -7.0f;
        grpo_cuda_wscale_pad(grid, rows, cols, out);
        for (int r = 0; r < rows; r++)
            for (int64_t k = 0; k < ld; k++) {
                float want = k < cols ? grid[r * cols + k] : 0.0f;
                assert_true(out[r * ld + k] == want);
            }
        for (int i = 0; i < 8; i++)
            assert_true(out[rows * ld + i] == -7.0f);
        free(grid);
        free(out);
    }
}

/* The padded scratch of one FP8 GEMM against a direct count. */
static void
test_fp8_plan(void **state)
{
    (void)state;
    const int shapes[][3] = {{1, 256, 640},   {3, 160, 200},   {4, 2112, 7168}, {33, 256, 384},
                             {64, 1536, 512}, {200, 160, 256}, {6, 7168, 18432}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        int64_t M = shapes[c][0], N = shapes[c][1], K = shapes[c][2], kb = (K + 127) / 128;
        int64_t Mp = (M + 3) / 4 * 4;
        grpo_cuda_fp8_plan p;
        grpo_cuda_fp8_plan_make(&p, M, N, K);
        assert_int_equal(p.Mp, Mp);
        assert_int_equal(p.Mp % 4, 0);
        assert_int_equal(p.kb, kb);
        assert_int_equal(p.q_off, 0);
        assert_int_equal(p.q_bytes, Mp * K);
        assert_int_equal(p.xs_bytes, kb * Mp * 4);
        assert_int_equal(p.y_bytes, M % 4 ? Mp * N * 4 : 0);
        /* the parts are 256-aligned, in order, and do not overlap */
        assert_true(p.xs_off % 256 == 0 && p.y_off % 256 == 0 && p.total % 256 == 0);
        assert_true(p.xs_off >= p.q_off + p.q_bytes && p.y_off >= p.xs_off + p.xs_bytes);
        assert_true(p.total >= p.y_off + p.y_bytes && p.total < p.y_off + p.y_bytes + 256);
        assert_int_equal(grpo_cuda_fp8_workspace(M, N, K), p.total);
    }
    /* 3 x 200 (N 160): q 4 x 200 = 800 -> 1024; scales 2 x 4 x 4 = 32 -> 256; y 4 x 160 x 4 */
    assert_int_equal(grpo_cuda_fp8_workspace(3, 160, 200), 1024 + 256 + 2560);
    /* 64 x 7168: 458752 bytes of E4M3 + 56 blocks x 64 scales x 4 bytes, no padded output */
    assert_int_equal(grpo_cuda_fp8_workspace(64, 7168, 7168), 458752 + 14336);
}

static void
test_ptr_align(void **state)
{
    (void)state;
    static _Alignas(256) unsigned char buf[1024];
    assert_int_equal(grpo_cuda_ptr_align(buf), 256);
    assert_int_equal(grpo_cuda_ptr_align(buf + 512), 256);
    assert_int_equal(grpo_cuda_ptr_align(buf + 1), 1);
    assert_int_equal(grpo_cuda_ptr_align(buf + 2), 2);
    assert_int_equal(grpo_cuda_ptr_align(buf + 12), 4);
    assert_int_equal(grpo_cuda_ptr_align(buf + 16), 16);
    assert_int_equal(grpo_cuda_ptr_align(buf + 48), 16);
    assert_int_equal(grpo_cuda_ptr_align(buf + 128), 128);
    assert_int_equal(grpo_cuda_ptr_align(buf + 384), 128);
    /* an fp32 row of a (M, 1000) output: 4000 bytes apart, so 32-byte aligned at most */
    for (int m = 1; m < 8; m++) {
        uint32_t a = grpo_cuda_ptr_align(buf + 4000 * m % 1024);
        assert_true(a >= 4 && (uintptr_t)(buf + 4000 * m % 1024) % a == 0);
    }
}

static void
test_mla_split(void **state)
{
    (void)state;
    int c = grpo_cuda_mla_chunk(1);
    assert_true(c % 64 == 0); /* whole pages */
    assert_int_equal(grpo_cuda_mla_nsplit(0), 1);
    assert_int_equal(grpo_cuda_mla_nsplit(1), 1);
    assert_int_equal(grpo_cuda_mla_nsplit(c), 1);
    assert_int_equal(grpo_cuda_mla_nsplit(c + 1), 2);
    /* The split depends on the length only (determinism contract): same length, same split. */
    for (int32_t L = 1; L < 5000; L += 97)
        assert_int_equal(grpo_cuda_mla_nsplit(L), (L + c - 1) / c);
}

/* The captured plan is a function of the capacity only: it covers the capacity in whole pages,
 * never exceeds the split cap, keeps the per-call chunk below the clamp, and every length up to
 * the capacity uses at most the frozen number of splits (the combine never reads an unwritten
 * partial) while the splits it uses cover the whole length. */
static void
test_mla_plan(void **state)
{
    (void)state;
    grpo_cuda_mla_plan p0 = grpo_cuda_mla_plan_for(0);
    assert_true(p0.nsm == 1 && p0.chunk == GRPO_CUDA_MLA_CHUNK);
    const int64_t caps[] = {1, 64, 511, 512, 513, 4096, 32768, 32769, 40000, 163840, 1 << 20};
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
        int64_t cap = caps[i];
        grpo_cuda_mla_plan p = grpo_cuda_mla_plan_for(cap);
        assert_true(p.chunk % 64 == 0 && p.chunk >= GRPO_CUDA_MLA_CHUNK);
        assert_true(p.nsm >= 1 && p.nsm <= GRPO_CUDA_MLA_MAX_SPLITS);
        assert_true((int64_t)p.nsm * p.chunk >= cap);
        assert_true((int64_t)(p.nsm - 1) * p.chunk < cap); /* no split wholly past the capacity */
        if (cap <= (int64_t)GRPO_CUDA_MLA_CHUNK * GRPO_CUDA_MLA_MAX_SPLITS)
            assert_int_equal(p.chunk, GRPO_CUDA_MLA_CHUNK);
        for (int64_t L = 0; L <= cap; L += cap / 37 + 1) {
            int u = grpo_cuda_mla_splits_used(p, (int32_t)L);
            assert_true(u >= 1 && u <= p.nsm);
            assert_true((int64_t)u * p.chunk >= L && (L == 0 || (int64_t)(u - 1) * p.chunk < L));
        }
        assert_true(grpo_cuda_mla_plan_for(cap).nsm == p.nsm); /* a pure function */
    }
    /* a length past the frozen plan is clamped to the splits the grid has */
    grpo_cuda_mla_plan p = grpo_cuda_mla_plan_for(1024);
    assert_int_equal(grpo_cuda_mla_splits_used(p, 5000), p.nsm);
}

/* R ranks with their own routing and receive capacities: the table each builds from the
 * all-gather is the same, so every rank's verdict is the same, and it equals a direct check
 * of every rank's incoming rows against its capacity. */
static void
test_ep_verdict(void **state)
{
    (void)state;
    for (int trial = 0; trial < 300; trial++) {
        /* E >= 4: random_routing skews to experts 0 .. 3 */
        int R = 1 + (int)rnd(8), E = R + 4 + (int)rnd(12), M = 1 + (int)rnd(40),
            k = 1 + (int)rnd(3);
        int32_t table[8 * 9], cap[8], recv_off[9];
        int64_t in[8] = {0};
        for (int r = 0; r < R; r++) {
            int32_t *idx = malloc((size_t)M * k * sizeof *idx), off[9];
            random_routing(M, k, E, idx);
            grpo_moe_plan p;
            assert_int_equal(grpo_moe_plan_init(&p, M, k, E, idx), GRPO_OK);
            grpo_ep_send_offsets(&p, R, off);
            cap[r] = (int32_t)rnd((uint32_t)(M * k + 1)) + (trial % 3 == 0 ? M * k : 0);
            grpo_ep_count_row(R, off, cap[r], table + r * (R + 1)); /* what rank r gathers */
            for (int d = 0; d < R; d++)
                in[d] += off[d + 1] - off[d];
            grpo_moe_plan_fini(&p);
            free(idx);
        }
        int want = -1;
        for (int d = R - 1; d >= 0; d--)
            want = in[d] > cap[d] ? d : want;
        int64_t rows = -1, rows0 = -1;
        int v0 = grpo_ep_verdict(R, table, &rows0);
        assert_int_equal(v0, want);
        if (want >= 0)
            assert_int_equal(rows0, in[want]);
        for (int r = 0; r < R; r++) { /* each rank on its own copy of the gathered table */
            int32_t copy[8 * 9];
            memcpy(copy, table, sizeof copy);
            assert_int_equal(grpo_ep_verdict(R, copy, &rows), v0);
            grpo_ep_recv_offsets(R, copy, r, recv_off);
            assert_int_equal(recv_off[0], 0);
            assert_int_equal(recv_off[R], in[r]);
            for (int s = 0; s < R; s++)
                assert_int_equal(recv_off[s + 1] - recv_off[s], table[s * (R + 1) + r]);
        }
    }
    /* only the last rank overflows: every rank (not only it) sees it */
    int32_t t[3 * 4] = {1, 1, 2, 10, 1, 1, 2, 10, 1, 1, 2, 6};
    int64_t rows = 0;
    assert_int_equal(grpo_ep_verdict(3, t, &rows), -1);
    t[2] = 4; /* rank 2 now receives 4 + 2 + 2 = 8 > 6 */
    assert_int_equal(grpo_ep_verdict(3, t, &rows), 2);
    assert_int_equal(rows, 8);
    t[2] = -1; /* a negative count is never taken */
    assert_int_equal(grpo_ep_verdict(3, t, &rows), 2);
}

static void
test_nccl_id_codec(void **state)
{
    (void)state;
    unsigned char id[128], got[128], buf[GRPO_NCCL_ID_HEADER + 128];
    for (int i = 0; i < 128; i++)
        id[i] = (unsigned char)(i * 37 + 11);
    uint64_t theirs = 0, nonce = 0x0123456789abcdefull;
    grpo_nccl_id_encode(nonce, id, sizeof id, buf);
    assert_memory_equal(buf, "GRPONCID", 8);
    assert_int_equal(buf[8], 0xef); /* little-endian nonce */
    assert_int_equal(grpo_nccl_id_decode(buf, sizeof buf, nonce, got, sizeof got, &theirs), 0);
    assert_memory_equal(got, id, sizeof id);
    assert_int_equal(grpo_nccl_id_decode(buf, sizeof buf, nonce + 1, got, sizeof got, &theirs), 1);
    assert_true(theirs == nonce);
    /* truncated, a bad magic, a wrong length field, another id size */
    assert_int_equal(grpo_nccl_id_decode(buf, sizeof buf - 1, nonce, got, sizeof got, &theirs), -1);
    assert_int_equal(grpo_nccl_id_decode(buf, 10, nonce, got, sizeof got, &theirs), -1);
    buf[0] = 'X';
    assert_int_equal(grpo_nccl_id_decode(buf, sizeof buf, nonce, got, sizeof got, &theirs), -1);
    buf[0] = 'G', buf[16] ^= 1;
    assert_int_equal(grpo_nccl_id_decode(buf, sizeof buf, nonce, got, sizeof got, &theirs), -1);
    buf[16] ^= 1;
    assert_int_equal(grpo_nccl_id_decode(buf, sizeof buf, nonce, got, 100, &theirs), -1);
    uint64_t a = 0, b = 0;
    assert_int_equal(grpo_nccl_nonce_new(&a), GRPO_OK);
    assert_int_equal(grpo_nccl_nonce_new(&b), GRPO_OK);
    assert_true(a != b);
}

static void
test_nccl_id_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/grpo_ncclid_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/id", dir);
    unsigned char id[128], old[128], got[128];
    for (int i = 0; i < 128; i++)
        id[i] = (unsigned char)(i * 37 + 11), old[i] = (unsigned char)(255 - i);
    const uint64_t launch = 0xfeedface12345678ull, earlier = 0x1111222233334444ull;
    /* Nobody publishes: a timeout naming the file. */
    assert_int_equal(grpo_nccl_id_wait(path, launch, got, sizeof got, 50), GRPO_ETIMEOUT);
    assert_non_null(strstr(grpo_error_last(), path));
    /* A file left by an earlier launch is never taken: a timeout that says so. */
    assert_int_equal(grpo_nccl_id_publish(path, earlier, old, sizeof old), GRPO_OK);
    assert_int_equal(grpo_nccl_id_wait(path, launch, got, sizeof got, 50), GRPO_ETIMEOUT);
    assert_non_null(strstr(grpo_error_last(), "another launch"));
    assert_non_null(strstr(grpo_error_last(), "1111222233334444"));
    /* Rank 0 in a child process replaces the stale file after a delay; this rank, which started
     * waiting while the stale file was there, gets this launch's id. */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        usleep(100 * 1000);
        _exit(grpo_nccl_id_publish(path, launch, id, sizeof id) == GRPO_OK ? 0 : 1);
    }
    memset(got, 0, sizeof got);
    assert_int_equal(grpo_nccl_id_wait(path, launch, got, sizeof got, 10000), GRPO_OK);
    assert_memory_equal(got, id, sizeof id);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* An id of the wrong size, or raw bytes without the header, are never taken for an id. */
    assert_int_equal(grpo_nccl_id_publish(path, launch, id, 100), GRPO_OK);
    assert_int_equal(grpo_nccl_id_wait(path, launch, got, sizeof got, 50), GRPO_ETIMEOUT);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(id, 1, sizeof id, f), sizeof id);
    for (int i = 0; i < GRPO_NCCL_ID_HEADER; i++)
        fputc(0, f);
    fclose(f);
    assert_int_equal(grpo_nccl_id_wait(path, launch, got, sizeof got, 50), GRPO_ETIMEOUT);
    unlink(path);
    rmdir(dir);
}

/* A scratch buffer grows only outside a recording, to need and a quarter (at least 256 bytes), and
 * serves every need up to its size as it is. */
static void
test_scratch_grow(void **state)
{
    (void)state;
    assert_int_equal(grpo_cuda_scratch_grow(0, 0, 0), 256);
    assert_int_equal(grpo_cuda_scratch_grow(0, 100, 0), 256);
    assert_int_equal(grpo_cuda_scratch_grow(0, 4096, 0), 5120);
    assert_int_equal(grpo_cuda_scratch_grow(5120, 5120, 0), 0);
    assert_int_equal(grpo_cuda_scratch_grow(5120, 1, 1), 0);
    assert_int_equal(grpo_cuda_scratch_grow(5120, 5121, 0), 6401);
    assert_true(grpo_cuda_scratch_grow(5120, 5121, 1) == GRPO_CUDA_SCRATCH_REFUSE);
    assert_true(grpo_cuda_scratch_grow(0, 1, 1) == GRPO_CUDA_SCRATCH_REFUSE);
    /* no size grows past what it asks for by more than a quarter, none wraps */
    for (size_t need = 1; need < ((size_t)1 << 40); need = need * 3 + 7) {
        size_t w = grpo_cuda_scratch_grow(need / 2, need, 0);
        assert_true(w >= need && w <= need + need / 4 + 256);
        assert_int_equal(grpo_cuda_scratch_grow(w, need, 1), 0);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_moe_plan),      cmocka_unit_test(test_ep_ownership),
        cmocka_unit_test(test_page_table),    cmocka_unit_test(test_fp8_layout),
        cmocka_unit_test(test_wscale_pad),    cmocka_unit_test(test_fp8_plan),
        cmocka_unit_test(test_ptr_align),     cmocka_unit_test(test_mla_split),
        cmocka_unit_test(test_mla_plan),      cmocka_unit_test(test_ep_verdict),
        cmocka_unit_test(test_nccl_id_codec), cmocka_unit_test(test_nccl_id_file),
        cmocka_unit_test(test_scratch_grow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
