/* The `tests` field: APPS `input_output` objects ({"inputs": [...], "outputs": [...]}, with
 * "fn_name" for call-based tests), or a list of {"input": ..., "output": ...} stdin cases. A
 * stdio input or output given as a list of lines is joined with "\n". */
#include "verifiers/code/code_int.h"
#include "common/json.h"

#include <stdlib.h>
#include <string.h>

/* A string, or an array of strings joined by newlines. */
static char *
text_of(const cJSON *v)
{
    grpo_buf b = {0};
    if (cJSON_IsString(v))
        return strdup(v->valuestring);
    if (!cJSON_IsArray(v))
        return NULL;
    const cJSON *it;
    int i = 0;
    cJSON_ArrayForEach(it, v)
    {
        if (!cJSON_IsString(it)) {
            grpo__buf_fini(&b);
            return NULL;
        }
        if ((i++ && grpo__buf_append(&b, "\n", 1) != GRPO_OK) ||
            grpo__buf_append(&b, it->valuestring, strlen(it->valuestring)) != GRPO_OK) {
            grpo__buf_fini(&b);
            return NULL;
        }
    }
    if (grpo__buf_append(&b, "", 1) != GRPO_OK) {
        grpo__buf_fini(&b);
        return NULL;
    }
    return b.data;
}

static grpo_err
alloc(code_tests *t, int n)
{
    t->n = n;
    t->inputs = calloc((size_t)n + 1, sizeof(char *));
    t->outputs = calloc((size_t)n + 1, sizeof(char *));
    t->args = calloc((size_t)n + 1, sizeof(cJSON *));
    t->expected = calloc((size_t)n + 1, sizeof(cJSON *));
    if (!t->inputs || !t->outputs || !t->args || !t->expected)
        return grpo__fail(GRPO_ENOMEM, "code verifier: out of memory for %d tests", n);
    return GRPO_OK;
}

static grpo_err
parse_apps(code_tests *t)
{
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(t->root, "inputs");
    const cJSON *out = cJSON_GetObjectItemCaseSensitive(t->root, "outputs");
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t->root, "fn_name");
    grpo_err err;
    if (!cJSON_IsArray(in) || !cJSON_IsArray(out))
        return grpo__fail(GRPO_EFORMAT, "tests: \"inputs\" and \"outputs\" must be arrays");
    if (cJSON_GetArraySize(in) != cJSON_GetArraySize(out))
        return grpo__fail(GRPO_EFORMAT, "tests: %d inputs but %d outputs", cJSON_GetArraySize(in),
                          cJSON_GetArraySize(out));
    if (fn != NULL && !cJSON_IsNull(fn)) {
        if (!cJSON_IsString(fn) || fn->valuestring[0] == '\0')
            return grpo__fail(GRPO_EFORMAT, "tests: \"fn_name\" must be a non-empty string");
        t->call_based = true;
        t->fn_name = fn->valuestring;
    }
    if ((err = alloc(t, cJSON_GetArraySize(in))) != GRPO_OK)
        return err;
    for (int i = 0; i < t->n; i++) {
        const cJSON *a = cJSON_GetArrayItem(in, i), *b = cJSON_GetArrayItem(out, i);
        if (t->call_based) {
            t->args[i] = a;
            t->expected[i] = b;
            continue;
        }
        t->inputs[i] = text_of(a);
        t->outputs[i] = text_of(b);
        if (!t->inputs[i] || !t->outputs[i])
            return grpo__fail(GRPO_EFORMAT,
                              "tests: stdin test %d: input and output must be "
                              "strings (or lists of lines)",
                              i);
    }
    return GRPO_OK;
}

static grpo_err
parse_list(code_tests *t)
{
    grpo_err err;
    if ((err = alloc(t, cJSON_GetArraySize(t->root))) != GRPO_OK)
        return err;
    for (int i = 0; i < t->n; i++) {
        const cJSON *c = cJSON_GetArrayItem(t->root, i);
        t->inputs[i] = text_of(cJSON_GetObjectItemCaseSensitive(c, "input"));
        t->outputs[i] = text_of(cJSON_GetObjectItemCaseSensitive(c, "output"));
        if (!t->inputs[i] || !t->outputs[i])
            return grpo__fail(GRPO_EFORMAT, "tests[%d]: needs string \"input\" and \"output\"", i);
    }
    return GRPO_OK;
}

grpo_err
grpo_code__tests_parse(const char *json, code_tests *t)
{
    grpo_err err;
    memset(t, 0, sizeof *t);
    if (json == NULL)
        return grpo__fail(GRPO_ENOTFOUND, "tests: the task has no tests");
    if ((err = grpo__json_parse(json, strlen(json), "tests", &t->root)) != GRPO_OK)
        return err;
    if (cJSON_IsString(t->root)) { /* APPS stores input_output as a JSON string */
        cJSON *inner = NULL;
        const char *s = t->root->valuestring;
        if ((err = grpo__json_parse(s, strlen(s), "tests (string)", &inner)) != GRPO_OK)
            return err;
        cJSON_Delete(t->root);
        t->root = inner;
    }
    if (cJSON_IsObject(t->root))
        err = parse_apps(t);
    else if (cJSON_IsArray(t->root))
        err = parse_list(t);
    else
        err = grpo__fail(GRPO_EFORMAT, "tests: expected an object or an array");
    if (err == GRPO_OK && t->n == 0)
        err = grpo__fail(GRPO_ENOTFOUND, "tests: no test cases");
    return err;
}

void
grpo_code__tests_fini(code_tests *t)
{
    for (int i = 0; i < t->n; i++) {
        if (t->inputs)
            free(t->inputs[i]);
        if (t->outputs)
            free(t->outputs[i]);
    }
    free(t->inputs);
    free(t->outputs);
    free(t->args);
    free(t->expected);
    cJSON_Delete(t->root);
    memset(t, 0, sizeof *t);
}
