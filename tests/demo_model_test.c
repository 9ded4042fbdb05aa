/* The bundled demo policy (models/demo, data/demo_prompts.jsonl) against transformers: the model
 * loads through grpo_model_load, greedy decoding through grpo_model_forward (prefill, then one
 * token at a time through the paged cache) reproduces the tokens transformers chose on the
 * FP8-dequantized weights, and the bundled tokenizer renders and encodes every shipped prompt to
 * the ids HF tokenizers gave. Fixture: tests/data/demo/greedy.json, written by
 * tools/demo_model/train.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/json.h"
#include "grpo/model.h"
#include "grpo/tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char g_model_dir[4096], g_fixture[4096], g_prompts[4096];

static cJSON *
load_json(const char *path)
{
    cJSON *j = NULL;
    grpo_err e = grpo__json_parse_file(path, 64u << 20, &j);
    if (e != GRPO_OK)
        fail_msg("%s: %s", path, grpo_error_last());
    return j;
}

/* ids[] of a JSON array of integers; returns the count. */
static size_t
int_array(const cJSON *arr, int32_t **out)
{
    assert_true(cJSON_IsArray(arr));
    size_t n = (size_t)cJSON_GetArraySize(arr);
    int32_t *v = calloc(n ? n : 1, sizeof *v);
    assert_non_null(v);
    size_t i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, arr)
    {
        assert_true(cJSON_IsNumber(x));
        v[i++] = (int32_t)x->valuedouble;
    }
    *out = v;
    return n;
}

static int
cfg_int(const cJSON *cfg, const char *key)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (!cJSON_IsNumber(x))
        fail_msg("config.json: %s missing", key);
    return (int)x->valuedouble;
}

/* The loader's view of config.json agrees with the file read here independently. */
static void
test_config(void **state)
{
    (void)state;
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", g_model_dir);
    cJSON *cfg = load_json(path);
    grpo_model *m = NULL;
    grpo_model_opts o = {.n_threads = 2};
    if (grpo_model_load(&m, g_model_dir, &o) != GRPO_OK)
        fail_msg("grpo_model_load(%s): %s", g_model_dir, grpo_error_last());
    const grpo_model_config *c = grpo_model_get_config(m);
    assert_int_equal(c->hidden_size, cfg_int(cfg, "hidden_size"));
    assert_int_equal(c->num_hidden_layers, cfg_int(cfg, "num_hidden_layers"));
    assert_int_equal(c->vocab_size, cfg_int(cfg, "vocab_size"));
    assert_int_equal(c->q_lora_rank, cfg_int(cfg, "q_lora_rank"));
    assert_int_equal(c->kv_lora_rank, cfg_int(cfg, "kv_lora_rank"));
    assert_int_equal(c->qk_rope_head_dim, cfg_int(cfg, "qk_rope_head_dim"));
    assert_int_equal(c->n_routed_experts, cfg_int(cfg, "n_routed_experts"));
    assert_int_equal(c->n_group, cfg_int(cfg, "n_group"));
    assert_int_equal(c->topk_group, cfg_int(cfg, "topk_group"));
    assert_int_equal(c->first_k_dense_replace, cfg_int(cfg, "first_k_dense_replace"));
    /* What the demo is meant to exercise: dense + MoE layers, group-limited routing, YaRN, FP8. */
    assert_true(c->first_k_dense_replace >= 1 &&
                c->num_hidden_layers - c->first_k_dense_replace >= 2);
    assert_true(c->n_group > 1 && c->topk_group < c->n_group);
    assert_true(c->rope_yarn);
    assert_true(c->fp8);
    assert_int_equal(c->fp8_block[0], 128);
    assert_int_equal(c->fp8_block[1], 128);
    assert_int_equal(c->bos_token_id, 0);
    assert_int_equal(c->eos_token_id, 1);
    assert_int_equal(strlen(grpo_model_weights_sha256(m)), 64);
    grpo_model_destroy(m);
    cJSON_Delete(cfg);
}

static int
argmax2(const float *v, int n, float *margin)
{
    int a = 0, b = -1;
    for (int i = 1; i < n; i++) {
        if (v[i] > v[a]) {
            b = a;
            a = i;
        } else if (b < 0 || v[i] > v[b]) {
            b = i;
        }
    }
    *margin = v[a] - v[b];
    return a;
}

/* Greedy decoding: the prompt in one prefill item, then one token per forward, each step's argmax
 * equal to transformers' and its top-1 minus top-2 margin close to transformers'. */
static void
test_greedy(void **state)
{
    (void)state;
    cJSON *fix = load_json(g_fixture);
    grpo_model *m = NULL;
    grpo_model_opts o = {.n_threads = 2};
    if (grpo_model_load(&m, g_model_dir, &o) != GRPO_OK)
        fail_msg("grpo_model_load(%s): %s", g_model_dir, grpo_error_last());
    const grpo_model_config *c = grpo_model_get_config(m);
    grpo_kv *kv = NULL;
    assert_int_equal(grpo_kv_create(&kv, c, 32u << 20), GRPO_OK);
    float *logits = malloc(sizeof(float) * (size_t)c->vocab_size);
    assert_non_null(logits);
    const cJSON *prompts = cJSON_GetObjectItemCaseSensitive(fix, "prompts"), *p;
    int n_prompts = 0;
    cJSON_ArrayForEach(p, prompts)
    {
        const char *id = cJSON_GetObjectItemCaseSensitive(p, "id")->valuestring;
        int32_t *pids, *want;
        size_t np = int_array(cJSON_GetObjectItemCaseSensitive(p, "prompt_ids"), &pids);
        size_t ng = int_array(cJSON_GetObjectItemCaseSensitive(p, "greedy_ids"), &want);
        const cJSON *margins = cJSON_GetObjectItemCaseSensitive(p, "margins");
        int32_t seq;
        assert_int_equal(grpo_kv_seq_new(kv, &seq), GRPO_OK);
        grpo_fwd_item it = {.seq = seq, .pos0 = 0, .n = (int32_t)np, .tokens = pids};
        for (size_t k = 0; k < ng; k++) {
            if (grpo_model_forward(m, kv, &it, 1, logits) != GRPO_OK)
                fail_msg("%s step %zu: %s", id, k, grpo_error_last());
            float mg;
            int got = argmax2(logits, c->vocab_size, &mg);
            double want_mg = cJSON_GetArrayItem(margins, (int)k)->valuedouble;
            if (got != want[k])
                fail_msg("%s: greedy token %zu is %d, transformers chose %d (its margin %.4f, ours "
                         "%.4f)",
                         id, k, got, want[k], want_mg, mg);
            if (fabs(mg - want_mg) > 0.02 + 0.01 * fabs(want_mg))
                fail_msg("%s: step %zu top-1/top-2 margin %.4f vs transformers %.4f", id, k, mg,
                         want_mg);
            it.pos0 += it.n;
            it.n = 1;
            it.tokens = &want[k];
        }
        assert_int_equal(grpo_kv_seq_len(kv, seq), (int32_t)(np + ng - 1));
        grpo_kv_seq_free(kv, seq);
        free(pids);
        free(want);
        n_prompts++;
    }
    assert_true(n_prompts >= 3);
    assert_int_equal(grpo_kv_pages_used(kv), 0);
    free(logits);
    grpo_kv_destroy(kv);
    grpo_model_destroy(m);
    cJSON_Delete(fix);
}

static void
assert_ids_equal(const char *what, const int32_t *got, size_t ng, const int32_t *want, size_t nw)
{
    size_t n = ng < nw ? ng : nw;
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i])
            fail_msg("%s: id %zu is %d, HF tokenizers gave %d", what, i, got[i], want[i]);
    if (ng != nw)
        fail_msg("%s: %zu ids, HF tokenizers gave %zu", what, ng, nw);
}

/* Every shipped prompt rendered with the R1 template and encoded: same ids as HF; the rendered
 * text encoded with special-token parsing: same ids; greedy completions decode to the same text. */
static void
test_tokenizer(void **state)
{
    (void)state;
    cJSON *fix = load_json(g_fixture);
    grpo_tokenizer *tok = NULL;
    if (grpo_tokenizer_load(&tok, g_model_dir, NULL) != GRPO_OK)
        fail_msg("grpo_tokenizer_load(%s): %s", g_model_dir, grpo_error_last());
    assert_int_equal(grpo_tokenizer_chat_family(tok), GRPO_CHAT_R1);
    assert_int_equal(grpo_tokenizer_bos_id(tok), 0);
    assert_int_equal(grpo_tokenizer_eos_id(tok), 1);
    assert_int_equal(grpo_tokenizer_token_id(tok, "<think>"), 5);
    assert_int_equal(grpo_tokenizer_token_id(tok, "</think>"), 6);
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(fix, "tokenized"), *p;
    int n = 0;
    cJSON_ArrayForEach(p, list)
    {
        const char *id = cJSON_GetObjectItemCaseSensitive(p, "id")->valuestring;
        const char *q = cJSON_GetObjectItemCaseSensitive(p, "question")->valuestring;
        const char *text = cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring;
        int32_t *want, *got = NULL;
        size_t nw = int_array(cJSON_GetObjectItemCaseSensitive(p, "ids"), &want), ng = 0;
        grpo_chat_message msg = {.role = "user", .content = q};
        if (grpo_chat_encode(tok, GRPO_CHAT_NONE, &msg, 1, 1, &got, &ng) != GRPO_OK)
            fail_msg("%s: chat encode: %s", id, grpo_error_last());
        assert_ids_equal(id, got, ng, want, nw);
        free(got);
        char *rendered = NULL;
        size_t rlen = 0;
        assert_int_equal(grpo_chat_render(tok, GRPO_CHAT_NONE, &msg, 1, 1, &rendered, &rlen),
                         GRPO_OK);
        assert_string_equal(rendered, text);
        free(rendered);
        assert_int_equal(
            grpo_tokenizer_encode(tok, text, strlen(text), GRPO_TOK_PARSE_SPECIAL, &got, &ng),
            GRPO_OK);
        assert_ids_equal(id, got, ng, want, nw);
        free(got);
        free(want);
        n++;
    }
    assert_true(n >= 8);
    const cJSON *prompts = cJSON_GetObjectItemCaseSensitive(fix, "prompts");
    cJSON_ArrayForEach(p, prompts)
    {
        int32_t *ids;
        size_t nids = int_array(cJSON_GetObjectItemCaseSensitive(p, "greedy_ids"), &ids);
        char *text = NULL;
        size_t len = 0;
        assert_int_equal(grpo_tokenizer_decode(tok, ids, nids, 0, &text, &len), GRPO_OK);
        assert_string_equal(text, cJSON_GetObjectItemCaseSensitive(p, "completion")->valuestring);
        free(text);
        free(ids);
    }
    grpo_tokenizer_destroy(tok);
    cJSON_Delete(fix);
}

/* data/demo_prompts.jsonl is in the `grpo rollout` prompt format, with a gold answer or tests, and
 * lists the prompts the tokenizer fixture holds, in order. */
static void
test_prompts_file(void **state)
{
    (void)state;
    cJSON *fix = load_json(g_fixture);
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(fix, "tokenized");
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(grpo__read_file(g_prompts, 1u << 20, &text, &len), GRPO_OK);
    int line = 0, n_math = 0, n_code = 0;
    for (char *s = text, *nl; *s; s = nl + 1) {
        nl = strchr(s, '\n');
        assert_non_null(nl);
        cJSON *j = NULL;
        if (grpo__json_parse(s, (size_t)(nl - s), "data/demo_prompts.jsonl", &j) != GRPO_OK)
            fail_msg("line %d: %s", line + 1, grpo_error_last());
        const char *id, *prompt, *task;
        assert_int_equal(grpo__json_str(j, "id", "prompts", &id), GRPO_OK);
        assert_int_equal(grpo__json_str(j, "prompt", "prompts", &prompt), GRPO_OK);
        assert_int_equal(grpo__json_str(j, "task", "prompts", &task), GRPO_OK);
        const cJSON *want = cJSON_GetArrayItem(list, line);
        assert_non_null(want);
        assert_string_equal(id, cJSON_GetObjectItemCaseSensitive(want, "id")->valuestring);
        assert_string_equal(prompt,
                            cJSON_GetObjectItemCaseSensitive(want, "question")->valuestring);
        if (strcmp(task, "math") == 0) {
            const char *ans;
            assert_int_equal(grpo__json_str(j, "answer", "prompts", &ans), GRPO_OK);
            char *end;
            (void)strtol(ans, &end, 10);
            assert_true(*ans && *end == '\0');
            n_math++;
        } else {
            assert_string_equal(task, "code");
            const char *lang, *fn;
            assert_int_equal(grpo__json_str(j, "language", "prompts", &lang), GRPO_OK);
            assert_string_equal(lang, "python");
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "tests");
            assert_true(cJSON_IsObject(t));
            assert_int_equal(grpo__json_str(t, "fn_name", "tests", &fn), GRPO_OK);
            assert_non_null(strstr(prompt, fn));
            const cJSON *in = cJSON_GetObjectItemCaseSensitive(t, "inputs");
            const cJSON *out = cJSON_GetObjectItemCaseSensitive(t, "outputs");
            assert_true(cJSON_IsArray(in) && cJSON_IsArray(out));
            assert_true(cJSON_GetArraySize(in) > 0);
            assert_int_equal(cJSON_GetArraySize(in), cJSON_GetArraySize(out));
            n_code++;
        }
        cJSON_Delete(j);
        line++;
    }
    assert_int_equal(line, cJSON_GetArraySize(list));
    assert_true(n_math >= 8 && n_code >= 1);
    free(text);
    cJSON_Delete(fix);
}

int
main(void)
{
    const char *src = getenv("GRPO_SOURCE_DIR");
    if (src == NULL)
        src = "..";
    snprintf(g_model_dir, sizeof g_model_dir, "%s/models/demo", src);
    snprintf(g_fixture, sizeof g_fixture, "%s/tests/data/demo/greedy.json", src);
    snprintf(g_prompts, sizeof g_prompts, "%s/data/demo_prompts.jsonl", src);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prompts_file),
        cmocka_unit_test(test_tokenizer),
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_greedy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
