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
    return 0;
}

static void
test_jinja_cases(void **state)
{
    (void)state;
    char path[4096], *json;
    size_t n;
    fx_path(path, sizeof path, "chat_cases.json");
    assert_int_equal(grpo__read_file(path, 0, &json, &n), GRPO_OK);
    cJSON *cases = cJSON_Parse(json);
    assert_non_null(cases);
    size_t count = 0, bad = 0;
    cJSON *c;
    cJSON_ArrayForEach(c, cases)
    {
        const char *fam = cJSON_GetObjectItem(c, "family")->valuestring;
        int gen = cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt"));
        const char *want = cJSON_GetObjectItem(c, "text")->valuestring;
        cJSON *want_ids = cJSON_GetObjectItem(c, "ids");
        char *msgs = cJSON_PrintUnformatted(cJSON_GetObjectItem(c, "messages"));
        grpo_chat chat;
        assert_int_equal(grpo_chat_parse_json(&chat, msgs, strlen(msgs), "case"), GRPO_OK);
        grpo_chat_family f = (grpo_chat_family)grpo_chat_family_parse(fam);
        const grpo_tokenizer *tok = f == GRPO_CHAT_R1 ? r1 : v3;
        char *text;
        size_t len;
        assert_int_equal(grpo_chat_render(tok, f, chat.msgs, chat.n, gen, &text, &len), GRPO_OK);
        if (strcmp(text, want) != 0 || len != strlen(want)) {
            fprintf(stderr, "case %zu (%s, gen=%d): rendered\n%s\n--- jinja2:\n%s\n", count, fam,
                    gen, text, want);
            bad++;
        }
        int32_t *ids;
        size_t ni;
        assert_int_equal(grpo_chat_encode(tok, f, chat.msgs, chat.n, gen, &ids, &ni), GRPO_OK);
        bool same = ni == (size_t)cJSON_GetArraySize(want_ids);
        for (size_t k = 0; same && k < ni; k++)
            same = ids[k] == cJSON_GetArrayItem(want_ids, (int)k)->valueint;
        if (!same) {
            fprintf(stderr, "case %zu (%s): ids differ\n", count, fam);
            bad++;
        }
        assert_int_equal(ids[0], 0); /* BOS once, from the template */
        assert_true(ni < 2 || ids[1] != 0);
        free(ids);
        free(text);
        free(msgs);
        grpo_chat_fini(&chat);
        count++;
    }
    assert_true(count >= 100);
    assert_int_equal(bad, 0);
    cJSON_Delete(cases);
    free(json);
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
    grpo_chat_message bad_role[1] = {{"robot", "x", NULL, 0}};
    grpo_chat_message no_content[1] = {{"user", NULL, NULL, 0}};
    char *text;
    size_t len;
    assert_int_equal(grpo_chat_render(v3, GRPO_CHAT_V3, bad_role, 1, 1, &text, &len), GRPO_EINVAL);
    assert_non_null(strstr(grpo_error_last(), "robot"));
    assert_int_equal(grpo_chat_render(v3, GRPO_CHAT_V3, no_content, 1, 1, &text, &len),
                     GRPO_EINVAL);
    grpo_chat chat;
    const char *bad[] = {"{\"messages\": 3}",
                         "[{\"content\": \"x\"}]",
                         "[1]",
                         "[{\"role\": \"user\", \"content\": 5}]",
                         "[{\"role\": \"user\"",
                         "[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{}]}]",
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
        cmocka_unit_test(test_jinja_cases),
        cmocka_unit_test(test_r1_prompt_shape),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
