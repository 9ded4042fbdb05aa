/* DeepSeek-V3's tool-call block, as its chat template writes an assistant's tool calls
 * (data/deepseek-v3-tokenizer/tokenizer_config.json, "chat_template"):
 *   <｜tool▁calls▁begin｜> CALL ("\n" CALL)* <｜tool▁calls▁end｜>
 *   CALL = <｜tool▁call▁begin｜> TYPE <｜tool▁sep｜> NAME "\n```json\n" ARGS "\n```"
 *          <｜tool▁call▁end｜>
 * with TYPE "function". The model writes it, so every part is checked and whitespace between
 * calls (and around the json fence) is tolerated; what is wrong is said in the call's `why`. */
#include "env/python_int.h"
#include "common/json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FW "\xef\xbd\x9c" /* ｜ */
#define SP "\xe2\x96\x81" /* ▁ */
#define CALL_BEGIN "<" FW "tool" SP "call" SP "begin" FW ">"
#define CALL_END "<" FW "tool" SP "call" SP "end" FW ">"
#define CALL_SEP "<" FW "tool" SP "sep" FW ">"

typedef struct span {
    const char *p;
    size_t n;
} span;

static bool
is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

static span
trim(span s)
{
    while (s.n > 0 && is_ws(s.p[0]))
        s.p++, s.n--;
    while (s.n > 0 && is_ws(s.p[s.n - 1]))
        s.n--;
    return s;
}

static bool
eat(span *s, const char *lit)
{
    size_t m = strlen(lit);
    if (s->n < m || memcmp(s->p, lit, m) != 0)
        return false;
    s->p += m, s->n -= m;
    return true;
}

static bool
eat_tail(span *s, const char *lit)
{
    size_t m = strlen(lit);
    if (s->n < m || memcmp(s->p + s->n - m, lit, m) != 0)
        return false;
    s->n -= m;
    return true;
}

static bool
equals(span s, const char *lit)
{
    return s.n == strlen(lit) && memcmp(s.p, lit, s.n) == 0;
}

static int
bad(grpo_env__dsv3_call *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->why, sizeof c->why, fmt, ap);
    va_end(ap);
    grpo__utf8_sanitize_buf(c->why, sizeof c->why); /* it quotes the model's bytes */
    return 0;
}

/* A short quotable piece of s (the model's own bytes, cut). */
static int
qlen(span s)
{
    return s.n > 40 ? 40 : (int)s.n;
}

/* ARGS: {"code": "..."}; returns 0 (bad, why set), 1 (code set) or -1 (out of memory). */
static int
parse_args(span a, grpo_env__dsv3_call *c)
{
    cJSON *j = NULL;
    a = trim(a);
    if (eat(&a, "```json"))
        eat_tail(&a, "```");
    a = trim(a);
    if (grpo__json_parse_text(a.p, a.n, "arguments", &j) != GRPO_OK || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return bad(c, "the arguments are not a JSON object");
    }
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(j, "code");
    int rc = 1;
    if (!cJSON_IsString(code))
        rc = bad(c, "the arguments have no string \"code\"");
    else if ((c->code = strdup(code->valuestring)) == NULL)
        rc = -1;
    else
        c->code_len = strlen(c->code);
    cJSON_Delete(j);
    return rc;
}

/* One call between CALL_BEGIN and CALL_END. */
static int
parse_call(span s, grpo_env__dsv3_call *c)
{
    const char *sep = memmem(s.p, s.n, CALL_SEP, strlen(CALL_SEP));
    if (sep == NULL)
        return bad(c, "no <" FW "tool" SP "sep" FW "> after the call's type");
    span type = trim((span){s.p, (size_t)(sep - s.p)});
    span rest = {sep + strlen(CALL_SEP), s.n - (size_t)(sep - s.p) - strlen(CALL_SEP)};
    if (!equals(type, "function"))
        return bad(c, "the call's type is \"%.*s\"; expected \"function\"", qlen(type), type.p);
    const char *nl = memchr(rest.p, '\n', rest.n);
    span name = trim((span){rest.p, nl ? (size_t)(nl - rest.p) : rest.n});
    if (!equals(name, "python"))
        return bad(c, "unknown tool \"%.*s\"; the only tool is \"python\"", qlen(name), name.p);
    if (nl == NULL)
        return bad(c, "the call has no arguments");
    return parse_args((span){nl, rest.n - (size_t)(nl - rest.p)}, c);
}

/* Splits the block's inside into calls; returns -1 when out of memory. */
static int
parse_calls(span in, grpo_env__dsv3_call *calls, int *n)
{
    size_t le = strlen(CALL_END);
    for (;;) {
        in = trim(in);
        if (in.n == 0)
            return 0;
        grpo_env__dsv3_call *c = &calls[*n];
        if (*n == GRPO_ENV_DSV3_MAX_CALLS) { /* report the excess in the last slot */
            c = &calls[*n - 1];
            free(c->code);
            memset(c, 0, sizeof *c);
            bad(c, "more than %d calls in one block", GRPO_ENV_DSV3_MAX_CALLS);
            return 0;
        }
        (*n)++;
        if (!eat(&in, CALL_BEGIN))
            return bad(c, "expected <" FW "tool" SP "call" SP "begin" FW ">");
        const char *e = memmem(in.p, in.n, CALL_END, le);
        if (e == NULL)
            return bad(c, "a call without <" FW "tool" SP "call" SP "end" FW ">");
        if (parse_call((span){in.p, (size_t)(e - in.p)}, c) < 0)
            return -1;
        in.n -= (size_t)(e - in.p) + le;
        in.p = e + le;
    }
}

grpo_err
grpo_env__dsv3_parse(const char *text, size_t n, grpo_env__dsv3_call *calls, int *n_calls)
{
    span in = {text, n};
    memset(calls, 0, sizeof *calls * GRPO_ENV_DSV3_MAX_CALLS);
    *n_calls = 0;
    if (!eat(&in, GRPO_ENV_DSV3_BEGIN) || !eat_tail(&in, GRPO_ENV_DSV3_END)) {
        *n_calls = 1;
        bad(&calls[0], "not a tool-call block");
        return GRPO_OK;
    }
    if (parse_calls(in, calls, n_calls) < 0) {
        for (int i = 0; i < *n_calls; i++)
            free(calls[i].code);
        *n_calls = 0;
        return grpo__fail(GRPO_ENOMEM, "python tool: out of memory");
    }
    if (*n_calls == 0) {
        *n_calls = 1;
        bad(&calls[0], "no tool call in the block");
    }
    return GRPO_OK;
}
