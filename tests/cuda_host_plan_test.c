/* Host-side planning of the CUDA backend (kernels/cuda/plan.c), run in CI without a device: the
 * MoE permutation plan against a brute-force stable sort, expert-parallel send offsets and expert
 * ownership against a direct count, page tables, the FP8 scale layout and workspace sizes, the
 * MLA split rule, and the NCCL unique-id file exchange between two processes. */
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
    /* 64 x 7168: 458752 bytes of E4M3 + 56 blocks x 64 scales x 4 bytes. */
    assert_int_equal(grpo_cuda_fp8_workspace(64, 7168), 458752 + 14336);
    /* Ragged: 3 x 200 -> 600 -> 768 bytes; 2 blocks x 4 x 4 = 32 -> 256. */
    assert_int_equal(grpo_cuda_fp8_workspace(3, 200), 768 + 256);
    /* cuBLASLt FP8: DeepSeek-V3's K (7168: 56 blocks; 2048: 16; 18432: 144; 1536: 12) pass with M
     * a multiple of 4; a scale row of 5 blocks (K = 640), M = 1 or 6, or N = 200 do not */
    assert_true(grpo_cuda_fp8_lt_shape_ok(64, 7168, 7168));
    assert_true(grpo_cuda_fp8_lt_shape_ok(4, 1536, 7168) &&
                grpo_cuda_fp8_lt_shape_ok(8, 7168, 2048));
    assert_true(grpo_cuda_fp8_lt_shape_ok(4, 7168, 18432) &&
                grpo_cuda_fp8_lt_shape_ok(4, 24576, 1536));
    assert_false(grpo_cuda_fp8_lt_shape_ok(64, 256, 640));
    assert_false(grpo_cuda_fp8_lt_shape_ok(1, 7168, 7168) ||
                 grpo_cuda_fp8_lt_shape_ok(6, 7168, 7168));
    assert_false(grpo_cuda_fp8_lt_shape_ok(64, 200, 7168) || grpo_cuda_fp8_lt_shape_ok(0, 16, 512));
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

static void
test_nccl_id_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/grpo_ncclid_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/id", dir);
    unsigned char id[128], got[128];
    for (int i = 0; i < 128; i++)
        id[i] = (unsigned char)(i * 37 + 11);
    /* Nobody publishes: a timeout naming the file. */
    assert_int_equal(grpo_nccl_id_wait(path, got, sizeof got, 50), GRPO_ETIMEOUT);
    assert_non_null(strstr(grpo_error_last(), path));
    /* Rank 0 in a child process publishes after a delay; this rank waits for it. */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        usleep(100 * 1000);
        _exit(grpo_nccl_id_publish(path, id, sizeof id) == GRPO_OK ? 0 : 1);
    }
    assert_int_equal(grpo_nccl_id_wait(path, got, sizeof got, 10000), GRPO_OK);
    assert_memory_equal(got, id, sizeof id);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* A file of the wrong size is never taken for an id. */
    assert_int_equal(grpo_nccl_id_publish(path, id, 100), GRPO_OK);
    assert_int_equal(grpo_nccl_id_wait(path, got, sizeof got, 50), GRPO_ETIMEOUT);
    unlink(path);
    rmdir(dir);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_moe_plan),   cmocka_unit_test(test_ep_ownership),
        cmocka_unit_test(test_page_table), cmocka_unit_test(test_fp8_layout),
        cmocka_unit_test(test_mla_split),  cmocka_unit_test(test_nccl_id_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
