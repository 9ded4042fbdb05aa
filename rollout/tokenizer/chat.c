/* The DeepSeek-V3 and DeepSeek-R1 chat templates, transcribed from their Jinja source statement by
 * statement (including their quirks, e.g. the never-reset is_first flag of tool calls), and the
 * JSON form of a conversation. tests/data/tokenizer/chat_*.json holds jinja2's renderings. */
#include "rollout/tokenizer/tok_int.h"
#include "common/json.h"

#include <stdlib.h>
#include <string.h>

#define U_USER "<｜User｜>"
#define U_ASSISTANT "<｜Assistant｜>"
#define U_EOS "<｜end▁of▁sentence｜>"
#define U_CALLS_BEGIN "<｜tool▁calls▁begin｜>"
#define U_CALLS_END "<｜tool▁calls▁end｜>"
#define U_CALL_BEGIN "<｜tool▁call▁begin｜>"
#define U_CALL_END "<｜tool▁call▁end｜>"
#define U_SEP "<｜tool▁sep｜>"
#define U_OUTS_BEGIN "<｜tool▁outputs▁begin｜>"
#define U_OUTS_END "<｜tool▁outputs▁end｜>"
#define U_OUT_BEGIN "<｜tool▁output▁begin｜>"
#define U_OUT_END "<｜tool▁output▁end｜>"

typedef struct render {
    grpo_buf b;
    grpo_err err;
} render;

static void
put(render *r, const char *s)
{
    if (r->err == GRPO_OK)
        r->err = grpo__buf_append(&r->b, s, strlen(s));
}

/* type + sep + name + "\n```json\n" + arguments + "\n```" + call end */
static void
put_call(render *r, const grpo_chat_tool_call *c)
{
    put(r, c->type);
    put(r, U_SEP);
    put(r, c->name);
    put(r, "\n```json\n");
    put(r, c->arguments);
    put(r, "\n```" U_CALL_END);
}

static bool
role_is(const grpo_chat_message *m, const char *role)
{
    return strcmp(m->role, role) == 0;
}

static grpo_err
validate(const grpo_chat_message *msgs, size_t n, grpo_chat_family fam)
{
    for (size_t i = 0; i < n; i++) {
        const grpo_chat_message *m = &msgs[i];
        if (m->role == NULL)
            return grpo__fail(GRPO_EINVAL, "chat: message %zu has no role", i);
        bool asst = role_is(m, "assistant");
        if (!asst && !role_is(m, "system") && !role_is(m, "user") && !role_is(m, "tool"))
            return grpo__fail(GRPO_EINVAL,
                              "chat: message %zu has role \"%.40s\"; expected system, user, "
                              "assistant or tool",
                              i, m->role);
        bool calls = asst && (fam == GRPO_CHAT_R1 ? m->tool_calls != NULL : m->content == NULL);
        if (m->content == NULL && !calls)
            return grpo__fail(GRPO_EINVAL, "chat: message %zu (%s) has no content", i, m->role);
        if (calls && m->tool_calls == NULL)
            return grpo__fail(
                GRPO_EINVAL, "chat: message %zu (assistant) has neither content nor tool_calls", i);
        for (size_t k = 0; calls && k < m->n_tool_calls; k++) {
            const grpo_chat_tool_call *c = &m->tool_calls[k];
            if (c->type == NULL || c->name == NULL || c->arguments == NULL)
                return grpo__fail(GRPO_EINVAL,
                                  "chat: message %zu tool_calls[%zu] needs type, name and "
                                  "arguments",
                                  i, k);
        }
    }
    return GRPO_OK;
}

static void
system_prompt(render *r, const grpo_chat_message *msgs, size_t n)
{
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        if (!role_is(&msgs[i], "system"))
            continue;
        if (!first)
            put(r, "\n\n");
        put(r, msgs[i].content);
        first = false;
    }
}

typedef struct ns {
    bool is_first, is_tool, is_output_first;
} ns;

static void
v3_assistant(render *r, ns *s, const grpo_chat_message *m)
{
    if (m->content == NULL) {
        s->is_tool = false;
        for (size_t k = 0; k < m->n_tool_calls; k++) {
            if (!s->is_first) {
                put(r, U_ASSISTANT U_CALLS_BEGIN U_CALL_BEGIN);
                put_call(r, &m->tool_calls[k]);
                s->is_first = true;
            } else {
                put(r, "\n" U_CALL_BEGIN);
                put_call(r, &m->tool_calls[k]);
                put(r, U_CALLS_END U_EOS);
            }
        }
        return;
    }
    if (s->is_tool) {
        put(r, U_OUTS_END);
        s->is_tool = false;
    } else {
        put(r, U_ASSISTANT);
    }
    put(r, m->content);
    put(r, U_EOS);
}

/* The text after the last "</think>" (all of it when there is none). */
static const char *
after_think(const char *s)
{
    const char *p = s, *hit;
    while ((hit = strstr(p, "</think>")) != NULL)
        p = hit + strlen("</think>");
    return p;
}

static void
r1_assistant(render *r, ns *s, const grpo_chat_message *m)
{
    if (m->tool_calls != NULL) {
        s->is_tool = false;
        for (size_t k = 0; k < m->n_tool_calls; k++) {
            if (!s->is_first) {
                put(r, U_ASSISTANT);
                if (m->content != NULL)
                    put(r, m->content);
                put(r, U_CALLS_BEGIN U_CALL_BEGIN);
                s->is_first = true;
            } else {
                put(r, "\n" U_CALL_BEGIN);
            }
            put_call(r, &m->tool_calls[k]);
        }
        put(r, U_CALLS_END U_EOS);
        return;
    }
    if (s->is_tool) {
        put(r, U_OUTS_END);
        put(r, m->content);
        s->is_tool = false;
    } else {
        put(r, U_ASSISTANT);
        put(r, after_think(m->content));
    }
    put(r, U_EOS);
}

static void
tool_output(render *r, ns *s, const grpo_chat_message *m, grpo_chat_family fam)
{
    s->is_tool = true;
    if (s->is_output_first) {
        put(r, U_OUTS_BEGIN U_OUT_BEGIN);
        s->is_output_first = false;
    } else {
        put(r, fam == GRPO_CHAT_V3 ? "\n" U_OUT_BEGIN : U_OUT_BEGIN);
    }
    put(r, m->content);
    put(r, U_OUT_END);
}

grpo_err
grpo_chat_render(const grpo_tokenizer *tok, grpo_chat_family fam, const grpo_chat_message *msgs,
                 size_t n, int add_generation_prompt, char **text, size_t *len)
{
    *text = NULL;
    if (len != NULL)
        *len = 0;
    if (fam == GRPO_CHAT_NONE)
        fam = tok->family;
    if (fam != GRPO_CHAT_V3 && fam != GRPO_CHAT_R1)
        return grpo__fail(GRPO_EUNSUPPORTED,
                          "chat: the tokenizer has no DeepSeek chat template; choose v3 or r1");
    grpo_err err = validate(msgs, n, fam);
    if (err != GRPO_OK)
        return err;
    render r = {{0}, GRPO_OK};
    ns s = {false, false, true};
    put(&r, tok->bos_text);
    system_prompt(&r, msgs, n);
    for (size_t i = 0; i < n; i++) {
        const grpo_chat_message *m = &msgs[i];
        if (role_is(m, "user")) {
            s.is_tool = false;
            put(&r, U_USER);
            put(&r, m->content);
        } else if (role_is(m, "assistant")) {
            if (fam == GRPO_CHAT_V3)
                v3_assistant(&r, &s, m);
            else
                r1_assistant(&r, &s, m);
        } else if (role_is(m, "tool")) {
            tool_output(&r, &s, m, fam);
        }
    }
    if (s.is_tool)
        put(&r, U_OUTS_END);
    if (add_generation_prompt && !s.is_tool)
        put(&r, fam == GRPO_CHAT_R1 ? U_ASSISTANT "<think>\n" : U_ASSISTANT);
    put(&r, ""); /* allocates and NUL-terminates an empty result too */
    if (r.err == GRPO_OK && r.b.data == NULL)
        r.err = grpo__buf_append(&r.b, "", 0);
    if (r.err != GRPO_OK) {
        grpo__buf_fini(&r.b);
        return r.err;
    }
    *text = r.b.data;
    if (len != NULL)
        *len = r.b.len;
    return GRPO_OK;
}

grpo_err
grpo_chat_encode(const grpo_tokenizer *tok, grpo_chat_family family, const grpo_chat_message *msgs,
                 size_t n, int add_generation_prompt, int32_t **ids, size_t *n_ids)
{
    char *text = NULL;
    size_t len = 0;
    *ids = NULL;
    *n_ids = 0;
    grpo_err err = grpo_chat_render(tok, family, msgs, n, add_generation_prompt, &text, &len);
    if (err == GRPO_OK)
        err = grpo_tokenizer_encode(tok, text, len, GRPO_TOK_PARSE_SPECIAL, ids, n_ids);
    free(text);
    return err;
}

int
grpo_chat_family_parse(const char *name)
{
    if (name == NULL)
        return -1;
    if (strcmp(name, "v3") == 0 || strcmp(name, "V3") == 0)
        return GRPO_CHAT_V3;
    if (strcmp(name, "r1") == 0 || strcmp(name, "R1") == 0)
        return GRPO_CHAT_R1;
    if (strcmp(name, "none") == 0)
        return GRPO_CHAT_NONE;
    return -1;
}

/* ---- JSON ---- */

typedef struct chat_priv {
    cJSON *root;
    grpo_chat_tool_call *calls;
} chat_priv;

static const grpo_chat_tool_call no_calls[1];

static grpo_err
parse_call(cJSON *c, const char *where, size_t i, size_t k, grpo_chat_tool_call *out)
{
    cJSON *type = cJSON_GetObjectItemCaseSensitive(c, "type");
    cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
    cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
    if (args != NULL && (cJSON_IsObject(args) || cJSON_IsArray(args))) {
        char *s = cJSON_PrintUnformatted(args); /* an extension: jinja would refuse a dict */
        cJSON *str = s != NULL ? cJSON_CreateString(s) : NULL;
        free(s);
        if (str == NULL || !cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", str)) {
            cJSON_Delete(str);
            return grpo__fail(GRPO_ENOMEM, "chat: out of memory");
        }
        args = str;
    }
    if (!cJSON_IsString(type) || !cJSON_IsString(name) || !cJSON_IsString(args))
        return grpo__fail(GRPO_EFORMAT,
                          "%s: message %zu tool_calls[%zu] needs string \"type\", "
                          "\"function.name\" and \"function.arguments\"",
                          where, i, k);
    out->type = type->valuestring;
    out->name = name->valuestring;
    out->arguments = args->valuestring;
    return GRPO_OK;
}

static grpo_err
parse_message(cJSON *m, const char *where, size_t i, grpo_chat_message *out,
              grpo_chat_tool_call **calls)
{
    if (!cJSON_IsObject(m))
        return grpo__fail(GRPO_EFORMAT, "%s: message %zu is not an object", where, i);
    cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    if (!cJSON_IsString(role))
        return grpo__fail(GRPO_EFORMAT, "%s: message %zu: \"role\" must be a string", where, i);
    if (content != NULL && !cJSON_IsNull(content) && !cJSON_IsString(content))
        return grpo__fail(GRPO_EFORMAT, "%s: message %zu: \"content\" must be a string or null",
                          where, i);
    out->role = role->valuestring;
    out->content = cJSON_IsString(content) ? content->valuestring : NULL;
    if (tc == NULL || cJSON_IsNull(tc))
        return GRPO_OK;
    if (!cJSON_IsArray(tc))
        return grpo__fail(GRPO_EFORMAT, "%s: message %zu: \"tool_calls\" must be an array", where,
                          i);
    out->tool_calls = *calls == NULL ? no_calls : *calls;
    size_t k = 0;
    cJSON *c;
    cJSON_ArrayForEach(c, tc)
    {
        grpo_err err = parse_call(c, where, i, k, &(*calls)[k]);
        if (err != GRPO_OK)
            return err;
        k++;
    }
    out->n_tool_calls = k;
    *calls += k;
    return GRPO_OK;
}

static size_t
count_calls(const cJSON *list)
{
    size_t n = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, list)
    {
        const cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        if (cJSON_IsArray(tc))
            n += (size_t)cJSON_GetArraySize(tc);
    }
    return n;
}

grpo_err
grpo_chat_parse_json(grpo_chat *out, const char *json, size_t len, const char *where)
{
    memset(out, 0, sizeof *out);
    chat_priv *p = calloc(1, sizeof *p);
    if (p == NULL)
        return grpo__fail(GRPO_ENOMEM, "chat: out of memory");
    out->priv_ = p;
    /* invalid UTF-8 or a \u0000 would reach the template unnoticed (or cut a message short) */
    grpo_err err = grpo__json_parse_text(json, len, where, &p->root);
    if (err != GRPO_OK)
        goto done;
    cJSON *list = p->root;
    if (cJSON_IsObject(list))
        list = cJSON_GetObjectItemCaseSensitive(list, "messages");
    if (!cJSON_IsArray(list)) {
        err = grpo__fail(GRPO_EFORMAT,
                         "%s: expected an array of messages or an object with \"messages\"", where);
        goto done;
    }
    size_t n = (size_t)cJSON_GetArraySize(list), nc = count_calls(list), i = 0;
    out->msgs = calloc(n ? n : 1, sizeof *out->msgs);
    p->calls = nc ? calloc(nc, sizeof *p->calls) : NULL;
    if (out->msgs == NULL || (nc && p->calls == NULL)) {
        err = grpo__fail(GRPO_ENOMEM, "chat: out of memory");
        goto done;
    }
    grpo_chat_tool_call *calls = p->calls;
    cJSON *m;
    cJSON_ArrayForEach(m, list)
    {
        if ((err = parse_message(m, where, i, &out->msgs[i], &calls)) != GRPO_OK)
            goto done;
        i++;
    }
    out->n = n;
done:
    if (err != GRPO_OK)
        grpo_chat_fini(out);
    return err;
}

void
grpo_chat_fini(grpo_chat *c)
{
    if (c == NULL)
        return;
    chat_priv *p = c->priv_;
    if (p != NULL) {
        cJSON_Delete(p->root);
        free(p->calls);
        free(p);
    }
    free(c->msgs);
    memset(c, 0, sizeof *c);
}
