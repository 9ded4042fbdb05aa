/* The GPU model benchmark's random DeepSeek-V3-shaped checkpoint (bench/gpu/slice_model.c) at
 * small widths: what it writes is a checkpoint grpo_model_load takes (config, every tensor by
 * name, dtype and shape), its file is as long as it says, and the CPU forward over it gives
 * finite logits that differ between tokens, prefill and decode alike. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "bench/gpu/slice_model.h"
#include "grpo/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void
writes_a_loadable_checkpoint(void **state)
{
    (void)state;
    char dir[] = "/tmp/grpo-slice-test-XXXXXX";
    assert_non_null(mkdtemp(dir));
    grpo_slice_cfg c = {.hidden = 256,
                        .heads = 4,
                        .q_lora = 256,
                        .kv_lora = 128,
                        .rope = 32,
                        .nope = 64,
                        .v = 64,
                        .inter = 384,
                        .moe_inter = 128,
                        .experts = 8,
                        .shared = 1,
                        .topk = 2,
                        .n_group = 2,
                        .topk_group = 1,
                        .layers = 3,
                        .dense = 1,
                        .vocab = 512};
    uint64_t bytes = 0;
    assert_int_equal(grpo_slice_write(&c, dir, 7, &bytes), GRPO_OK);
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal((uint64_t)st.st_size, bytes);
    grpo_model *m = NULL;
    grpo_model_opts o = {.n_threads = 1};
    assert_int_equal(grpo_model_load(&m, dir, &o), GRPO_OK);
    const grpo_model_config *mc = grpo_model_get_config(m);
    assert_int_equal(mc->n_routed_experts, 8);
    assert_int_equal(mc->num_hidden_layers, 3);
    assert_int_equal(mc->kv_lora_rank, 128);
    grpo_kv *kv = NULL;
    int32_t seq, tok[7] = {3, 17, 200, 5, 99, 400, 12};
    assert_int_equal(grpo_kv_create(&kv, mc, 1u << 20), GRPO_OK);
    assert_int_equal(grpo_kv_seq_new(kv, &seq), GRPO_OK);
    float *lg = malloc((size_t)7 * c.vocab * sizeof *lg);
    grpo_fwd_item it = {seq, 0, 6, tok};
    assert_int_equal(grpo_model_forward_all(m, kv, &it, 1, lg), GRPO_OK);
    grpo_fwd_item d = {seq, 6, 1, tok + 6};
    assert_int_equal(grpo_model_forward(m, kv, &d, 1, lg + (size_t)6 * c.vocab), GRPO_OK);
    int finite = 1, differ = 0;
    for (int i = 0; i < 7 * c.vocab; i++)
        finite &= isfinite(lg[i]) != 0;
    for (int i = 0; i < c.vocab; i++)
        differ |= lg[i] != lg[(size_t)6 * c.vocab + i];
    assert_true(finite);
    assert_true(differ);
    free(lg);
    grpo_kv_destroy(kv);
    grpo_model_destroy(m);
    unlink(path);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    rmdir(dir);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(writes_a_loadable_checkpoint)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
