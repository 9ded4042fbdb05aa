/* The Qwen2.5 and Qwen3 chat templates (data/chat-templates/qwen2.5.jinja, qwen3.jinja) without
 * tools, transcribed statement by statement; jinja2's renderings are in
 * tests/data/tokenizer/chat_family.json. Where Jinja prints a value with {{ }} instead of
 * concatenating it, null prints "None" and a missing key prints nothing; both fail where it
 * concatenates. */
#include "rollout/tokenizer/tok_int.h"

#include <string.h>

#define IM_START "<|im_start|>"
#define IM_END "<|im_end|>"
#define QWEN25_SYSTEM "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

/* The content where the template concatenates it (NULL after a failure). */
static const char *
need(tok_out *o, size_t i, const grpo_chat_message *m)
{
    if (m->content == NULL)
        grpo_chat__fail(o, i, m, "has null content where the template needs a string");
    else if (m->content == grpo_chat_content_absent)
        grpo_chat__fail(o, i, m, "has no \"content\" where the template needs a string");
    else
        return m->content;
    return NULL;
}

/* {{ message.content }}: null prints "None", a missing key nothing. */
static void
print_content(tok_out *o, const grpo_chat_message *m)
{
    grpo_chat__put(o, m->content == NULL ? "None" : m->content);
}

static bool
has_calls(const grpo_chat_message *m) /* `message.tool_calls` is truthy */
{
    return m->tool_calls != NULL && m->n_tool_calls > 0;
}

static bool
call_ok(tok_out *o, size_t i, const grpo_chat_message *m, size_t k)
{
    if (m->tool_calls[k].name != NULL && m->tool_calls[k].arguments != NULL)
        return true;
    grpo_chat__fail(o, i, m, "has a tool call without a string function name and arguments");
    return false;
}

/* A "tool" message: consecutive ones share one user turn. */
static void
tool_response(tok_out *o, const grpo_chat_message *msgs, size_t n, size_t i)
{
    if (i == 0 || !grpo_chat__role_is(&msgs[i - 1], "tool"))
        grpo_chat__put(o, IM_START "user");
    grpo_chat__put(o, "\n<tool_response>\n");
    print_content(o, &msgs[i]);
    grpo_chat__put(o, "\n</tool_response>");
    if (i + 1 == n || !grpo_chat__role_is(&msgs[i + 1], "tool"))
        grpo_chat__put(o, IM_END "\n");
}

static void
turn(tok_out *o, const char *role, const char *text)
{
    grpo_chat__put(o, IM_START);
    grpo_chat__put(o, role);
    grpo_chat__put(o, "\n");
    grpo_chat__put(o, text);
    grpo_chat__put(o, IM_END "\n");
}

static void
qwen25_calls(tok_out *o, size_t i, const grpo_chat_message *m)
{
    grpo_chat__put(o, IM_START "assistant");
    if (m->content != NULL && m->content[0] != 0) /* `if message.content` */
        grpo_chat__put(o, "\n"), grpo_chat__put(o, m->content);
    for (size_t k = 0; k < m->n_tool_calls && call_ok(o, i, m, k); k++) {
        grpo_chat__put(o, "\n<tool_call>\n{\"name\": \"");
        grpo_chat__put(o, m->tool_calls[k].name);
        grpo_chat__put(o, "\", \"arguments\": ");
        grpo_chat__put_json_str(o, m->tool_calls[k].arguments);
        grpo_chat__put(o, "}\n</tool_call>");
    }
    grpo_chat__put(o, IM_END "\n");
}

static void
qwen25(tok_out *o, const grpo_chat_message *msgs, size_t n)
{
    if (grpo_chat__role_is(&msgs[0], "system")) {
        const char *c = need(o, 0, &msgs[0]);
        if (c != NULL)
            turn(o, "system", c);
    } else {
        turn(o, "system", QWEN25_SYSTEM);
    }
    for (size_t i = 0; i < n && o->err == GRPO_OK; i++) {
        const grpo_chat_message *m = &msgs[i];
        bool assistant = grpo_chat__role_is(m, "assistant");
        if (grpo_chat__role_is(m, "user") || (grpo_chat__role_is(m, "system") && i > 0) ||
            (assistant && !has_calls(m))) {
            const char *c = need(o, i, m);
            if (c != NULL)
                turn(o, m->role, c);
        } else if (assistant) {
            qwen25_calls(o, i, m);
        } else if (grpo_chat__role_is(m, "tool")) {
            tool_response(o, msgs, n, i);
        }
    }
}

static bool
starts(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

static bool
ends(const char *s, const char *p)
{
    size_t a = strlen(s), b = strlen(p);
    return a >= b && memcmp(s + a - b, p, b) == 0;
}

/* The last user message that is not a wrapped tool response (ns.last_query_index). */
static size_t
last_query(tok_out *o, const grpo_chat_message *msgs, size_t n)
{
    for (size_t i = n; i-- > 0 && o->err == GRPO_OK;) {
        if (!grpo_chat__role_is(&msgs[i], "user"))
            continue;
        const char *c = need(o, i, &msgs[i]); /* content.startswith(...) */
        if (c != NULL && !(starts(c, "<tool_response>") && ends(c, "</tool_response>")))
            return i;
    }
    return n - 1;
}

/* A span of a string. */
typedef struct span {
    const char *p;
    size_t n;
} span;

static span
lstrip_nl(span s)
{
    while (s.n > 0 && s.p[0] == '\n')
        s.p++, s.n--;
    return s;
}

static span
rstrip_nl(span s)
{
    while (s.n > 0 && s.p[s.n - 1] == '\n')
        s.n--;
    return s;
}

/* s.split(sep)[-1] */
static span
after_last(span s, const char *sep)
{
    size_t k = strlen(sep);
    for (size_t i = s.n; i >= k; i--)
        if (memcmp(s.p + i - k, sep, k) == 0)
            return (span){s.p + i, s.n - i};
    return s;
}

/* Qwen3's split of an assistant message into reasoning and answer (when it has "</think>"). */
static void
qwen3_split(const char *c, span *content, span *reasoning)
{
    *content = (span){c, strlen(c)};
    *reasoning = (span){"", 0};
    const char *close = strstr(c, "</think>");
    if (close == NULL)
        return;
    *content = lstrip_nl(after_last(*content, "</think>"));
    *reasoning = lstrip_nl(after_last(rstrip_nl((span){c, (size_t)(close - c)}), "<think>"));
}

static void
qwen3_calls(tok_out *o, size_t i, const grpo_chat_message *m, span content)
{
    for (size_t k = 0; has_calls(m) && k < m->n_tool_calls && call_ok(o, i, m, k); k++) {
        if (k > 0 || content.n > 0)
            grpo_chat__put(o, "\n");
        grpo_chat__put(o, "<tool_call>\n{\"name\": \"");
        grpo_chat__put(o, m->tool_calls[k].name);
        grpo_chat__put(o, "\", \"arguments\": ");
        grpo_chat__put(o, m->tool_calls[k].arguments); /* a string goes in as it is */
        grpo_chat__put(o, "}\n</tool_call>");
    }
}

static void
qwen3_assistant(tok_out *o, const grpo_chat_message *m, size_t i, size_t n, size_t last_q)
{
    const char *c = need(o, i, m); /* '</think>' in message.content */
    if (c == NULL)
        return;
    span content, rc;
    qwen3_split(c, &content, &rc);
    grpo_chat__put(o, IM_START "assistant\n");
    if (i > last_q && (i + 1 == n || rc.n > 0)) {
        span r = lstrip_nl(rstrip_nl(rc)), a = lstrip_nl(content);
        grpo_chat__put(o, "<think>\n");
        grpo_chat__putn(o, r.p, r.n);
        grpo_chat__put(o, "\n</think>\n\n");
        grpo_chat__putn(o, a.p, a.n);
    } else {
        grpo_chat__putn(o, content.p, content.n);
    }
    qwen3_calls(o, i, m, content);
    grpo_chat__put(o, IM_END "\n");
}

static void
qwen3(tok_out *o, const grpo_chat_message *msgs, size_t n)
{
    if (grpo_chat__role_is(&msgs[0], "system")) {
        const char *c = need(o, 0, &msgs[0]);
        if (c != NULL)
            turn(o, "system", c);
    }
    size_t last_q = last_query(o, msgs, n);
    for (size_t i = 0; i < n && o->err == GRPO_OK; i++) {
        const grpo_chat_message *m = &msgs[i];
        if (grpo_chat__role_is(m, "user") || (grpo_chat__role_is(m, "system") && i > 0)) {
            const char *c = need(o, i, m);
            if (c != NULL)
                turn(o, m->role, c);
        } else if (grpo_chat__role_is(m, "assistant")) {
            qwen3_assistant(o, m, i, n, last_q);
        } else if (grpo_chat__role_is(m, "tool")) {
            tool_response(o, msgs, n, i);
        }
    }
}

void
grpo_chat__qwen(tok_out *o, grpo_chat_family fam, const grpo_chat_message *msgs, size_t n,
                int add_generation_prompt)
{
    if (fam == GRPO_CHAT_QWEN25)
        qwen25(o, msgs, n);
    else
        qwen3(o, msgs, n);
    if (add_generation_prompt)
        grpo_chat__put(o, IM_START "assistant\n");
    if (add_generation_prompt && fam == GRPO_CHAT_QWEN3_NO_THINK)
        grpo_chat__put(o, "<think>\n\n</think>\n\n");
}
