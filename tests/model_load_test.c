/* Loading: config.json fields and refusals, the safetensors header parser on crafted bytes, and
 * damaged copies of the tiny fixture models (truncated shard, missing tensor, wrong shape, bad
 * config field) refused with messages naming the file and the tensor. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "rollout/model/model_int.h"
#include "tests/model_testutil.h"

#include <dirent.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

static char *
slurp(const char *path, size_t *len)
{
    char *buf = NULL;
    assert_int_equal(grpo__read_file(path, 0, &buf, len), GRPO_OK);
    return buf;
}

static void
spit(const char *path, const void *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, len, f), len);
    fclose(f);
}

/* Copies every file of fixture `name` into a fresh temp dir; returns its path (static buffer). */
static const char *
copy_fixture(const char *name)
{
    static char tmp[256];
    char src[1024], a[2048], b[2048];
    snprintf(tmp, sizeof tmp, "/tmp/grpo_model_test_XXXXXX");
    assert_non_null(mkdtemp(tmp));
    tm_dir(name, src, sizeof src);
    DIR *d = opendir(src);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(a, sizeof a, "%s/%s", src, e->d_name);
        snprintf(b, sizeof b, "%s/%s", tmp, e->d_name);
        size_t n;
        char *buf = slurp(a, &n);
        spit(b, buf, n);
        free(buf);
    }
    closedir(d);
    return tmp;
}

static void
rm_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *e;
    char p[2048];
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

/* Replaces the first occurrence of `from` in the file by `to` (same length). */
static void
patch_file(const char *path, const char *from, const char *to)
{
    size_t n;
    char *buf = slurp(path, &n);
    size_t fl = strlen(from);
    assert_int_equal(fl, strlen(to));
    char *hit = memmem(buf, n, from, fl);
    assert_non_null(hit);
    memcpy(hit, to, fl);
    spit(path, buf, n);
    free(buf);
}

static grpo_err
load(const char *dir)
{
    grpo_model *m = NULL;
    grpo_model_opts o = {1, 0, 1, 0, 0};
    grpo_err err = grpo_model_load(&m, dir, &o);
    grpo_model_destroy(m);
    return err;
}

static void
loads_fixtures(void **state)
{
    (void)state;
    char dir[1024];
    grpo_model *m = NULL;
    grpo_model_opts o = {1, 0, 1, 0, 0};
    assert_int_equal(grpo_model_load(&m, tm_dir("bf16", dir, sizeof dir), &o), GRPO_OK);
    const grpo_model_config *c = grpo_model_get_config(m);
    assert_int_equal(c->vocab_size, 512);
    assert_int_equal(c->q_lora_rank, 0);
    assert_int_equal(c->fp8, 0);
    assert_int_equal(c->n_moe_layers, 2);
    assert_int_equal(c->rope_yarn, 1);
    assert_int_equal(c->yarn_original_max_position, 32);
    assert_int_equal(c->num_nextn_predict_layers, 1);
    double ms = 0.1 * log(40.0) + 1.0;
    assert_float_equal(c->softmax_scale, ms * ms / sqrt(48.0), 1e-6);
    assert_float_equal(c->rope_attn_factor, 1.0, 1e-7);
    assert_true(grpo_model_has_mtp(m));
    const char *sha = grpo_model_weights_sha256(m);
    char want[65];
    char p[2048];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    assert_int_equal(grpo_sha256_file(p, want), GRPO_OK); /* one file: the digest is the file's */
    assert_string_equal(sha, want);
    grpo_model_destroy(m);
    o.load_mtp = 0;
    assert_int_equal(grpo_model_load(&m, dir, &o), GRPO_OK);
    assert_false(grpo_model_has_mtp(m));
    grpo_model_destroy(m);
    assert_int_equal(grpo_model_load(&m, tm_dir("fp8", dir, sizeof dir), &o), GRPO_OK);
    c = grpo_model_get_config(m);
    assert_int_equal(c->fp8, 1);
    assert_int_equal(c->fp8_block[0], 128);
    assert_int_equal(c->q_lora_rank, 256);
    assert_false(grpo_model_has_mtp(m));
    grpo_model_destroy(m);
}

static void
truncated_shard_refused(void **state)
{
    (void)state;
    const char *d = copy_fixture("fp8");
    char p[1024];
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", d);
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(truncate(p, st.st_size - 1000), 0);
    assert_int_equal(load(d), GRPO_EFORMAT);
    const char *msg = grpo_error_last();
    printf("    %s\n", msg);
    assert_non_null(strstr(msg, "model-00002-of-00002.safetensors"));
    assert_non_null(strstr(msg, "tensor \"model."));
    assert_non_null(strstr(msg, "truncated"));
    /* cut inside the header */
    assert_int_equal(truncate(p, 100), 0);
    assert_int_equal(load(d), GRPO_EFORMAT);
    assert_non_null(strstr(grpo_error_last(), "model-00002-of-00002.safetensors"));
    rm_dir(d);
}

static void
missing_tensor_refused(void **state)
{
    (void)state;
    const char *d = copy_fixture("bf16");
    char p[1024];
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    patch_file(p, "model.layers.2.self_attn.o_proj.weight",
               "model.layers.2.self_attn.o_proj.weighX");
    assert_int_equal(load(d), GRPO_ENOTFOUND);
    printf("    %s\n", grpo_error_last());
    assert_non_null(strstr(grpo_error_last(), "\"model.layers.2.self_attn.o_proj.weight\""));
    assert_non_null(strstr(grpo_error_last(), d));
    rm_dir(d);
    /* sharded: the index names a shard that lacks the tensor */
    d = copy_fixture("fp8");
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", d);
    patch_file(p, "model.layers.0.mlp.down_proj.weight\"", "model.layers.0.mlp.down_proj.weighX\"");
    assert_int_equal(load(d), GRPO_ENOTFOUND);
    printf("    %s\n", grpo_error_last());
    assert_non_null(strstr(grpo_error_last(), "model.layers.0.mlp.down_proj.weight"));
    assert_non_null(strstr(grpo_error_last(), "model-00001-of-00002.safetensors"));
    rm_dir(d);
    /* FP8 weight without its scale */
    d = copy_fixture("fp8");
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", d);
    patch_file(p, "\"model.layers.0.self_attn.o_proj.weight_scale_inv\"",
               "\"model.layers.0.self_attn.o_proj.weight_scale_inX\"");
    char q[1024];
    for (int i = 1; i <= 2; i++) {
        snprintf(q, sizeof q, "%s/model-0000%d-of-00002.safetensors", d, i);
        size_t n;
        char *buf = slurp(q, &n);
        char *hit = memmem(buf, n, "o_proj.weight_scale_inv", 23);
        while (hit != NULL &&
               (hit - buf < 25 || memcmp(hit - 25, "model.layers.0.self_attn.", 25) != 0))
            hit = memmem(hit + 1, n - (size_t)(hit + 1 - buf), "o_proj.weight_scale_inv", 23);
        if (hit != NULL) {
            hit[22] = 'X';
            spit(q, buf, n);
        }
        free(buf);
    }
    assert_int_equal(load(d), GRPO_ENOTFOUND);
    printf("    %s\n", grpo_error_last());
    assert_non_null(strstr(grpo_error_last(), "model.layers.0.self_attn.o_proj.weight_scale_inv"));
    rm_dir(d);
}

static void
wrong_shape_refused(void **state)
{
    (void)state;
    const char *d = copy_fixture("bf16");
    char p[1024];
    snprintf(p, sizeof p, "%s/config.json", d);
    patch_file(p, "\"moe_intermediate_size\": 32", "\"moe_intermediate_size\": 48");
    assert_int_equal(load(d), GRPO_EFORMAT);
    printf("    %s\n", grpo_error_last());
    assert_non_null(strstr(grpo_error_last(), "model.safetensors"));
    assert_non_null(strstr(grpo_error_last(), "model.layers.1.mlp.experts.0.gate_proj.weight"));
    assert_non_null(strstr(grpo_error_last(), "[32, 128]"));
    rm_dir(d);
}

/* Parses the bf16 fixture's config.json with one substitution into *c; returns the error. */
static grpo_err
parse_patched_cfg(const char *from, const char *to, grpo_model_config *c)
{
    char dir[1024], p[2048];
    snprintf(p, sizeof p, "%s/config.json", tm_dir("bf16", dir, sizeof dir));
    size_t n = 0;
    char *buf = NULL;
    assert_int_equal(grpo__read_file(p, 0, &buf, &n), GRPO_OK);
    const char *hit = strstr(buf, from);
    assert_non_null(hit);
    size_t off = (size_t)(hit - buf), fl = strlen(from), tl = strlen(to);
    char *out = malloc(n + tl + 1);
    memcpy(out, buf, off);
    memcpy(out + off, to, tl);
    strcpy(out + off + tl, buf + off + fl);
    grpo_err err = grpo_model_config_parse(c, out, strlen(out), "x/config.json");
    free(out);
    free(buf);
    return err;
}

static grpo_err
parse_patched(const char *from, const char *to)
{
    grpo_model_config c;
    return parse_patched_cfg(from, to, &c);
}

/* rope_scaling of type "default" with mscale_all_dim: no YaRN frequencies, but transformers
 * still multiplies the softmax scale by mscale(factor, mscale_all_dim)^2 (it was ignored: 0.3
 * relative logit error, found by tools/check_random_configs.py --edge). */
static void
default_rope_mscale(void **state)
{
    (void)state;
    const char *yarn = "\"rope_type\": \"yarn\",\n    \"type\": \"yarn\"";
    const char *dflt = "\"rope_type\": \"default\",\n    \"type\": \"default\"";
    grpo_model_config c;
    const double qk = 32 + 16, m = 0.1 * log(40.0) + 1.0; /* factor 40, mscale_all_dim 1 */
    assert_int_equal(parse_patched_cfg(yarn, dflt, &c), GRPO_OK);
    assert_false(c.rope_yarn);
    assert_float_equal(c.softmax_scale, m * m / sqrt(qk), 1e-6);
    assert_int_equal(parse_patched_cfg(yarn, yarn, &c), GRPO_OK); /* yarn: the same scale */
    assert_true(c.rope_yarn);
    assert_float_equal(c.softmax_scale, m * m / sqrt(qk), 1e-6);
    assert_int_equal(parse_patched_cfg("\"mscale_all_dim\": 1.0", "\"mscale_all_dim\": 0", &c),
                     GRPO_OK); /* mscale_all_dim 0: the plain scale */
    assert_float_equal(c.softmax_scale, 1.0 / sqrt(qk), 1e-6);
}

static void
bad_config_refused(void **state)
{
    (void)state;
    static const struct {
        const char *from, *to, *key;
    } cases[] = {
        {"\"scoring_func\": \"sigmoid\"", "\"scoring_func\": \"softmax\"", "scoring_func"},
        {"\"topk_method\": \"noaux_tc\"", "\"topk_method\": \"greedy\"", "topk_method"},
        {"\"model_type\": \"deepseek_v3\"", "\"model_type\": \"mistral\"", "model_type"},
        {"\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"", "hidden_act"},
        {"\"n_group\": 4", "\"n_group\": 3", "n_group"},
        {"\"rope_type\": \"yarn\"", "\"rope_type\": \"linear\"", "rope_scaling"},
        {"\"beta_fast\": 32.0", "\"beta_fast\": 32, \"attention_factor\": 2", "attention_factor"},
        {"\"kv_lora_rank\": 64", "\"kv_lora_rank\": 0", "kv_lora_rank"},
        {"\"kv_lora_rank\": 64", "\"kv_lora_rank\": \"64\"", "kv_lora_rank"},
        {"\"moe_layer_freq\": 1", "\"moe_layer_freq\": 2", "moe_layer_freq"},
        {"\"attention_bias\": false", "\"attention_bias\": true", "attention_bias"},
        {"\"num_key_value_heads\": 4", "\"num_key_value_heads\": 1", "num_key_value_heads"},
        {"\"rms_norm_eps\": 1e-06", "\"rms_norm_eps\": -1", "rms_norm_eps"},
        {"\"num_experts_per_tok\": 4", "\"num_experts_per_tok\": 9", "num_experts_per_tok"},
        {"\"qk_rope_head_dim\": 16", "\"qk_rope_head_dim\": 15", "qk_rope_head_dim"},
        {"\"tie_word_embeddings\": false", "\"tie_word_embeddings\": \"no\"",
         "tie_word_embeddings"},
        {"\"architectures\"",
         "\"quantization_config\": {\"quant_method\": \"bitsandbytes\"}, "
         "\"architectures\"",
         "quant_method"},
        {"\"architectures\"",
         "\"quantization_config\": {\"quant_method\": \"fp8\", "
         "\"weight_block_size\": null}, \"architectures\"",
         "weight_block_size"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        grpo_err err = parse_patched(cases[i].from, cases[i].to);
        if (err == GRPO_OK || strstr(grpo_error_last(), cases[i].key) == NULL ||
            strstr(grpo_error_last(), "x/config.json") == NULL)
            fail_msg("case %zu (%s): err %d, message \"%s\"", i, cases[i].to, err,
                     grpo_error_last());
    }
    /* the same file unpatched parses */
    assert_int_equal(parse_patched("\"scoring_func\"", "\"scoring_func\""), GRPO_OK);
    /* and a real load names the path of config.json */
    const char *d = copy_fixture("bf16");
    char p[1024];
    snprintf(p, sizeof p, "%s/config.json", d);
    patch_file(p, "\"scoring_func\": \"sigmoid\"", "\"scoring_func\": \"softmax\"");
    assert_int_equal(load(d), GRPO_EUNSUPPORTED);
    assert_non_null(strstr(grpo_error_last(), p));
    rm_dir(d);
}

/* ---- the header parser on crafted bytes ---- */
static grpo_err
parse_st(const char *json, size_t data_len)
{
    size_t hl = strlen(json), n = 8 + hl + data_len;
    uint8_t *buf = calloc(1, n);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, json, hl);
    grpo_st_header h;
    grpo_err err = grpo_model__st_parse(buf, n, "t.safetensors", &h);
    if (err == GRPO_OK) {
        assert_true(h.n >= 0);
        grpo_model__st_header_fini(&h);
    }
    free(buf);
    return err;
}

static void
header_parser(void **state)
{
    (void)state;
    assert_int_equal(parse_st("{\"a\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
                              "\"__metadata__\":{\"format\":\"pt\"}}",
                              12),
                     GRPO_OK);
    assert_int_equal(parse_st("{}", 0), GRPO_OK);
    /* model files may leave gaps between tensors (the bridge's strict options refuse them) */
    assert_int_equal(parse_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                              "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[12,14]}}",
                              14),
                     GRPO_OK);
    /* a zero-size tensor where a non-empty one starts overlaps nothing, whatever the order */
    assert_int_equal(parse_st("{\"a\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]},"
                              "\"z\":{\"dtype\":\"BF16\",\"shape\":[0,3],\"data_offsets\":[0,0]}}",
                              8),
                     GRPO_OK);
    assert_int_equal(parse_st("{\"z\":{\"dtype\":\"BF16\",\"shape\":[0,3],\"data_offsets\":[0,0]},"
                              "\"a\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}",
                              8),
                     GRPO_OK);
    static const struct {
        const char *json;
        size_t data;
        const char *what;
    } bad[] = {
        {"{\"a\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]}}", 11, "truncated"},
        {"{\"a\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,10]}}", 12, "need 12"},
        {"{\"a\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2, "unknown dtype"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
         12, "overlap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "shape"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "data_offsets"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "data_offsets"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
         "\"data_offsets\":[0,8]}}",
         8, "overflow"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, "appears twice"},
        {"[1,2]", 0, "object"},
        {"{\"a\":", 0, "JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        grpo_err err = parse_st(bad[i].json, bad[i].data);
        if (err == GRPO_OK || strstr(grpo_error_last(), bad[i].what) == NULL ||
            strstr(grpo_error_last(), "t.safetensors") == NULL)
            fail_msg("case %zu: err %d, message \"%s\"", i, err, grpo_error_last());
    }
    /* a header length beyond the file */
    uint8_t small[16] = {0xff, 0xff, 0, 0, 0, 0, 0, 0, '{', '}'};
    grpo_st_header h;
    assert_int_equal(grpo_model__st_parse(small, sizeof small, "s", &h), GRPO_EFORMAT);
    assert_int_equal(grpo_model__st_parse(small, 5, "s", &h), GRPO_EFORMAT);
}

int
main(void)
{
    grpo_log_set_level(GRPO_LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(loads_fixtures),         cmocka_unit_test(truncated_shard_refused),
        cmocka_unit_test(missing_tensor_refused), cmocka_unit_test(wrong_shape_refused),
        cmocka_unit_test(bad_config_refused),     cmocka_unit_test(default_rope_mscale),
        cmocka_unit_test(header_parser),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
