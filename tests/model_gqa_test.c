/* The dense GQA families (qwen2, llama, qwen3) against transformers (tests/data/gqa_models, made
 * by tools/make_gqa_models.py): prefill and decode logits, greedy sequences; and against
 * themselves: decode equals prefill bit for bit, forked samples equal private prompts, batch
 * composition and thread count change nothing. Plus the config values refused by name. */
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

static const char *const fixtures[] = {"qwen2_tied",     "qwen2_mqa_f16", "llama3_bf16",
                                       "llama_bias_f32", "qwen3_bf16",    "qwen3_fp8",
                                       "qwen3_moe_norm", "qwen3_moe_64x8"};
#define N_FIX (sizeof fixtures / sizeof fixtures[0])

typedef tm_fx fx;

static const char *
gqa_dir(const char *name, char *buf, size_t n)
{
    return tm_set_dir("gqa_models", name, buf, n);
}

static int
fx_open(fx *f, const char *name, int threads)
{
    return tm_fx_open(f, "gqa_models", name, threads, MAXV);
}

static void
fx_close(fx *f)
{
    tm_fx_close(f);
}

#include "tests/model_fx_checks.h"

/* A 5-token prefill, then one token at a time: every step bit-identical to the same position of
 * the one-shot prefill (and so within TOL of transformers); a prefill in two chunks across the
 * page boundary likewise. */
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
    for (int t = p0; t < n; t++) {
        fwd(f->m, kv, b, t, 1, f->e.tokens + t, lg, 0);
        assert_memory_equal(lg, all + (size_t)t * V, (size_t)V * 4);
    }
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
    fwd(f->m, kv2, s, 0, P + 1, tok, pre, 0);
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

/* ---- config.json ---- */

static char *
fixture_config(const char *name)
{
    char d[1024], p[1100];
    char *buf = NULL;
    size_t len = 0;
    snprintf(p, sizeof p, "%s/config.json", gqa_dir(name, d, sizeof d));
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
    assert_int_equal(parse_patched("qwen2_tied", "{", "{", &c), GRPO_OK);
    assert_int_equal(c.arch, GRPO_ARCH_QWEN2);
    assert_true(c.qkv_bias && !c.o_bias && !c.qk_norm && c.tie_word_embeddings);
    assert_int_equal(c.head_dim, 16);
    assert_int_equal(c.num_key_value_heads, 2);
    assert_float_equal(c.rope_theta, 1e6, 0);
    assert_int_equal(grpo_model_kv_row(&c), 2 * 2 * 16);
    assert_int_equal(parse_patched("llama3_bf16", "{", "{", &c), GRPO_OK);
    assert_int_equal(c.arch, GRPO_ARCH_LLAMA);
    assert_true(c.rope_llama3 && !c.qkv_bias && !c.o_bias);
    assert_int_equal(c.head_dim, 24);
    assert_int_equal(c.llama3_original_max_position, 64);
    assert_float_equal(c.llama3_factor, 8, 0);
    assert_float_equal(c.softmax_scale, 1 / sqrt(24.0), 1e-7);
    assert_int_equal(parse_patched("llama_bias_f32", "{", "{", &c), GRPO_OK);
    assert_true(c.qkv_bias && c.o_bias);
    assert_int_equal(parse_patched("qwen3_fp8", "{", "{", &c), GRPO_OK);
    assert_int_equal(c.arch, GRPO_ARCH_QWEN3);
    assert_true(c.qk_norm && c.fp8 && c.head_dim == 20);
    assert_int_equal(parse_patched("qwen3_moe_64x8", "{", "{", &c), GRPO_OK);
    assert_int_equal(c.arch, GRPO_ARCH_QWEN3_MOE);
    assert_true(c.qk_norm && !c.norm_topk_prob && c.n_routed_experts == 64);
    assert_true(c.num_experts_per_tok == 8 && c.moe_intermediate_size == 8);
    assert_int_equal(c.n_moe_layers, 2);
    assert_string_equal(grpo_model_type_name(&c), "qwen3_moe");
    assert_int_equal(parse_patched("qwen3_moe_norm", "{", "{", &c), GRPO_OK);
    assert_true(c.norm_topk_prob);
    /* qwen3 without head_dim: transformers' default 128, not hidden / heads */
    assert_int_equal(parse_patched("qwen3_bf16", "\"head_dim\": 32,", "", &c), GRPO_OK);
    assert_int_equal(c.head_dim, 128);
    assert_int_equal(parse_patched("qwen2_tied", "\"layer_types\"", "\"ignored_key\"", &c),
                     GRPO_OK);
    /* as R1-Distill-Qwen's config.json: a sliding_window size with use_sliding_window false */
    assert_int_equal(parse_patched("qwen2_tied", "\"sliding_window\": null",
                                   "\"sliding_window\": 4096, \"use_mrope\": false", &c),
                     GRPO_OK);
}

static void
config_refused_by_name(void **state)
{
    (void)state;
    static const struct {
        const char *fixture, *from, *to, *key;
    } cases[] = {
        {"qwen2_tied", "\"use_sliding_window\": false", "\"use_sliding_window\": true",
         "use_sliding_window"},
        {"qwen3_bf16", "\"full_attention\"", "\"sliding_attention\"", "layer_types"},
        {"qwen2_tied", "\"rope_scaling\": null",
         "\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4.0}", "yarn"},
        {"qwen3_bf16", "\"rope_scaling\": null",
         "\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2.0}", "linear"},
        {"llama3_bf16", "\"rope_type\": \"llama3\"", "\"rope_type\": \"dynamic\"", "dynamic"},
        {"llama3_bf16", "\"low_freq_factor\": 1.0", "\"low_freq_factor\": 1.0, \"beta\": 2",
         "beta"},
        {"llama3_bf16", "\"low_freq_factor\": 1.0,", "", "low_freq_factor"},
        {"llama3_bf16", "\"mlp_bias\": false", "\"mlp_bias\": true", "mlp_bias"},
        {"llama3_bf16", "{", "{\"partial_rotary_factor\": 0.5, ", "partial_rotary_factor"},
        {"qwen2_tied", "{", "{\"attention_sinks\": true, ", "attention_sinks"},
        {"qwen2_tied", "{", "{\"use_mrope\": true, ", "use_mrope"},
        {"qwen2_tied", "\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"", "hidden_act"},
        {"qwen2_tied", "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3",
         "num_key_value_heads"},
        {"qwen3_bf16", "\"head_dim\": 32", "\"head_dim\": 7", "head_dim"},
        {"qwen3_bf16", "\"model_type\": \"qwen3\"", "\"model_type\": \"gemma2\"",
         "model_type"},
        {"qwen3_bf16", "\"model_type\": \"qwen3\"", "\"model_type\": \"qwen3_moe\"", "num_experts"},
        {"qwen3_moe_norm", "\"decoder_sparse_step\": 1", "\"decoder_sparse_step\": 2",
         "decoder_sparse_step"},
        {"qwen3_moe_norm", "\"mlp_only_layers\": []", "\"mlp_only_layers\": [0]",
         "mlp_only_layers"},
        {"qwen3_moe_norm", "\"num_experts_per_tok\": 4", "\"num_experts_per_tok\": 17",
         "num_experts_per_tok"},
        {"llama3_bf16", "\"pretraining_tp\": 1", "\"pretraining_tp\": 2", "pretraining_tp"},
        {"qwen2_tied", "\"rms_norm_eps\": 1e-06", "\"rms_norm_eps\": 0", "rms_norm_eps"},
        {"qwen2_tied", "{", "{\"quantization_config\": {\"quant_method\": \"awq\"}, ",
         "quant_method"},
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

/* The published checkpoints' config.json key sets and values (written out here for the fields
 * that matter): each parses, with the derived fields the forward uses. */
static void
published_configs_parse(void **state)
{
    (void)state;
    static const char *const qwen25_05b = /* Qwen2.5-0.5B-Instruct, transformers 4.43 */
        "{\"architectures\": [\"Qwen2ForCausalLM\"], \"attention_dropout\": 0.0, "
        "\"bos_token_id\": 151643, \"eos_token_id\": 151645, \"hidden_act\": \"silu\", "
        "\"hidden_size\": 896, \"initializer_range\": 0.02, \"intermediate_size\": 4864, "
        "\"max_position_embeddings\": 32768, \"max_window_layers\": 21, \"model_type\": "
        "\"qwen2\", \"num_attention_heads\": 14, \"num_hidden_layers\": 24, "
        "\"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, "
        "\"sliding_window\": 32768, \"tie_word_embeddings\": true, \"torch_dtype\": "
        "\"bfloat16\", \"transformers_version\": \"4.43.1\", \"use_cache\": true, "
        "\"use_sliding_window\": false, \"vocab_size\": 151936}";
    static const char *const distill_qwen_15b_v5 = /* R1-Distill-Qwen-1.5B's shapes, v5 style */
        "{\"model_type\": \"qwen2\", \"hidden_size\": 1536, \"intermediate_size\": 8960, "
        "\"num_hidden_layers\": 28, \"num_attention_heads\": 12, \"num_key_value_heads\": 2, "
        "\"max_position_embeddings\": 131072, \"vocab_size\": 151936, \"rms_norm_eps\": 1e-06, "
        "\"rope_parameters\": {\"rope_theta\": 10000.0, \"rope_type\": \"default\"}, "
        "\"layer_types\": [\"full_attention\", \"full_attention\"], \"sliding_window\": null, "
        "\"use_sliding_window\": false, \"use_mrope\": false, \"tie_word_embeddings\": false, "
        "\"bos_token_id\": 151646, \"eos_token_id\": 151643}";
    static const char *const llama31_8b = /* Llama-3.1-8B-Instruct, R1-Distill-Llama-8B */
        "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false, "
        "\"attention_dropout\": 0.0, \"bos_token_id\": 128000, \"eos_token_id\": [128001, "
        "128008, 128009], \"hidden_act\": \"silu\", \"hidden_size\": 4096, "
        "\"intermediate_size\": 14336, \"max_position_embeddings\": 131072, \"mlp_bias\": "
        "false, \"model_type\": \"llama\", \"num_attention_heads\": 32, \"num_hidden_layers\": "
        "32, \"num_key_value_heads\": 8, \"pretraining_tp\": 1, \"rms_norm_eps\": 1e-05, "
        "\"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": "
        "4.0, \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}, "
        "\"rope_theta\": 500000.0, \"tie_word_embeddings\": false, \"vocab_size\": 128256}";
    static const char *const qwen3_30b_a3b =
        "{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"attention_bias\": false, "
        "\"decoder_sparse_step\": 1, \"eos_token_id\": 151645, \"head_dim\": 128, "
        "\"hidden_act\": \"silu\", \"hidden_size\": 2048, \"intermediate_size\": 6144, "
        "\"max_position_embeddings\": 40960, \"max_window_layers\": 48, \"mlp_only_layers\": [], "
        "\"model_type\": \"qwen3_moe\", \"moe_intermediate_size\": 768, \"norm_topk_prob\": "
        "true, \"num_attention_heads\": 32, \"num_experts\": 128, \"num_experts_per_tok\": 8, "
        "\"num_hidden_layers\": 48, \"num_key_value_heads\": 4, \"output_router_logits\": "
        "false, \"rms_norm_eps\": 1e-06, \"rope_scaling\": null, \"rope_theta\": 1000000.0, "
        "\"router_aux_loss_coef\": 0.001, \"sliding_window\": null, \"tie_word_embeddings\": "
        "false, \"use_sliding_window\": false, \"vocab_size\": 151936}";
    grpo_model_config c;
    assert_int_equal(grpo_model_config_parse(&c, qwen25_05b, strlen(qwen25_05b), "q"), GRPO_OK);
    assert_true(c.arch == GRPO_ARCH_QWEN2 && c.head_dim == 64 && c.qkv_bias &&
                c.tie_word_embeddings);
    assert_int_equal(grpo_model_kv_row(&c), 2 * 2 * 64);
    assert_int_equal(c.eos_token_id, 151645);
    assert_int_equal(
        grpo_model_config_parse(&c, distill_qwen_15b_v5, strlen(distill_qwen_15b_v5), "d"),
        GRPO_OK);
    assert_true(c.head_dim == 128 && c.rope_theta == 10000.0 && !c.tie_word_embeddings);
    assert_int_equal(grpo_model_config_parse(&c, llama31_8b, strlen(llama31_8b), "l"), GRPO_OK);
    assert_true(c.arch == GRPO_ARCH_LLAMA && c.rope_llama3 && c.head_dim == 128);
    assert_string_equal(grpo_model_type_name(&c), "llama");
    assert_true(c.llama3_original_max_position == 8192 && c.eos_token_id == 128001);
    assert_true(!c.qkv_bias && !c.o_bias && c.num_key_value_heads == 8);
    assert_int_equal(grpo_model_config_parse(&c, qwen3_30b_a3b, strlen(qwen3_30b_a3b), "m"),
                     GRPO_OK);
    assert_true(c.arch == GRPO_ARCH_QWEN3_MOE && c.qk_norm && c.norm_topk_prob);
    assert_true(c.n_routed_experts == 128 && c.num_experts_per_tok == 8 && c.n_moe_layers == 48);
    assert_int_equal(grpo_model_kv_row(&c), 2 * 4 * 128);
}

/* The staged CUDA table (backend 1, a test vehicle) has no GQA attention: asking for it fails at
 * load time with a message naming the device-resident table, before any device is looked for (a
 * CPU-only build says the backend is not built). */
static void
cuda_staged_refused(void **state)
{
    (void)state;
    char d[512];
    grpo_model *m = (grpo_model *)1;
    grpo_model_opts o = {1, 1, 0, 0, 0};
    assert_int_not_equal(grpo_model_load(&m, gqa_dir("qwen2_tied", d, sizeof d), &o), GRPO_OK);
    assert_null(m);
    const char *e = grpo_error_last();
    if (strstr(e, "backend 2") == NULL && strstr(e, "not built") == NULL)
        fail_msg("unexpected message: %s", e);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(config_fields_read),
        cmocka_unit_test(config_refused_by_name),
        cmocka_unit_test(prefill_matches_transformers),
        cmocka_unit_test(decode_equals_prefill),
        cmocka_unit_test(greedy_matches_transformers),
        cmocka_unit_test(fork_equals_private_prompts),
        cmocka_unit_test(batch_and_threads_invariant),
        cmocka_unit_test(cuda_staged_refused),
        cmocka_unit_test(published_configs_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
