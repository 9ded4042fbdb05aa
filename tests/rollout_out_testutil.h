/* A rollout test's --out file read back, shared by the family rollout tests. Include after
 * <cmocka.h>, <cjson/cJSON.h> and tests/cli_testutil.h, with PROMPTS and G (samples) defined. */
#ifndef GRPO_TESTS_ROLLOUT_OUT_TESTUTIL_H
#define GRPO_TESTS_ROLLOUT_OUT_TESTUTIL_H

/* Each completion of a --out file as "tokens|logprobs" text, by prompt index and sample. */
static void
read_out(const char *name, char *rows[PROMPTS][G])
{
    char *jl = slurp_alloc(name), *save = NULL;
    assert_non_null(jl);
    int n = 0;
    for (char *line = strtok_r(jl, "\n", &save); line; line = strtok_r(NULL, "\n", &save), n++) {
        cJSON *o = cJSON_Parse(line);
        assert_non_null(o);
        const char *pid = cJSON_GetObjectItem(o, "prompt_id")->valuestring;
        int p = atoi(pid + strlen("tiny-")) - 1, s = cJSON_GetObjectItem(o, "sample")->valueint;
        assert_true(p >= 0 && p < PROMPTS && s >= 0 && s < G && rows[p][s] == NULL);
        assert_true(cJSON_IsNumber(cJSON_GetObjectItem(o, "reward")));
        assert_string_equal(cJSON_GetObjectItem(o, "task")->valuestring, "math");
        const cJSON *t = cJSON_GetObjectItem(o, "tokens");
        assert_true(cJSON_GetArraySize(t) >= 1 && cJSON_GetArraySize(t) <= 16);
        const cJSON *it;
        cJSON_ArrayForEach(it, t) assert_true(it->valueint >= 0 && it->valueint < 1024);
        char *a = cJSON_PrintUnformatted(t),
             *b = cJSON_PrintUnformatted(cJSON_GetObjectItem(o, "logprobs"));
        size_t len = strlen(a) + strlen(b) + 2;
        rows[p][s] = malloc(len);
        snprintf(rows[p][s], len, "%s|%s", a, b);
        free(a);
        free(b);
        cJSON_Delete(o);
    }
    assert_int_equal(n, PROMPTS * G);
    free(jl);
}

#endif
