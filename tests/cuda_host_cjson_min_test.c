/* tests/gpu/cjson_min (the JSON reader GPU-only hosts build the model loader on) against the real
 * libcjson as the oracle: every JSON fixture of the tiny models and their safetensors headers
 * parse to the same tree (types, keys, strings, numbers bit for bit), the same inputs are
 * rejected, and lookups and sizes agree. cjson_min is compiled into this test with its names
 * prefixed (mini_), so both live in one program. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the oracle's side ---- */
typedef struct {
    int type;
    const char *key, *str;
    double num;
    int n_child;
} nd;

static int
real_type(const cJSON *c)
{
    return c->type & 0xFF;
}

#undef cJSON_ArrayForEach
#define cJSON mini_cJSON
#define cJSON_ParseWithLengthOpts mini_cJSON_ParseWithLengthOpts
#define cJSON_Parse mini_cJSON_Parse
#define cJSON_Delete mini_cJSON_Delete
#define cJSON_PrintUnformatted mini_cJSON_PrintUnformatted
#define cJSON_GetArraySize mini_cJSON_GetArraySize
#define cJSON_GetArrayItem mini_cJSON_GetArrayItem
#define cJSON_GetObjectItem mini_cJSON_GetObjectItem
#define cJSON_GetObjectItemCaseSensitive mini_cJSON_GetObjectItemCaseSensitive
#define cJSON_IsInvalid mini_cJSON_IsInvalid
#define cJSON_IsFalse mini_cJSON_IsFalse
#define cJSON_IsTrue mini_cJSON_IsTrue
#define cJSON_IsBool mini_cJSON_IsBool
#define cJSON_IsNull mini_cJSON_IsNull
#define cJSON_IsNumber mini_cJSON_IsNumber
#define cJSON_IsString mini_cJSON_IsString
#define cJSON_IsArray mini_cJSON_IsArray
#define cJSON_IsObject mini_cJSON_IsObject
#define cJSON_bool mini_cJSON_bool
#include "tests/gpu/cjson_min/cjson/cJSON.h"
#undef cJSON
#undef cJSON_ParseWithLengthOpts
#undef cJSON_Delete
#undef cJSON_GetArraySize
#undef cJSON_GetArrayItem
#undef cJSON_GetObjectItemCaseSensitive

/* The two trees side by side: same shape, types, keys, strings, numbers. */
static int
same(const struct cJSON *a, const mini_cJSON *b, const char *path)
{
    if (real_type(a) != (b->type & 0xFF)) {
        printf("%s: type %d vs %d\n", path, real_type(a), b->type);
        return 0;
    }
    if ((a->string == NULL) != (b->string == NULL) ||
        (a->string != NULL && strcmp(a->string, b->string) != 0)) {
        printf("%s: key differs\n", path);
        return 0;
    }
    if (real_type(a) == cJSON_String && strcmp(a->valuestring, b->valuestring) != 0) {
        printf("%s: string \"%s\" vs \"%s\"\n", path, a->valuestring, b->valuestring);
        return 0;
    }
    if (real_type(a) == cJSON_Number &&
        (memcmp(&a->valuedouble, &b->valuedouble, sizeof(double)) != 0 ||
         a->valueint != b->valueint)) {
        printf("%s: number %.17g/%d vs %.17g/%d\n", path, a->valuedouble, a->valueint,
               b->valuedouble, b->valueint);
        return 0;
    }
    if (cJSON_GetArraySize(a) != mini_cJSON_GetArraySize(b)) {
        printf("%s: %d vs %d children\n", path, cJSON_GetArraySize(a), mini_cJSON_GetArraySize(b));
        return 0;
    }
    const struct cJSON *x = a->child;
    const mini_cJSON *y = b->child;
    for (int i = 0; x != NULL; x = x->next, y = y->next, i++) {
        char p[256];
        snprintf(p, sizeof p, "%.200s/%d", path, i);
        if (!same(x, y, p))
            return 0;
        if (x->string != NULL && mini_cJSON_GetObjectItemCaseSensitive(b, x->string) == NULL)
            return 0;
        if (mini_cJSON_GetArrayItem(b, i) != y)
            return 0;
    }
    return 1;
}

static int
compare_text(const char *text, size_t n, const char *what)
{
    const char *e1 = NULL, *e2 = NULL;
    struct cJSON *a = cJSON_ParseWithLengthOpts(text, n, &e1, 0);
    mini_cJSON *b = mini_cJSON_ParseWithLengthOpts(text, n, &e2, 0);
    int ok = (a == NULL) == (b == NULL) && (a == NULL || same(a, b, what));
    if (!ok)
        printf("%s: libcjson %s, cjson_min %s\n", what, a ? "parsed" : "rejected",
               b ? "parsed" : "rejected");
    cJSON_Delete(a);
    mini_cJSON_Delete(b);
    return ok;
}

static char *
slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    *n = fread(buf, 1, (size_t)len, f);
    buf[*n] = '\0';
    fclose(f);
    return buf;
}

static void
fixtures_parse_alike(void **state)
{
    (void)state;
    const char *files[] = {"bf16/config.json",
                           "bf16/expected.json",
                           "fp8/config.json",
                           "fp8/expected.json",
                           "fp8/model.safetensors.index.json",
                           "router/router_case.json"};
    const char *src = getenv("GRPO_SOURCE_DIR");
    char p[1024];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/tests/data/tiny_models/%s", src ? src : "..", files[i]);
        size_t n = 0;
        char *t = slurp(p, &n);
        assert_non_null(t);
        assert_true(compare_text(t, n, files[i]));
        free(t);
    }
    /* safetensors headers: 8-byte little-endian length, then JSON */
    const char *st[] = {"bf16/model.safetensors", "fp8/model-00001-of-00002.safetensors",
                        "fp8/model-00002-of-00002.safetensors"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/tests/data/tiny_models/%s", src ? src : "..", st[i]);
        size_t n = 0;
        char *t = slurp(p, &n);
        assert_non_null(t);
        uint64_t h = 0;
        for (int b = 7; b >= 0; b--)
            h = h << 8 | (unsigned char)t[b];
        assert_true(h + 8 <= n);
        assert_true(compare_text(t + 8, (size_t)h, st[i]));
        free(t);
    }
}

static void
edge_cases_alike(void **state)
{
    (void)state;
    const char *cases[] = {
        "{}",
        "[]",
        "0",
        "-0",
        "1e400",
        "-1.5E-3",
        "123456789012",
        "\"a\\u00e9\\ud83d\\ude00\"",
        "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"",
        "[1,]",
        "{\"a\" 1}",
        "{\"a\":}",
        "[1 2]",
        "\"abc",
        "\"\\x\"",
        "01",
        "1.",
        ".5",
        "+1",
        "tru",
        "nul",
        "[[[[[]]]]]",
        "{\"k\":{\"k\":[null]}}",
        "  [true , false , null ]  ",
        "\"\\ud800\"",
        "{\"a\":1,\"a\":2}",
        "[1] x",
        "",
        " ",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_true(compare_text(cases[i], strlen(cases[i]), cases[i]));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(fixtures_parse_alike),
                                       cmocka_unit_test(edge_cases_alike)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
