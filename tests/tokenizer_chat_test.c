/* rollout/tokenizer chat templates: the native V3 and R1 templates against jinja2's rendering of
 * the real templates (tests/data/tokenizer/chat_cases.json, from tools/make_tokenizer_fixtures.py),
 * text and HF ids, plus the JSON message reader's errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tokenizer_fixtures.h"
#include <cjson/cJSON.h>

static grpo_tokenizer *v3, *r1;

/* The Qwen2 / Llama 3 tokenizers (unpacked by cmake), loaded when a case first needs one. */
static const char *const family_dirs[] = {"qwen2.5", "qwen3",    "r1-distill-qwen",
                                          "llama3",  "llama3.1", "r1-distill-llama"};
static grpo_tokenizer *family_toks[6];

static grpo_tokenizer *
family_tok(const char *variant)
{
    for (size_t i = 0; i < 6; i++) {
        if (strcmp(variant, family_dirs[i]) != 0)
            continue;
        if (family_toks[i] == NULL &&
            grpo_tokenizer_load(&family_toks[i], fx_family_dir(variant), NULL) != GRPO_OK)
            fprintf(stderr, "FATAL: %s\n", grpo_error_last());
        assert_non_null(family_toks[i]);
        return family_toks[i];
    }
    fail_msg("unknown tokenizer %s", variant);
    return NULL;
}

static int
setup(void **state)
{
    (void)state;
    const char *p = fx_v3_path();
    grpo_tokenizer_opts o = {0};
    o.r1 = 1;
    if (p == NULL || grpo_tokenizer_load(&v3, p, NULL) != GRPO_OK ||
        grpo_tokenizer_load(&r1, p, &o) != GRPO_OK) {
        fprintf(stderr, "FATAL: %s\n", grpo_error_last());
        return -1;
    }
    return 0;
}

static int
teardown(void **state)
{
    (void)state;
    grpo_tokenizer_destroy(v3);
    grpo_tokenizer_destroy(r1);
    for (size_t i = 0; i < 6; i++)
        grpo_tokenizer_destroy(family_toks[i]);
    return 0;
}

/* One fixture case: jinja2's text and HF's ids, or a failure where the reference failed. Returns
 * the number of differences (printed). */
static size_t
check_case(cJSON *c, size_t idx)
{
    const char *fam = cJSON_GetObjectItem(c, "family")->valuestring;
    int gen = cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt"));
    cJSON *want_text = cJSON_GetObjectItem(c, "text"), *want_ids = cJSON_GetObjectItem(c, "ids");
    cJSON *want_err = cJSON_GetObjectItem(c, "error");
    char *msgs = cJSON_PrintUnformatted(cJSON_GetObjectItem(c, "messages"));
    grpo_chat_family f = (grpo_chat_family)grpo_chat_family_parse(fam);
    cJSON *variant = cJSON_GetObjectItem(c, "tokenizer");
    const grpo_tokenizer *tok = variant != NULL     ? family_tok(variant->valuestring)
                                : f == GRPO_CHAT_R1 ? r1
                                                    : v3;
    char *text = NULL;
    size_t len = 0, bad = 0;
    grpo_chat chat;
    grpo_err err = grpo_chat_parse_json(&chat, msgs, strlen(msgs), "case");
    if (err == GRPO_OK)
        err = grpo_chat_render(tok, f, chat.msgs, chat.n, gen, &text, &len);
    if (want_err != NULL) {
        if (err == GRPO_OK) {
            fprintf(stderr, "case %zu (%s, gen=%d): jinja2 fails (%s); rendered\n%s\n", idx, fam,
                    gen, want_err->valuestring, text);
            bad++;
        }
    } else if (err != GRPO_OK) {
        fprintf(stderr, "case %zu (%s, gen=%d): %s\n", idx, fam, gen, grpo_error_last());
        bad++;
    } else {
        assert_true(cJSON_IsString(want_text) && cJSON_IsArray(want_ids));
        if (strcmp(text, want_text->valuestring) != 0 || len != strlen(want_text->valuestring)) {
            fprintf(stderr, "case %zu (%s, gen=%d): rendered\n%s\n--- jinja2:\n%s\n", idx, fam, gen,
                    text, want_text->valuestring);
            bad++;
        }
        int32_t *ids;
        size_t ni;
        assert_int_equal(grpo_chat_encode(tok, f, chat.msgs, chat.n, gen, &ids, &ni), GRPO_OK);
        bool same = ni == (size_t)cJSON_GetArraySize(want_ids);
        for (size_t k = 0; same && k < ni; k++)
            same = ids[k] == cJSON_GetArrayItem(want_ids, (int)k)->valueint;
        if (!same) {
            fprintf(stderr, "case %zu (%s): ids differ\n", idx, fam);
            bad++;
        }
        if (variant == NULL)
            assert_int_equal(ids[0], 0); /* BOS once, from the template */
        free(ids);
    }
    grpo_chat_fini(&chat); /* a failed parse leaves it empty */
    free(text);
    free(msgs);
    return bad;
}

/* Every case of a fixture file; at least min_count of them, and min_errors where jinja2 fails. */
static void
check_file(const char *name, size_t min_count, size_t min_errors)
{
    char path[4096], *json;
    size_t n;
    fx_path(path, sizeof path, name);
    assert_int_equal(grpo__read_file(path, 0, &json, &n), GRPO_OK);
    cJSON *cases = cJSON_Parse(json);
    assert_non_null(cases);
    size_t count = 0, bad = 0, errors = 0;
    cJSON *c;
    cJSON_ArrayForEach(c, cases)
    {
        bad += check_case(c, count++);
        errors += cJSON_GetObjectItem(c, "error") != NULL;
    }
    fprintf(stderr, "%s: %zu cases, %zu where jinja2 fails, %zu differ\n", name, count, errors,
            bad);
    assert_true(count >= min_count);
    assert_true(errors >= min_errors);
    assert_int_equal(bad, 0);
    cJSON_Delete(cases);
    free(json);
}

static void
test_jinja_cases(void **state)
{
    (void)state;
    check_file("chat_cases.json", 100, 0);
}

/* Random conversations from tools/check_chat_random.py: every branch of both templates, unknown
 * roles, malformed messages (the reference's failures must be ours too). */
static void
test_jinja_random(void **state)
{
    (void)state;
    check_file("chat_random.json", 900, 80);
}

/* Qwen2.5, Qwen3 (thinking on and off), Llama 3, Llama 3.1 and R1-Distill (on both of its
 * tokenizers) on random conversations from tools/check_chat_family.py, rendered by
 * transformers' apply_chat_template from data/chat-templates/. */
static void
test_jinja_families(void **state)
{
    (void)state;
    check_file("chat_family.json", 600, 60);
}

/* Each tokenizer_config.json's template is recognised by its hash; the R1-Distill prompt opens
 * the think block; a template we do not implement is refused naming the file. */
static void
test_family_detect(void **state)
{
    (void)state;
    static const grpo_chat_family want[6] = {GRPO_CHAT_QWEN25,     GRPO_CHAT_QWEN3,
                                             GRPO_CHAT_R1_DISTILL, GRPO_CHAT_LLAMA3,
                                             GRPO_CHAT_LLAMA31,    GRPO_CHAT_R1_DISTILL};
    for (size_t i = 0; i < 6; i++)
        assert_int_equal(grpo_tokenizer_chat_family(family_tok(family_dirs[i])), want[i]);
    grpo_chat_message m = {"user", "Q", NULL, 0};
    char *text;
    size_t len;
    assert_int_equal(
        grpo_chat_render(family_tok("r1-distill-qwen"), GRPO_CHAT_NONE, &m, 1, 1, &text, &len),
        GRPO_OK);
    assert_string_equal(text, "<｜begin▁of▁sentence｜><｜User｜>Q<｜Assistant｜><think>\n");
    free(text);
    char cfg[4096], dir[4200];
    const char *b = getenv("GRPO_BINARY_DIR");
    snprintf(cfg, sizeof cfg, "%s/tokenizer_chat_test_config.json", b ? b : ".");
    FILE *f = fopen(cfg, "w");
    assert_non_null(f);
    fputs("{\"chat_template\": \"{% for m in messages %}{{ m['content'] }}{% endfor %}\"}", f);
    fclose(f);
    snprintf(dir, sizeof dir, "%s/tokenizer.json", fx_family_dir("qwen2.5"));
    grpo_tokenizer_opts o = {0};
    o.config_path = cfg;
    grpo_tokenizer *t = NULL;
    assert_int_equal(grpo_tokenizer_load(&t, dir, &o), GRPO_OK);
    assert_int_equal(grpo_tokenizer_chat_family(t), GRPO_CHAT_NONE);
    assert_int_equal(grpo_chat_render(t, GRPO_CHAT_NONE, &m, 1, 1, &text, &len), GRPO_EUNSUPPORTED);
    assert_non_null(strstr(grpo_error_last(), cfg));
    assert_int_equal(grpo_chat_render(t, GRPO_CHAT_QWEN25, &m, 1, 1, &text, &len), GRPO_OK);
    assert_string_equal(text, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are "
                              "a helpful assistant.<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n"
                              "<|im_start|>assistant\n");
    free(text);
    grpo_tokenizer_destroy(t);
    remove(cfg);
    /* R1-Distill's template of January 2025 (no "<think>\n" in the prompt) is not R1's: refused,
     * not rendered as R1 although it has DeepSeek's role tokens and </think> */
    char jpath[4096], *tmpl;
    size_t tl;
    snprintf(jpath, sizeof jpath, "%s/data/chat-templates/r1-distill.jinja", fx_source_dir());
    assert_int_equal(grpo__read_file(jpath, 0, &tmpl, &tl), GRPO_OK);
    char *hit = strstr(tmpl, "<think>\\n'}}");
    assert_non_null(hit);
    memmove(hit, hit + strlen("<think>\\n"), strlen(hit + strlen("<think>\\n")) + 1);
    cJSON *cj = cJSON_CreateObject();
    cJSON_AddStringToObject(cj, "chat_template", tmpl);
    char *cs = cJSON_PrintUnformatted(cj);
    f = fopen(cfg, "w");
    assert_non_null(f);
    fputs(cs, f);
    fclose(f);
    snprintf(dir, sizeof dir, "%s/tokenizer.json", fx_family_dir("r1-distill-qwen"));
    assert_int_equal(grpo_tokenizer_load(&t, dir, &o), GRPO_OK);
    assert_int_equal(grpo_tokenizer_chat_family(t), GRPO_CHAT_NONE);
    assert_int_equal(grpo_chat_render(t, GRPO_CHAT_NONE, &m, 1, 1, &text, &len), GRPO_EUNSUPPORTED);
    grpo_tokenizer_destroy(t);
    remove(cfg);
    free(cs);
    cJSON_Delete(cj);
    free(tmpl);
    for (int fam = 0; fam <= GRPO_CHAT_R1_DISTILL; fam++)
        assert_int_equal(grpo_chat_family_parse(grpo_chat_family_name((grpo_chat_family)fam)), fam);
}

/* The shape the issue spells out, checked literally. */
static void
test_r1_prompt_shape(void **state)
{
    (void)state;
    grpo_chat_message m[3] = {
        {"system", "S1", NULL, 0}, {"system", "S2", NULL, 0}, {"user", "Q", NULL, 0}};
    char *text;
    size_t len;
    assert_int_equal(grpo_chat_render(r1, GRPO_CHAT_NONE, m, 3, 1, &text, &len), GRPO_OK);
    assert_string_equal(text, "<｜begin▁of▁sentence｜>S1\n\nS2<｜User｜>Q<｜Assistant｜><think>\n");
    free(text);
    assert_int_equal(grpo_chat_render(v3, GRPO_CHAT_NONE, m, 3, 1, &text, &len), GRPO_OK);
    assert_string_equal(text, "<｜begin▁of▁sentence｜>S1\n\nS2<｜User｜>Q<｜Assistant｜>");
    free(text);
}

static void
test_errors(void **state)
{
    (void)state;
    grpo_chat_message bad_role[2] = {{"robot", "x", NULL, 0}, {NULL, "y", NULL, 0}};
    grpo_chat_message no_content[1] = {{"user", NULL, NULL, 0}};
    char *text;
    size_t len;
    /* roles the templates have no branch for are passed over, as jinja2 does */
    assert_int_equal(grpo_chat_render(v3, GRPO_CHAT_V3, bad_role, 2, 1, &text, &len), GRPO_OK);
    assert_string_equal(text, "<｜begin▁of▁sentence｜><｜Assistant｜>");
    free(text);
    assert_int_equal(grpo_chat_render(v3, GRPO_CHAT_V3, no_content, 1, 1, &text, &len),
                     GRPO_EINVAL);
    assert_non_null(strstr(grpo_error_last(), "message 0 (user) has null content"));
    assert_null(text);
    assert_int_equal(grpo_chat_render(v3, GRPO_CHAT_V3, no_content, 0, 1, &text, &len),
                     GRPO_EINVAL);
    assert_non_null(strstr(grpo_error_last(), "no messages"));
    /* parsed, but the template fails where it reads them (and only there) */
    const char *fails[][2] = {
        {"v3", "[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{}]}]"},
        {"v3", "[{\"role\":\"assistant\",\"tool_calls\":[]}]"},
        {"r1", "[{\"role\":\"assistant\",\"content\":\"a\",\"tool_calls\":null}]"},
        {"v3", "[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":null}]"},
        {"r1", "[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"type\":\"function\","
               "\"function\":{\"name\":\"f\",\"arguments\":{\"a\":1}}}]}]"},
        {"r1", "[{\"role\":\"assistant\",\"content\":null}]"},
        {"r1", "[{\"role\":\"system\"}]"}};
    const char *renders[][3] = {
        {"v3", "[{\"role\":\"assistant\",\"content\":null}]", "<｜begin▁of▁sentence｜>"},
        {"v3", "[{\"role\":\"assistant\",\"content\":\"a\",\"tool_calls\":null}]",
         "<｜begin▁of▁sentence｜><｜Assistant｜>a<｜end▁of▁sentence｜>"},
        {"v3", "[{\"role\":\"assistant\",\"content\":\"a\",\"tool_calls\":[{}]}]",
         "<｜begin▁of▁sentence｜><｜Assistant｜>a<｜end▁of▁sentence｜>"},
        {"r1", "[{\"role\":\"assistant\",\"tool_calls\":[]},{\"content\":\"x\"}]",
         "<｜begin▁of▁sentence｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>"}};
    grpo_chat chat;
    for (size_t i = 0; i < sizeof fails / sizeof fails[0]; i++) {
        const char *j = fails[i][1];
        assert_int_equal(grpo_chat_parse_json(&chat, j, strlen(j), "m.json"), GRPO_OK);
        grpo_chat_family f = (grpo_chat_family)grpo_chat_family_parse(fails[i][0]);
        assert_int_equal(
            grpo_chat_render(f == GRPO_CHAT_R1 ? r1 : v3, f, chat.msgs, chat.n, 0, &text, &len),
            GRPO_EINVAL);
        assert_non_null(strstr(grpo_error_last(), "message 0 (")); /* names the message */
        grpo_chat_fini(&chat);
    }
    for (size_t i = 0; i < sizeof renders / sizeof renders[0]; i++) {
        const char *j = renders[i][1];
        assert_int_equal(grpo_chat_parse_json(&chat, j, strlen(j), "m.json"), GRPO_OK);
        grpo_chat_family f = (grpo_chat_family)grpo_chat_family_parse(renders[i][0]);
        assert_int_equal(
            grpo_chat_render(f == GRPO_CHAT_R1 ? r1 : v3, f, chat.msgs, chat.n, 0, &text, &len),
            GRPO_OK);
        assert_string_equal(text, renders[i][2]);
        free(text);
        grpo_chat_fini(&chat);
    }
    const char *bad[] = {"{\"messages\": 3}",
                         "[{\"role\": \"tool\", \"tool_calls\": {}}]",
                         "[1]",
                         "[{\"role\": \"user\", \"content\": 5}]",
                         "[{\"role\": \"user\"",
                         "[{\"role\": \"robot\", \"content\": [\"parts\"]}]",
                         "[{\"role\": \"user\", \"content\": \"a\\u0000b\"}]",
                         "[{\"role\": \"user\", \"content\": \"caf\xc3\"}]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(grpo_chat_parse_json(&chat, bad[i], strlen(bad[i]), "m.json"),
                         GRPO_EFORMAT);
        assert_non_null(strstr(grpo_error_last(), "m.json"));
    }
    assert_non_null(strstr(grpo_error_last(), "invalid UTF-8 at byte 33"));
    const char *ok = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}";
    assert_int_equal(grpo_chat_parse_json(&chat, ok, strlen(ok), "m.json"), GRPO_OK);
    assert_int_equal(chat.n, 1);
    assert_string_equal(chat.msgs[0].content, "hi");
    grpo_chat_fini(&chat);
    assert_int_equal(grpo_chat_family_parse("r1"), GRPO_CHAT_R1);
    assert_int_equal(grpo_chat_family_parse("v3"), GRPO_CHAT_V3);
    assert_int_equal(grpo_chat_family_parse("llama"), -1);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jinja_cases),     cmocka_unit_test(test_jinja_random),
        cmocka_unit_test(test_jinja_families),  cmocka_unit_test(test_family_detect),
        cmocka_unit_test(test_r1_prompt_shape), cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
