/* Deciding whether a test passed: stdout against the expected text (LiveCodeBench-style, line by
 * line, then token by token numerically), and call-based return values as JSON. The comparison
 * runs here, outside the sandbox: the program never sees the expected outputs. */
#include "verifiers/code/code_int.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct span {
    const char *p;
    size_t n;
} span;

static span
strip(span s)
{
    while (s.n && isspace((unsigned char)s.p[0])) {
        s.p++;
        s.n--;
    }
    while (s.n && isspace((unsigned char)s.p[s.n - 1]))
        s.n--;
    return s;
}

/* Next line of s (advancing it); false when exhausted. */
static bool
next_line(span *s, span *line)
{
    if (s->n == 0)
        return false;
    const char *nl = memchr(s->p, '\n', s->n);
    size_t k = nl ? (size_t)(nl - s->p) : s->n;
    *line = (span){s->p, k};
    s->p += nl ? k + 1 : k;
    s->n -= nl ? k + 1 : k;
    return true;
}

static bool
next_token(span *s, span *tok)
{
    while (s->n && isspace((unsigned char)s->p[0])) {
        s->p++;
        s->n--;
    }
    if (s->n == 0)
        return false;
    size_t k = 0;
    while (k < s->n && !isspace((unsigned char)s->p[k]))
        k++;
    *tok = (span){s->p, k};
    s->p += k;
    s->n -= k;
    return true;
}

static bool
as_number(span t, double *out)
{
    char buf[128];
    char *end;
    if (t.n == 0 || t.n >= sizeof buf)
        return false;
    memcpy(buf, t.p, t.n);
    buf[t.n] = '\0';
    if (strpbrk(buf, "xXpP") != NULL) /* no hex floats: "0x10" is not 16 here */
        return false;
    *out = strtod(buf, &end);
    return *end == '\0' && isfinite(*out) && !isalpha((unsigned char)buf[0]);
}

/* An integer literal: optional sign, then decimal digits only (no point, no exponent). */
static bool
is_int_literal(span t)
{
    size_t i = t.n > 0 && (t.p[0] == '+' || t.p[0] == '-');
    if (i == t.n)
        return false;
    for (; i < t.n; i++)
        if (!isdigit((unsigned char)t.p[i]))
            return false;
    return true;
}

/* Two integer literals of any length, equal as integers ("+007" = "7", "-0" = "0"). */
static bool
int_equal(span a, span b)
{
    bool na = a.p[0] == '-', nb = b.p[0] == '-';
    size_t i = a.p[0] == '+' || na, j = b.p[0] == '+' || nb;
    while (i + 1 < a.n && a.p[i] == '0')
        i++;
    while (j + 1 < b.n && b.p[j] == '0')
        j++;
    bool za = a.n - i == 1 && a.p[i] == '0', zb = b.n - j == 1 && b.p[j] == '0';
    if (za || zb)
        return za && zb;
    return na == nb && a.n - i == b.n - j && memcmp(a.p + i, b.p + j, a.n - i) == 0;
}

static bool
close_enough(double a, double b, double tol)
{
    return fabs(a - b) <= tol || fabs(a - b) <= tol * fabs(b);
}

static bool
line_match(span a, span b, double tol)
{
    span ta, tb;
    a = strip(a);
    b = strip(b);
    if (a.n == b.n && memcmp(a.p, b.p, a.n) == 0)
        return true;
    for (;;) {
        bool ha = next_token(&a, &ta), hb = next_token(&b, &tb);
        double x, y;
        if (!ha || !hb)
            return ha == hb;
        if (ta.n == tb.n && memcmp(ta.p, tb.p, ta.n) == 0)
            continue;
        /* integers are exact at any size: the tolerance is for printed reals, and would let
         * 1000001 pass for 1000000 (relative 1e-6) or any 19-digit answer pass for another */
        if (is_int_literal(ta) && is_int_literal(tb)) {
            if (!int_equal(ta, tb))
                return false;
            continue;
        }
        if (!as_number(ta, &x) || !as_number(tb, &y) || !close_enough(x, y, tol))
            return false;
    }
}

bool
grpo_code__stdout_match(const char *got, size_t got_len, const char *want, double tol)
{
    span a = strip((span){got, got_len}), b = strip((span){want, strlen(want)});
    span la, lb;
    for (;;) {
        bool ha = next_line(&a, &la), hb = next_line(&b, &lb);
        if (!ha || !hb)
            return ha == hb;
        if (!line_match(la, lb, tol))
            return false;
    }
}

/* Integral values compare exactly, at any magnitude: beyond 2^53 a relative tolerance would
 * accept integers thousands apart. (Integers that round to the same double still compare equal:
 * cJSON keeps numbers as doubles.) */
static bool
integral(double v)
{
    return isfinite(v) && v == floor(v);
}

bool
grpo_code__json_equal(const cJSON *a, const cJSON *b, double tol)
{
    if (a == NULL || b == NULL)
        return a == b;
    if (cJSON_IsBool(a) || cJSON_IsBool(b))
        return cJSON_IsBool(a) && cJSON_IsBool(b) && cJSON_IsTrue(a) == cJSON_IsTrue(b);
    if ((a->type & 0xff) != (b->type & 0xff))
        return false;
    switch (a->type & 0xff) {
    case cJSON_NULL:
        return true;
    case cJSON_Number:
        if (integral(a->valuedouble) && integral(b->valuedouble))
            return a->valuedouble == b->valuedouble;
        return close_enough(a->valuedouble, b->valuedouble, tol);
    case cJSON_String:
        return strcmp(a->valuestring, b->valuestring) == 0;
    case cJSON_Array: {
        if (cJSON_GetArraySize(a) != cJSON_GetArraySize(b))
            return false;
        const cJSON *x = a->child, *y = b->child;
        for (; x && y; x = x->next, y = y->next)
            if (!grpo_code__json_equal(x, y, tol))
                return false;
        return true;
    }
    case cJSON_Object: {
        if (cJSON_GetArraySize(a) != cJSON_GetArraySize(b))
            return false;
        const cJSON *x;
        cJSON_ArrayForEach(x, a)
        {
            const cJSON *y = cJSON_GetObjectItemCaseSensitive(b, x->string);
            if (!grpo_code__json_equal(x, y, tol))
                return false;
        }
        return true;
    }
    default:
        return false;
    }
}
