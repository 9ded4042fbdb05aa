/* Code extraction: the last fenced block (```lang ... ```) of the requested language in the
 * answer part of a completion (after the last "</think>"). */
#include "verifiers/code/code_int.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static bool
tag_matches(const char *tag, size_t n, code_lang lang)
{
    static const char *const py[] = {"python", "python3", "py", "py3", NULL};
    static const char *const c[] = {"c", NULL};
    static const char *const cpp[] = {"cpp", "c++", "cxx", "cc", NULL};
    const char *const *names = lang == CODE_PY ? py : lang == CODE_C ? c : cpp;
    for (int i = 0; names[i]; i++)
        if (strlen(names[i]) == n && strncasecmp(tag, names[i], n) == 0)
            return true;
    return false;
}

/* Finds the next line that starts (after up to 3 spaces) with ``` at or after p. */
static const char *
next_fence(const char *p, const char *end)
{
    while (p < end) {
        const char *q = p;
        int sp = 0;
        while (q < end && *q == ' ' && sp < 3) {
            q++;
            sp++;
        }
        if (end - q >= 3 && memcmp(q, "```", 3) == 0)
            return q;
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (nl == NULL)
            return NULL;
        p = nl + 1;
    }
    return NULL;
}

char *
grpo_code__extract(const char *text, size_t len, code_lang lang, bool think_open)
{
    const char *p = text, *end = text + len, *best = NULL, *best_untagged = NULL;
    size_t best_n = 0, untagged_n = 0;
    const char *close = NULL;
    for (const char *q = text; q && q < end;) {
        q = memmem(q, (size_t)(end - q), "</think>", 8);
        if (q) {
            close = q;
            q += 8;
        }
    }
    if (close)
        p = close + 8;
    else if (think_open)
        return NULL; /* still thinking: no answer */
    while ((p = next_fence(p, end)) != NULL) {
        const char *tag = p + 3, *nl = memchr(tag, '\n', (size_t)(end - tag));
        if (nl == NULL)
            break;
        const char *t0 = tag, *t1 = tag;
        while (t0 < nl && isspace((unsigned char)*t0))
            t0++;
        t1 = t0;
        while (t1 < nl && !isspace((unsigned char)*t1) && *t1 != '{')
            t1++;
        const char *body = nl + 1, *stop = next_fence(body, end);
        const char *body_end = stop ? stop : end;
        /* the closing fence's line starts at the '\n' before it */
        while (body_end > body && body_end[-1] == ' ')
            body_end--;
        if (t1 == t0) {
            best_untagged = body;
            untagged_n = (size_t)(body_end - body);
        } else if (tag_matches(t0, (size_t)(t1 - t0), lang)) {
            best = body;
            best_n = (size_t)(body_end - body);
        }
        if (stop == NULL)
            break; /* an unclosed last block still counts (generation may stop there) */
        const char *after = memchr(stop, '\n', (size_t)(end - stop));
        if (after == NULL)
            break;
        p = after + 1;
    }
    if (best == NULL) {
        best = best_untagged;
        best_n = untagged_n;
    }
    if (best == NULL)
        return NULL;
    char *out = malloc(best_n + 1);
    if (out == NULL)
        return NULL;
    memcpy(out, best, best_n);
    out[best_n] = '\0';
    /* strip trailing whitespace; a block of only whitespace is no code */
    while (best_n > 0 && isspace((unsigned char)out[best_n - 1]))
        out[--best_n] = '\0';
    if (best_n == 0) {
        free(out);
        return NULL;
    }
    return out;
}
