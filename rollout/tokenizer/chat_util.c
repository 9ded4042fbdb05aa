/* Pieces the native chat templates share: output with a sticky error, Jinja's string filters as
 * transformers defines them (tojson = json.dumps(ensure_ascii=False)), Python's str.strip(). */
#include "rollout/tokenizer/tok_int.h"

#include <stdio.h>
#include <string.h>

void
grpo_chat__putn(tok_out *o, const char *s, size_t n)
{
    if (o->err == GRPO_OK)
        o->err = grpo__buf_append(&o->b, s, n);
}

void
grpo_chat__put(tok_out *o, const char *s)
{
    grpo_chat__putn(o, s, strlen(s));
}

void
grpo_chat__fail(tok_out *o, size_t i, const grpo_chat_message *m, const char *what)
{
    if (o->err == GRPO_OK)
        o->err = grpo__fail(GRPO_EINVAL, "chat: message %zu (%s) %s", i,
                            m->role != NULL ? m->role : "no role", what);
}

bool
grpo_chat__role_is(const grpo_chat_message *m, const char *role)
{
    return m->role != NULL && strcmp(m->role, role) == 0;
}

void
grpo_chat__put_json_str(tok_out *o, const char *s)
{
    grpo_chat__put(o, "\"");
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        const char *esc = c == '"'    ? "\\\""
                          : c == '\\' ? "\\\\"
                          : c == '\n' ? "\\n"
                          : c == '\r' ? "\\r"
                          : c == '\t' ? "\\t"
                          : c == '\b' ? "\\b"
                          : c == '\f' ? "\\f"
                                      : NULL;
        char u[8];
        if (esc == NULL && c < 0x20) {
            snprintf(u, sizeof u, "\\u%04x", c);
            esc = u;
        }
        if (esc != NULL)
            grpo_chat__put(o, esc);
        else
            grpo_chat__putn(o, p, 1);
    }
    grpo_chat__put(o, "\"");
}

/* Python's str.isspace(): bidirectional class WS, B or S, or category Zs. */
static bool
py_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

void
grpo_chat__py_strip(const char *s, size_t n, size_t *a, size_t *b)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, j = n;
    while (i < n) {
        uint32_t cp;
        size_t k = grpo_tok__utf8_next(u, n, i, &cp);
        if (cp == UINT32_MAX || !py_space(cp))
            break;
        i += k;
    }
    while (j > i) { /* step back over one character */
        size_t st = j - 1;
        while (st > i && (u[st] & 0xC0) == 0x80 && j - st < 4)
            st--;
        uint32_t cp;
        if (grpo_tok__utf8_next(u, j, st, &cp) != j - st || !py_space(cp))
            break;
        j = st;
    }
    *a = i;
    *b = j;
}
