/* Typed, bounded access to cJSON trees with messages that name the source and the key. */
#include "common/json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

grpo_err
grpo__json_parse(const char *text, size_t n, const char *where, cJSON **out)
{
    *out = NULL;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, n, &end, 0);
    if (j == NULL) {
        size_t off = end != NULL && end >= text ? (size_t)(end - text) : 0;
        return grpo__fail(GRPO_EFORMAT, "%s: invalid JSON near byte %zu", where, off);
    }
    *out = j;
    return GRPO_OK;
}

grpo_err
grpo__json_parse_text(const char *text, size_t n, const char *where, cJSON **out)
{
    *out = NULL;
    size_t ok = grpo__utf8_valid_len(text, n);
    if (ok != n)
        return grpo__fail(GRPO_EFORMAT, "%s: invalid UTF-8 at byte %zu", where, ok);
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        if (text[i] == '"') {
            in_str = !in_str;
        } else if (in_str && text[i] == '\\') {
            if (n - i >= 6 && memcmp(text + i + 1, "u0000", 5) == 0)
                return grpo__fail(GRPO_EFORMAT,
                                  "%s: a NUL character (\\u0000) in a string at byte %zu is not "
                                  "supported",
                                  where, i);
            i++; /* the escaped character */
        }
    }
    return grpo__json_parse(text, n, where, out);
}

grpo_err
grpo__json_parse_file(const char *path, size_t max_bytes, cJSON **out)
{
    char *text = NULL;
    size_t n = 0;
    *out = NULL;
    grpo_err err = grpo__read_file(path, max_bytes, &text, &n);
    if (err != GRPO_OK)
        return err;
    err = grpo__json_parse(text, n, path, out);
    free(text);
    return err;
}

static grpo_err
get(const cJSON *obj, const char *key, const char *where, const cJSON **item, bool required)
{
    *item = NULL;
    if (!cJSON_IsObject(obj))
        return grpo__fail(GRPO_EFORMAT, "%s: expected a JSON object", where);
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (it == NULL || cJSON_IsNull(it)) {
        if (required)
            return grpo__fail(GRPO_EFORMAT, "%s: \"%s\" is missing", where, key);
        return GRPO_OK;
    }
    *item = it;
    return GRPO_OK;
}

static grpo_err
as_int(const cJSON *it, const char *key, const char *where, int64_t lo, int64_t hi, int64_t *out)
{
    if (!cJSON_IsNumber(it))
        return grpo__fail(GRPO_EFORMAT, "%s: \"%s\" must be an integer", where, key);
    double v = it->valuedouble;
    if (!isfinite(v) || v != floor(v) || v < (double)lo || v > (double)hi)
        return grpo__fail(GRPO_EFORMAT, "%s: \"%s\" is %g; expected an integer in [%lld, %lld]",
                          where, key, v, (long long)lo, (long long)hi);
    *out = (int64_t)v;
    return GRPO_OK;
}

static grpo_err
as_num(const cJSON *it, const char *key, const char *where, double *out)
{
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble))
        return grpo__fail(GRPO_EFORMAT, "%s: \"%s\" must be a finite number", where, key);
    *out = it->valuedouble;
    return GRPO_OK;
}

static grpo_err
as_bool(const cJSON *it, const char *key, const char *where, bool *out)
{
    if (!cJSON_IsBool(it))
        return grpo__fail(GRPO_EFORMAT, "%s: \"%s\" must be true or false", where, key);
    *out = cJSON_IsTrue(it);
    return GRPO_OK;
}

static grpo_err
as_str(const cJSON *it, const char *key, const char *where, const char **out)
{
    if (!cJSON_IsString(it) || it->valuestring == NULL)
        return grpo__fail(GRPO_EFORMAT, "%s: \"%s\" must be a string", where, key);
    *out = it->valuestring;
    return GRPO_OK;
}

#define DEFINE_GETTERS(NAME, TYPE, CONV, ...)                                                      \
    grpo_err grpo__json_##NAME(const cJSON *obj, const char *key, const char *where,               \
                               __VA_ARGS__ TYPE *out)                                              \
    {                                                                                              \
        const cJSON *it;                                                                           \
        grpo_err err = get(obj, key, where, &it, true);                                            \
        return err != GRPO_OK ? err : CONV;                                                        \
    }                                                                                              \
    grpo_err grpo__json_##NAME##_opt(const cJSON *obj, const char *key, const char *where,         \
                                     __VA_ARGS__ TYPE *out)                                        \
    {                                                                                              \
        const cJSON *it;                                                                           \
        grpo_err err = get(obj, key, where, &it, false);                                           \
        return err != GRPO_OK || it == NULL ? err : CONV;                                          \
    }

DEFINE_GETTERS(int, int64_t, as_int(it, key, where, lo, hi, out), int64_t lo, int64_t hi, )
DEFINE_GETTERS(num, double, as_num(it, key, where, out), )
DEFINE_GETTERS(bool, bool, as_bool(it, key, where, out), )
DEFINE_GETTERS(str, const char *, as_str(it, key, where, out), )

grpo_err
grpo__json_check_keys(const cJSON *obj, const char *where, const char *const *known)
{
    const cJSON *it;
    if (!cJSON_IsObject(obj))
        return grpo__fail(GRPO_EFORMAT, "%s: expected a JSON object", where);
    cJSON_ArrayForEach(it, obj)
    {
        int k = 0;
        while (known[k] && strcmp(known[k], it->string) != 0)
            k++;
        if (known[k])
            continue;
        char list[512] = "";
        size_t off = 0;
        for (k = 0; known[k] && off < sizeof list; k++)
            off += (size_t)snprintf(list + off, sizeof list - off, "%s%s", k ? ", " : "", known[k]);
        return grpo__fail(GRPO_EFORMAT, "%s: unknown key \"%s\" (expected %s)", where, it->string,
                          list);
    }
    return GRPO_OK;
}

char *
grpo__json_print(const cJSON *obj)
{
    return cJSON_PrintUnformatted(obj);
}

char *
grpo__json_print_utf8(const cJSON *obj)
{
    char *s = cJSON_PrintUnformatted(obj), *c;
    size_t n;
    if (s == NULL)
        return NULL;
    n = strlen(s);
    if (grpo__utf8_valid(s, n))
        return s;
    c = grpo__utf8_sanitize(s, n, NULL);
    free(s);
    return c;
}
