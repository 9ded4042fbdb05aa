/* rollout/tokenizer: malformed and unsupported tokenizer.json files give the error class listed in
 * tests/data/tokenizer/malformed/cases.json with a message naming the file; a good one loads.
 * Also the tokenizer_config.json reader and the --r1 option's refusal on a non-DeepSeek file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tokenizer_fixtures.h"
#include <cjson/cJSON.h>
#include <unistd.h>

static void
test_malformed_files(void **state)
{
    (void)state;
    char path[4096], *json;
    size_t n;
    fx_path(path, sizeof path, "malformed/cases.json");
    assert_int_equal(grpo__read_file(path, 0, &json, &n), GRPO_OK);
    cJSON *cases = cJSON_Parse(json);
    assert_non_null(cases);
    size_t count = 0;
    cJSON *c;
    cJSON_ArrayForEach(c, cases)
    {
        const char *file = cJSON_GetObjectItem(c, "file")->valuestring;
        const char *expect = cJSON_GetObjectItem(c, "expect")->valuestring;
        char name[512];
        snprintf(name, sizeof name, "malformed/%s", file);
        fx_path(path, sizeof path, name);
        grpo_tokenizer *tok = (grpo_tokenizer *)&tok; /* must be reset to NULL on failure */
        grpo_tokenizer_opts o = {0};
        o.no_config = 1;
        grpo_err err = grpo_tokenizer_load(&tok, path, &o);
        if (strcmp(expect, "OK") == 0) {
            if (err != GRPO_OK)
                fprintf(stderr, "%s: %s\n", file, grpo_error_last());
            assert_int_equal(err, GRPO_OK);
            int32_t *ids;
            size_t ni;
            assert_int_equal(grpo_tokenizer_encode(tok, "ab a", 4, 0, &ids, &ni), GRPO_OK);
            free(ids);
            grpo_tokenizer_destroy(tok);
        } else {
            if (strcmp(grpo_err_name(err), expect) != 0)
                fprintf(stderr, "%s: expected %s, got %s: %s\n", file, expect, grpo_err_name(err),
                        grpo_error_last());
            assert_string_equal(grpo_err_name(err), expect);
            assert_null(tok);
            assert_non_null(strstr(grpo_error_last(), file)); /* names the file */
            printf("  %-28s %s\n", file, grpo_error_last());
        }
        count++;
    }
    assert_true(count >= 15);
    cJSON_Delete(cases);
    free(json);
}

static void
test_missing_file(void **state)
{
    (void)state;
    grpo_tokenizer *tok;
    grpo_err err = grpo_tokenizer_load(&tok, "/nonexistent/tokenizer.json", NULL);
    assert_true(err == GRPO_ENOTFOUND || err == GRPO_EIO);
    assert_null(tok);
    assert_non_null(strstr(grpo_error_last(), "/nonexistent/tokenizer.json"));
}

static void
test_r1_refused_on_other_files(void **state)
{
    (void)state;
    char path[4096];
    fx_path(path, sizeof path, "malformed/good.json");
    grpo_tokenizer *tok;
    grpo_tokenizer_opts o = {0};
    o.r1 = 1;
    o.no_config = 1;
    assert_int_equal(grpo_tokenizer_load(&tok, path, &o), GRPO_EINVAL);
    assert_non_null(strstr(grpo_error_last(), "128798"));
}

/* A tokenizer_config.json naming a token that does not exist is an error naming the key. */
static void
test_config(void **state)
{
    (void)state;
    char path[4096], cfg[4096];
    fx_path(path, sizeof path, "malformed/good.json");
    snprintf(cfg, sizeof cfg, "%s/tok_cfg_test_%d.json",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    const char *bad = "{\"bos_token\": \"<nope>\"}";
    assert_int_equal(grpo__write_file_atomic(cfg, bad, strlen(bad)), GRPO_OK);
    grpo_tokenizer *tok;
    grpo_tokenizer_opts o = {0};
    o.config_path = cfg;
    assert_int_equal(grpo_tokenizer_load(&tok, path, &o), GRPO_EFORMAT);
    assert_non_null(strstr(grpo_error_last(), "bos_token"));
    const char *good = "{\"bos_token\": {\"content\": \"ab\"}, \"eos_token\": \"b\", "
                       "\"chat_template\": \"{{'<｜User｜>'}}{{'<｜Assistant｜><think>\\\\n'}}\"}";
    assert_int_equal(grpo__write_file_atomic(cfg, good, strlen(good)), GRPO_OK);
    assert_int_equal(grpo_tokenizer_load(&tok, path, &o), GRPO_OK);
    assert_int_equal(grpo_tokenizer_bos_id(tok), 2);
    assert_int_equal(grpo_tokenizer_eos_id(tok), 1);
    assert_int_equal(grpo_tokenizer_chat_family(tok), GRPO_CHAT_R1);
    grpo_tokenizer_destroy(tok);
    unlink(cfg);
    grpo_tokenizer_destroy(NULL);
    grpo_detok_fini(NULL, NULL, NULL);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_malformed_files),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_r1_refused_on_other_files),
        cmocka_unit_test(test_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
