/* DeepSeek-V2 (deepseek_v2) and Moonlight- / Kimi-K2-style DeepSeek-V3 models against
 * transformers (tests/data/v2_models, made by tools/make_v2_models.py): prefill and decode
 * logits, greedy sequences, the routers' expert choices; and against themselves: decode equals
 * prefill, forked samples equal private prompts, batch composition and thread count change
 * nothing. Plus the config values read and refused by name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kernels/kernels.h"
#include "rollout/model/model_int.h"
#include "tests/model_testutil.h"

#define TOL 1e-4 /* relative error bar for fp32 activations */
#define MAXV 512

static const char *const fixtures[] = {"v2_lite_bf16", "v2_group_f32", "v2_fp8", "moonlight_v3",
                                       "kimi_k2_v3"};
#define N_FIX (sizeof fixtures / sizeof fixtures[0])

typedef tm_fx fx;

static const char *
v2_dir(const char *name, char *buf, size_t n)
{
    return tm_set_dir("v2_models", name, buf, n);
}

static int
fx_open(fx *f, const char *name, int threads)
{
    return tm_fx_open(f, "v2_models", name, threads, MAXV);
}

static void
fx_close(fx *f)
{
    tm_fx_close(f);
}

#include "tests/model_fx_checks.h"

/* A 5-token prefill, then one token at a time through the absorbed form: every step within TOL of
 * transformers' logits at that position and within 1e-5 of the same position of the one-shot
 * (naive) prefill; a prefill in two chunks across the page boundary bit-identical to one. */
static void
check_decode(fx *f)
{
    grpo_kv *kv = new_kv(f->m);
    int n = f->e.n, V = f->e.vocab, p0 = 5;
    float *all = malloc((size_t)n * V * 4), *two = malloc((size_t)n * V * 4), lg[MAXV];
    int32_t a, b, c;
    grpo_kv_seq_new(kv, &a);
    grpo_kv_seq_new(kv, &b);
    grpo_kv_seq_new(kv, &c);
    fwd(f->m, kv, a, 0, n, f->e.tokens, all, 1);
    fwd(f->m, kv, b, 0, p0, f->e.tokens, lg, 0);
    assert_memory_equal(lg, all + (size_t)(p0 - 1) * V, (size_t)V * 4);
    double worst = 0, self = 0;
    for (int t = p0; t < n; t++) {
        fwd(f->m, kv, b, t, 1, f->e.tokens + t, lg, 0);
        double r = tm_rel_err(lg, f->e.logits + (size_t)t * V, (size_t)V);
        double s = tm_rel_err(lg, all + (size_t)t * V, (size_t)V);
        worst = r > worst ? r : worst;
        self = s > self ? s : self;
    }
    printf("    %s: %d decode steps, relative error %.3g (to the prefill %.3g)\n", f->dir, n - p0,
           worst, self);
    assert_true(worst <= TOL && self <= 1e-5);
    fwd(f->m, kv, c, 0, 50, f->e.tokens, two, 1);
    fwd(f->m, kv, c, 50, n - 50, f->e.tokens + 50, two + (size_t)50 * V, 1);
    assert_memory_equal(two, all, (size_t)n * V * 4);
    free(all);
    free(two);
    grpo_kv_destroy(kv);
}

/* G samples forked from one 40-token prefill (sharing its pages, the partial one copied on
 * write) decode different tokens: bit-identical to decoding after a private prefill each, and the
 * parent is unharmed. */
static void
check_fork(fx *f)
{
    enum { G = 4, P = 40, D = 10 };
    int V = f->e.vocab;
    const int32_t *tok = f->e.tokens;
    grpo_kv *kv = new_kv(f->m), *kv2 = new_kv(f->m);
    float *got = malloc((size_t)G * D * V * 4), *ref = malloc((size_t)D * V * 4), pre[MAXV];
    int32_t parent, kid[G], cont[G][D];
    for (int g = 0; g < G; g++)
        for (int i = 0; i < D; i++)
            cont[g][i] = tok[(P + 7 * g + 3 * i) % f->e.n];
    grpo_kv_seq_new(kv, &parent);
    fwd(f->m, kv, parent, 0, P, tok, pre, 0);
    size_t used = grpo_kv_pages_used(kv);
    for (int g = 0; g < G; g++)
        assert_int_equal(grpo_kv_seq_fork(kv, parent, &kid[g]), GRPO_OK);
    assert_int_equal(grpo_kv_pages_used(kv), used);
    for (int i = 0; i < D; i++) { /* the G samples step together, as the scheduler runs them */
        grpo_fwd_item it[G];
        float out[G * MAXV];
        for (int g = 0; g < G; g++)
            it[g] = (grpo_fwd_item){kid[g], P + i, 1, &cont[g][i]};
        assert_int_equal(grpo_model_forward(f->m, kv, it, G, out), GRPO_OK);
        for (int g = 0; g < G; g++)
            memcpy(got + ((size_t)g * D + i) * V, out + (size_t)g * V, (size_t)V * 4);
    }
    assert_int_equal(grpo_kv_pages_used(kv), used + G); /* each sample copied the shared page */
    for (int g = 0; g < G; g++) {
        int32_t s;
        grpo_kv_seq_new(kv2, &s);
        fwd(f->m, kv2, s, 0, P, tok, pre, 0);
        for (int i = 0; i < D; i++)
            fwd(f->m, kv2, s, P + i, 1, &cont[g][i], ref + (size_t)i * V, 0);
        assert_memory_equal(got + (size_t)g * D * V, ref, (size_t)D * V * 4);
        grpo_kv_seq_free(kv2, s);
    }
    float again[MAXV]; /* the parent's own next step still sees only its prompt */
    fwd(f->m, kv, parent, P, 1, tok + P, again, 0);
    int32_t s;
    grpo_kv_seq_new(kv2, &s);
    fwd(f->m, kv2, s, 0, P, tok, pre, 0);
    fwd(f->m, kv2, s, P, 1, tok + P, pre, 0);
    assert_memory_equal(again, pre, (size_t)V * 4);
    for (int g = 0; g < G; g++)
        grpo_kv_seq_free(kv, kid[g]);
    grpo_kv_seq_free(kv, parent);
    assert_int_equal(grpo_kv_pages_used(kv), 0);
    free(got);
    free(ref);
    grpo_kv_destroy(kv);
    grpo_kv_destroy(kv2);
}

/* Rows computed alone on 2 threads, then in mixed batches (prefill chunks + decode tokens) on 1
 * and 3 threads with every op threaded: bit-identical. */
static void
check_invariance(fx *f)
{
    int V = f->e.vocab;
    const int32_t *tok = f->e.tokens;
    static float solo[5][MAXV], out[3 * MAXV];
    grpo_kv *kv = new_kv(f->m);
    int32_t a, b, c;
    grpo_kv_seq_new(kv, &a);
    grpo_kv_seq_new(kv, &b);
    grpo_kv_seq_new(kv, &c);
    fwd(f->m, kv, a, 0, 30, tok, solo[0], 0);
    fwd(f->m, kv, a, 30, 1, tok + 30, solo[1], 0);
    fwd(f->m, kv, b, 0, 20, tok + 40, solo[2], 0);
    fwd(f->m, kv, b, 20, 1, tok + 60, solo[3], 0);
    fwd(f->m, kv, c, 0, 15, tok + 5, solo[4], 0);
    grpo_kv_destroy(kv);
    grpo_kernels_cpu_set_min_parallel(0);
    for (int th = 1; th <= 3; th += 2) {
        grpo_model *m = NULL;
        grpo_model_opts o = {th, 0, 0, 0, 0};
        assert_int_equal(grpo_model_load(&m, f->dir, &o), GRPO_OK);
        kv = new_kv(m);
        grpo_kv_seq_new(kv, &a);
        grpo_kv_seq_new(kv, &b);
        grpo_kv_seq_new(kv, &c);
        grpo_fwd_item first[2] = {{b, 0, 20, tok + 40}, {a, 0, 30, tok}};
        assert_int_equal(grpo_model_forward(m, kv, first, 2, out), GRPO_OK);
        assert_memory_equal(out, solo[2], (size_t)V * 4);
        assert_memory_equal(out + V, solo[0], (size_t)V * 4);
        grpo_fwd_item second[3] = {{a, 30, 1, tok + 30}, {c, 0, 15, tok + 5}, {b, 20, 1, tok + 60}};
        assert_int_equal(grpo_model_forward(m, kv, second, 3, out), GRPO_OK);
        assert_memory_equal(out, solo[1], (size_t)V * 4);
        assert_memory_equal(out + V, solo[4], (size_t)V * 4);
        assert_memory_equal(out + 2 * V, solo[3], (size_t)V * 4);
        grpo_kv_destroy(kv);
        grpo_model_destroy(m);
    }
    grpo_kernels_cpu_set_min_parallel(262144);
}

/* The experts recorded by grpo_model_forward_routes over the prefill are transformers' choices
 * (expected.json "routes": per MoE layer, (T, k) ascending), in uint8 or int16 as the expert count
 * needs; the logits are the same bits as without recording. */
static void
check_routes(fx *f)
{
    const grpo_model_config *c = grpo_model_get_config(f->m);
    int n = f->e.n, V = f->e.vocab, K = c->num_experts_per_tok, nb = grpo_model_route_bytes(c);
    size_t row = grpo_model_route_row_bytes(c);
    assert_int_equal(row, (size_t)c->n_moe_layers * K * nb);
    assert_int_equal(nb, c->n_routed_experts > 256 ? 2 : 1);
    char p[1100];
    cJSON *j = NULL;
    snprintf(p, sizeof p, "%s/expected.json", f->dir);
    assert_int_equal(grpo__json_parse_file(p, 8 << 20, &j), GRPO_OK);
    const cJSON *want = cJSON_GetObjectItem(j, "routes");
    assert_int_equal(cJSON_GetArraySize(want), c->n_moe_layers);
    grpo_kv *kv = new_kv(f->m);
    uint8_t *r = malloc((size_t)n * row);
    float *lg = malloc((size_t)V * 4), *plain = malloc((size_t)V * 4);
    int32_t a, b;
    grpo_kv_seq_new(kv, &a);
    grpo_kv_seq_new(kv, &b);
    grpo_fwd_item it = {a, 0, n, f->e.tokens};
    void *const rs[1] = {r};
    assert_int_equal(grpo_model_forward_routes(f->m, kv, &it, 1, lg, rs), GRPO_OK);
    fwd(f->m, kv, b, 0, n, f->e.tokens, plain, 0);
    assert_memory_equal(lg, plain, (size_t)V * 4);
    for (int l = 0; l < c->n_moe_layers; l++)
        for (int t = 0; t < n; t++)
            for (int k = 0; k < K; k++) {
                const uint8_t *at = r + (size_t)t * row + ((size_t)l * K + k) * nb;
                int16_t v16 = 0;
                if (nb == 2)
                    memcpy(&v16, at, 2);
                int got = nb == 1 ? *at : v16;
                int exp = cJSON_GetArrayItem(cJSON_GetArrayItem(cJSON_GetArrayItem(want, l), t), k)
                              ->valueint;
                if (got != exp)
                    fail_msg("%s: MoE layer %d token %d slot %d: expert %d, transformers %d",
                             f->dir, l, t, k, got, exp);
            }
    printf("    %s: %d x %d x %d routes equal transformers'\n", f->dir, c->n_moe_layers, n, K);
    cJSON_Delete(j);
    free(r);
    free(lg);
    free(plain);
    grpo_kv_destroy(kv);
}

static void
each_fixture(void (*check)(fx *))
{
    for (size_t i = 0; i < N_FIX; i++) {
        fx f;
        memset(&f, 0, sizeof f);
        if (fx_open(&f, fixtures[i], 2) != 0)
            fail_msg("cannot open fixture %s", fixtures[i]);
        check(&f);
        fx_close(&f);
    }
}

static void
prefill_matches_transformers(void **state)
{
    (void)state;
    each_fixture(check_prefill);
}
static void
decode_equals_prefill(void **state)
{
    (void)state;
    each_fixture(check_decode);
}
static void
greedy_matches_transformers(void **state)
{
    (void)state;
    each_fixture(check_greedy);
}
static void
fork_equals_private_prompts(void **state)
{
    (void)state;
    each_fixture(check_fork);
}
static void
batch_and_threads_invariant(void **state)
{
    (void)state;
    each_fixture(check_invariance);
}
static void
routes_match_transformers(void **state)
{
    (void)state;
    each_fixture(check_routes);
}

/* ---- config.json ---- */

static char *
fixture_config(const char *name)
{
    char d[1024], p[1100];
    char *buf = NULL;
    size_t len = 0;
    snprintf(p, sizeof p, "%s/config.json", v2_dir(name, d, sizeof d));
    assert_int_equal(grpo__read_file(p, 0, &buf, &len), GRPO_OK);
    return buf;
}

/* The fixture's config.json with the first `from` replaced by `to`, parsed. */
static grpo_err
parse_patched(const char *name, const char *from, const char *to, grpo_model_config *c)
{
    char *s = fixture_config(name), *at = strstr(s, from);
    if (at == NULL)
        fail_msg("%s: \"%s\" not in config.json", name, from);
    size_t n = strlen(s) + strlen(to) + 1;
    char *t = malloc(n);
    snprintf(t, n, "%.*s%s%s", (int)(at - s), s, to, at + strlen(from));
    grpo_err err = grpo_model_config_parse(c, t, strlen(t), "x/config.json");
    free(t);
    free(s);
    return err;
}

static void
config_fields_read(void **state)
{
    (void)state;
    grpo_model_config c;
    assert_int_equal(parse_patched("v2_lite_bf16", "{", "{", &c), GRPO_OK);
    assert_int_equal(c.arch, GRPO_ARCH_DEEPSEEK_V2);
    assert_string_equal(grpo_model_type_name(&c), "deepseek_v2");
    assert_true(c.q_lora_rank == 0 && c.n_group == 1 && c.topk_group == 1 && !c.norm_topk_prob);
    assert_true(c.n_shared_experts == 2 && c.n_moe_layers == 2 && c.rope_yarn);
    assert_int_equal(grpo_model_kv_row(&c), 40 + 8);
    /* DeepSeek's softmax scale: qk^-0.5 * mscale(40, 0.707)^2; rope factor mscale ratio 1 */
    double ms = 0.1 * 0.707 * log(40.0) + 1.0;
    assert_float_equal(c.softmax_scale, ms * ms / sqrt(32.0), 1e-7);
    assert_float_equal(c.rope_attn_factor, 1.0, 1e-7);
    /* greedy ignores n_group / topk_group, as transformers does */
    assert_int_equal(parse_patched("v2_lite_bf16", "\"n_group\": 1", "\"n_group\": 3", &c),
                     GRPO_OK);
    assert_true(c.n_group == 1 && c.topk_group == 1);
    assert_int_equal(parse_patched("v2_group_f32", "{", "{", &c), GRPO_OK);
    assert_true(c.n_group == 4 && c.topk_group == 2 && c.q_lora_rank == 48);
    assert_float_equal(c.routed_scaling_factor, 16.0, 0);
    assert_true(c.n_moe_layers == 2 && c.tie_word_embeddings && !c.rope_yarn);
    assert_int_equal(parse_patched("v2_fp8", "{", "{", &c), GRPO_OK);
    assert_true(c.fp8 && c.n_group == 8 && c.topk_group == 3 && c.n_moe_layers == 1);
    assert_int_equal(parse_patched("kimi_k2_v3", "{", "{", &c), GRPO_OK);
    assert_int_equal(c.arch, GRPO_ARCH_DEEPSEEK_V3);
    assert_true(c.n_routed_experts == 384 && c.num_experts_per_tok == 8 && c.n_group == 1);
    assert_int_equal(grpo_model_route_bytes(&c), 2);
    /* scoring_func and topk_method may be absent: softmax and greedy */
    assert_int_equal(parse_patched("v2_lite_bf16", "\"topk_method\": \"greedy\",", "", &c),
                     GRPO_OK);
    assert_int_equal(parse_patched("v2_lite_bf16", "\"scoring_func\": \"softmax\",", "", &c),
                     GRPO_OK);
}

static void
config_refused_by_name(void **state)
{
    (void)state;
    static const struct {
        const char *fixture, *from, *to, *key;
    } cases[] = {
        {"v2_lite_bf16", "\"norm_topk_prob\": false", "\"norm_topk_prob\": true", "norm_topk_prob"},
        {"v2_lite_bf16", "\"topk_method\": \"greedy\"", "\"topk_method\": \"noaux_tc\"",
         "topk_method"},
        {"v2_lite_bf16", "\"scoring_func\": \"softmax\"", "\"scoring_func\": \"sigmoid\"",
         "scoring_func"},
        {"v2_lite_bf16", "{", "{\"rope_interleave\": false, ", "rope_interleave"},
        {"v2_lite_bf16", "\"mlp_bias\": false", "\"mlp_bias\": true", "mlp_bias"},
        {"v2_lite_bf16", "\"attention_bias\": false", "\"attention_bias\": true", "attention_bias"},
        {"v2_lite_bf16", "\"moe_layer_freq\": 1", "\"moe_layer_freq\": 2", "moe_layer_freq"},
        {"v2_lite_bf16", "\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"", "hidden_act"},
        {"v2_group_f32", "\"n_group\": 4", "\"n_group\": null", "n_group"},
        {"v2_group_f32", "\"n_group\": 4", "\"n_group\": 5", "n_group"},
        {"v2_group_f32", "\"topk_group\": 2", "\"topk_group\": 5", "topk_group"},
        {"v2_group_f32", "\"num_experts_per_tok\": 4", "\"num_experts_per_tok\": 17",
         "num_experts_per_tok"},
        {"v2_group_f32", "\"num_key_value_heads\": 5", "\"num_key_value_heads\": 1",
         "num_key_value_heads"},
        {"v2_lite_bf16", "\"type\": \"yarn\"", "\"type\": \"dynamic\"", "dynamic"},
        {"kimi_k2_v3", "\"scoring_func\": \"sigmoid\"", "\"scoring_func\": \"softmax\"",
         "scoring_func"},
        {"kimi_k2_v3", "\"topk_method\": \"noaux_tc\"", "\"topk_method\": \"greedy\"",
         "topk_method"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        grpo_model_config c;
        grpo_err err = parse_patched(cases[i].fixture, cases[i].from, cases[i].to, &c);
        if (err == GRPO_OK || strstr(grpo_error_last(), cases[i].key) == NULL ||
            strstr(grpo_error_last(), "x/config.json") == NULL)
            fail_msg("case %zu (%s): err %d, message \"%s\"", i, cases[i].to, err,
                     grpo_error_last());
    }
}

/* The published checkpoints' config.json values that matter, written out here: each parses with
 * the derived fields the forward uses. */
static void
published_configs_parse(void **state)
{
    (void)state;
    static const char *const v2_lite = /* deepseek-ai/DeepSeek-V2-Lite */
        "{\"architectures\": [\"DeepseekV2ForCausalLM\"], \"attention_bias\": false, "
        "\"attention_dropout\": 0.0, \"aux_loss_alpha\": 0.001, \"bos_token_id\": 100000, "
        "\"eos_token_id\": 100001, \"ep_size\": 1, \"first_k_dense_replace\": 1, "
        "\"hidden_act\": \"silu\", \"hidden_size\": 2048, \"initializer_range\": 0.02, "
        "\"intermediate_size\": 10944, \"kv_lora_rank\": 512, \"max_position_embeddings\": "
        "163840, \"model_type\": \"deepseek_v2\", \"moe_intermediate_size\": 1408, "
        "\"moe_layer_freq\": 1, \"n_group\": 1, \"n_routed_experts\": 64, \"n_shared_experts\": "
        "2, \"norm_topk_prob\": false, \"num_attention_heads\": 16, \"num_experts_per_tok\": 6, "
        "\"num_hidden_layers\": 27, \"num_key_value_heads\": 16, \"pretraining_tp\": 1, "
        "\"q_lora_rank\": null, \"qk_nope_head_dim\": 128, \"qk_rope_head_dim\": 64, "
        "\"rms_norm_eps\": 1e-06, \"rope_scaling\": {\"beta_fast\": 32, \"beta_slow\": 1, "
        "\"factor\": 40, \"mscale\": 0.707, \"mscale_all_dim\": 0.707, "
        "\"original_max_position_embeddings\": 4096, \"type\": \"yarn\"}, \"rope_theta\": "
        "10000, \"routed_scaling_factor\": 1.0, \"scoring_func\": \"softmax\", \"seq_aux\": "
        "true, \"tie_word_embeddings\": false, \"topk_group\": 1, \"topk_method\": \"greedy\", "
        "\"torch_dtype\": \"bfloat16\", \"use_cache\": true, \"v_head_dim\": 128, "
        "\"vocab_size\": 102400}";
    static const char *const v2 = /* deepseek-ai/DeepSeek-V2(-Chat): the fields that differ */
        "{\"model_type\": \"deepseek_v2\", \"first_k_dense_replace\": 1, \"hidden_size\": 5120, "
        "\"intermediate_size\": 12288, \"kv_lora_rank\": 512, \"max_position_embeddings\": "
        "163840, \"moe_intermediate_size\": 1536, \"moe_layer_freq\": 1, \"n_group\": 8, "
        "\"n_routed_experts\": 160, \"n_shared_experts\": 2, \"norm_topk_prob\": false, "
        "\"num_attention_heads\": 128, \"num_experts_per_tok\": 6, \"num_hidden_layers\": 60, "
        "\"num_key_value_heads\": 128, \"q_lora_rank\": 1536, \"qk_nope_head_dim\": 128, "
        "\"qk_rope_head_dim\": 64, \"rms_norm_eps\": 1e-06, \"rope_scaling\": {\"beta_fast\": "
        "32, \"beta_slow\": 1, \"factor\": 40, \"mscale\": 0.707, \"mscale_all_dim\": 0.707, "
        "\"original_max_position_embeddings\": 4096, \"type\": \"yarn\"}, \"rope_theta\": "
        "10000, \"routed_scaling_factor\": 16.0, \"scoring_func\": \"softmax\", "
        "\"topk_group\": 3, \"topk_method\": \"group_limited_greedy\", \"v_head_dim\": 128, "
        "\"vocab_size\": 102400}";
    static const char *const moonlight = /* moonshotai/Moonlight-16B-A3B: routing and attention */
        "{\"model_type\": \"deepseek_v3\", \"first_k_dense_replace\": 1, \"hidden_size\": "
        "2048, \"intermediate_size\": 11264, \"kv_lora_rank\": 512, "
        "\"max_position_embeddings\": 8192, \"moe_intermediate_size\": 1408, "
        "\"moe_layer_freq\": 1, \"n_group\": 1, \"n_routed_experts\": 64, "
        "\"n_shared_experts\": 2, \"norm_topk_prob\": true, \"num_attention_heads\": 16, "
        "\"num_experts_per_tok\": 6, \"num_hidden_layers\": 27, \"num_key_value_heads\": 16, "
        "\"q_lora_rank\": null, \"qk_nope_head_dim\": 128, \"qk_rope_head_dim\": 64, "
        "\"rms_norm_eps\": 1e-05, \"rope_scaling\": null, \"rope_theta\": 50000.0, "
        "\"routed_scaling_factor\": 2.446, \"scoring_func\": \"sigmoid\", \"topk_group\": 1, "
        "\"topk_method\": \"noaux_tc\", \"v_head_dim\": 128, \"vocab_size\": 163840}";
    static const char *const kimi_k2 = /* moonshotai/Kimi-K2-Instruct: routing and attention */
        "{\"model_type\": \"deepseek_v3\", \"first_k_dense_replace\": 1, \"hidden_size\": "
        "7168, \"intermediate_size\": 18432, \"kv_lora_rank\": 512, "
        "\"max_position_embeddings\": 131072, \"moe_intermediate_size\": 2048, "
        "\"moe_layer_freq\": 1, \"n_group\": 1, \"n_routed_experts\": 384, "
        "\"n_shared_experts\": 1, \"norm_topk_prob\": true, \"num_attention_heads\": 64, "
        "\"num_experts_per_tok\": 8, \"num_hidden_layers\": 61, \"num_key_value_heads\": 64, "
        "\"q_lora_rank\": 1536, \"qk_nope_head_dim\": 128, \"qk_rope_head_dim\": 64, "
        "\"rms_norm_eps\": 1e-06, \"rope_scaling\": {\"beta_fast\": 1.0, \"beta_slow\": 1.0, "
        "\"factor\": 32.0, \"mscale\": 1.0, \"mscale_all_dim\": 1.0, "
        "\"original_max_position_embeddings\": 4096, \"type\": \"yarn\"}, \"rope_theta\": "
        "50000.0, \"routed_scaling_factor\": 2.827, \"scoring_func\": \"sigmoid\", "
        "\"topk_group\": 1, \"topk_method\": \"noaux_tc\", \"v_head_dim\": 128, "
        "\"vocab_size\": 163840}";
    grpo_model_config c;
    double ms = 0.1 * 0.707 * log(40.0) + 1.0;
    assert_int_equal(grpo_model_config_parse(&c, v2_lite, strlen(v2_lite), "l"), GRPO_OK);
    assert_true(c.arch == GRPO_ARCH_DEEPSEEK_V2 && c.q_lora_rank == 0 && c.n_group == 1);
    assert_true(c.n_moe_layers == 26 && c.n_routed_experts == 64 && c.n_shared_experts == 2);
    assert_true(c.bos_token_id == 100000 && c.eos_token_id == 100001);
    assert_int_equal(grpo_model_kv_row(&c), 576);
    assert_float_equal(c.softmax_scale, ms * ms / sqrt(192.0), 1e-7);
    assert_int_equal(grpo_model_config_parse(&c, v2, strlen(v2), "v"), GRPO_OK);
    assert_true(c.n_group == 8 && c.topk_group == 3 && c.q_lora_rank == 1536);
    assert_true(c.n_moe_layers == 59 && c.routed_scaling_factor == 16.0f);
    assert_int_equal(grpo_model_route_bytes(&c), 1);
    assert_int_equal(grpo_model_config_parse(&c, moonlight, strlen(moonlight), "m"), GRPO_OK);
    assert_true(c.arch == GRPO_ARCH_DEEPSEEK_V3 && c.n_group == 1 && !c.rope_yarn);
    assert_float_equal(c.softmax_scale, 1 / sqrt(192.0), 1e-9);
    assert_int_equal(grpo_model_config_parse(&c, kimi_k2, strlen(kimi_k2), "k"), GRPO_OK);
    assert_true(c.n_routed_experts == 384 && c.n_moe_layers == 60);
    assert_int_equal(grpo_model_route_row_bytes(&c), (size_t)60 * 8 * 2);
    double mk = 0.1 * log(32.0) + 1.0;
    assert_float_equal(c.softmax_scale, mk * mk / sqrt(192.0), 1e-7);
}

/* deepseek_v2 is not refused by the CUDA backend for its model type (its softmax gates run on the
 * host from the router logits copied out): a load asks for the device and fails only for the
 * want of one (or of the CUDA build) where there is none. */
static void
cuda_not_refused_by_type(void **state)
{
    (void)state;
    char d[512];
    grpo_model *m = NULL;
    grpo_model_opts o = {2, 1, 0, 0, 0};
    if (grpo_model_load(&m, v2_dir("v2_lite_bf16", d, sizeof d), &o) == GRPO_OK) {
        grpo_model_destroy(m); /* a device is there */
        return;
    }
    assert_null(m);
    const char *e = grpo_error_last();
    if (strstr(e, "deepseek_v2") != NULL ||
        (strstr(e, "not built") == NULL && strstr(e, "CUDA") == NULL))
        fail_msg("unexpected message: %s", e);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(config_fields_read),
        cmocka_unit_test(config_refused_by_name),
        cmocka_unit_test(published_configs_parse),
        cmocka_unit_test(prefill_matches_transformers),
        cmocka_unit_test(decode_equals_prefill),
        cmocka_unit_test(greedy_matches_transformers),
        cmocka_unit_test(fork_equals_private_prompts),
        cmocka_unit_test(batch_and_threads_invariant),
        cmocka_unit_test(routes_match_transformers),
        cmocka_unit_test(cuda_not_refused_by_type),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
