/* The DeepSeek-V3, DeepSeek-R1 and R1-Distill chat templates, transcribed from their Jinja source
 * statement by statement (including their quirks, e.g. the never-reset is_first flag of tool
 * calls), the dispatch to the Qwen and Llama ones, and the JSON form of a conversation.
 * tests/data/tokenizer/chat_*.json holds jinja2's renderings. */
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

const char grpo_chat_content_absent[1] = "";
const grpo_chat_tool_call grpo_chat_tool_calls_null[1];

/* The template's namespace flags (never reset between messages) and the output. */
typedef struct render {
    grpo_buf b;
    grpo_err err;
    bool is_first, is_tool, is_output_first;
} render;

static void
put(render *r, const char *s)
{
    if (r->err == GRPO_OK)
        r->err = grpo__buf_append(&r->b, s, strlen(s));
}

static void
fail(render *r, size_t i, const grpo_chat_message *m, const char *what)
{
    if (r->err == GRPO_OK)
        r->err = grpo__fail(GRPO_EINVAL, "chat: message %zu (%s) %s", i, m->role, what);
}

/* Jinja's `message['content'] is none`: true for null only, not for a missing key. */
static bool
content_is_none(const grpo_chat_message *m)
{
    return m->content == NULL;
}

/* The content where the template concatenates it: null and a missing key fail there in Jinja
 * (TypeError, UndefinedError), so they fail here. NULL after a failure. */
static const char *
content_text(render *r, size_t i, const grpo_chat_message *m)
{
    if (m->content == NULL)
        fail(r, i, m, "has null content where the template needs a string");
    else if (m->content == grpo_chat_content_absent)
        fail(r, i, m, "has no \"content\" where the template needs a string");
    else
        return m->content;
    return NULL;
}

/* type + sep + name + "\n```json\n" + arguments + "\n```" + call end */
static void
put_call(render *r, size_t i, const grpo_chat_message *m, size_t k)
{
    const grpo_chat_tool_call *c = &m->tool_calls[k];
    if (c->type == NULL || c->name == NULL || c->arguments == NULL) {
        if (r->err == GRPO_OK)
            r->err = grpo__fail(GRPO_EINVAL,
                                "chat: message %zu (%s) tool_calls[%zu] needs string \"type\", "
                                "\"function.name\" and \"function.arguments\" (JSON text)",
                                i, m->role, k);
        return;
    }
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
    return m->role != NULL && strcmp(m->role, role) == 0;
}

/* All system prompts, wherever they are, joined by a blank line (an empty one counts). */
static void
system_prompt(render *r, const grpo_chat_message *msgs, size_t n)
{
    bool first = true;
    for (size_t i = 0; i < n && r->err == GRPO_OK; i++) {
        if (!role_is(&msgs[i], "system"))
            continue;
        const char *c = content_text(r, i, &msgs[i]);
        if (!first)
            put(r, "\n\n");
        if (c != NULL)
            put(r, c);
        first = false;
    }
}

/* V3 reads tool_calls only when the content is null; a missing key loops over nothing. */
static void
v3_assistant(render *r, size_t i, const grpo_chat_message *m)
{
    if (content_is_none(m)) {
        r->is_tool = false;
        if (m->tool_calls == grpo_chat_tool_calls_null)
            fail(r, i, m, "has null content and null tool_calls; the template iterates them");
        for (size_t k = 0; m->tool_calls != NULL && k < m->n_tool_calls && r->err == GRPO_OK; k++) {
            if (!r->is_first) {
                put(r, U_ASSISTANT U_CALLS_BEGIN U_CALL_BEGIN);
                put_call(r, i, m, k);
                r->is_first = true;
            } else {
                put(r, "\n" U_CALL_BEGIN);
                put_call(r, i, m, k);
                put(r, U_CALLS_END U_EOS);
            }
        }
        return;
    }
    const char *c = content_text(r, i, m);
    if (c == NULL)
        return;
    put(r, r->is_tool ? U_OUTS_END : U_ASSISTANT);
    r->is_tool = false;
    put(r, c);
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

/* R1 takes the tool-call branch whenever the key is there ('tool_calls' in message), even when it
 * is null (then it fails iterating it) or an empty list. */
static void
r1_calls(render *r, size_t i, const grpo_chat_message *m)
{
    r->is_tool = false;
    if (m->tool_calls == grpo_chat_tool_calls_null)
        fail(r, i, m, "has null tool_calls; the template iterates them");
    for (size_t k = 0; k < m->n_tool_calls && r->err == GRPO_OK; k++) {
        if (!r->is_first) {
            put(r, U_ASSISTANT);
            if (!content_is_none(m))
                put(r, content_text(r, i, m));
            put(r, U_CALLS_BEGIN U_CALL_BEGIN);
            r->is_first = true;
        } else {
            put(r, "\n" U_CALL_BEGIN);
        }
        put_call(r, i, m, k);
    }
    put(r, U_CALLS_END U_EOS);
}

static void
r1_assistant(render *r, size_t i, const grpo_chat_message *m)
{
    if (m->tool_calls != NULL) {
        r1_calls(r, i, m);
        return;
    }
    const char *c = content_text(r, i, m);
    if (c == NULL)
        return;
    put(r, r->is_tool ? U_OUTS_END : U_ASSISTANT);
    put(r, r->is_tool ? c : after_think(c)); /* old reasoning dropped, except after tool outputs */
    r->is_tool = false;
    put(r, U_EOS);
}

/* R1-Distill: V3's tool-call branch (content null), R1's reasoning cut otherwise. */
static void
distill_assistant(render *r, size_t i, const grpo_chat_message *m)
{
    if (content_is_none(m)) {
        v3_assistant(r, i, m);
        return;
    }
    const char *c = content_text(r, i, m);
    if (c == NULL)
        return;
    put(r, r->is_tool ? U_OUTS_END : U_ASSISTANT);
    put(r, r->is_tool ? c : after_think(c));
    r->is_tool = false;
    put(r, U_EOS);
}

/* R1-Distill keeps only the last system prompt, printed with {{ }}: null shows as "None". */
static void
distill_system(render *r, const grpo_chat_message *msgs, size_t n)
{
    const grpo_chat_message *last = NULL;
    for (size_t i = 0; i < n; i++)
        if (role_is(&msgs[i], "system"))
            last = &msgs[i];
    if (last != NULL)
        put(r, last->content == NULL ? "None" : last->content);
}

static void
tool_output(render *r, size_t i, const grpo_chat_message *m, grpo_chat_family fam)
{
    r->is_tool = true;
    const char *c = content_text(r, i, m);
    if (c == NULL)
        return;
    if (r->is_output_first)
        put(r, U_OUTS_BEGIN U_OUT_BEGIN);
    else
        put(r, fam != GRPO_CHAT_R1 ? "\n" U_OUT_BEGIN : U_OUT_BEGIN);
    r->is_output_first = false;
    put(r, c);
    put(r, U_OUT_END);
}

static void
render_messages(render *r, grpo_chat_family fam, const grpo_chat_message *msgs, size_t n)
{
    for (size_t i = 0; i < n && r->err == GRPO_OK; i++) {
        const grpo_chat_message *m = &msgs[i];
        if (role_is(m, "user")) {
            r->is_tool = false;
            const char *c = content_text(r, i, m);
            put(r, U_USER);
            if (c != NULL)
                put(r, c);
        } else if (role_is(m, "assistant")) {
            if (fam == GRPO_CHAT_V3)
                v3_assistant(r, i, m);
            else if (fam == GRPO_CHAT_R1_DISTILL)
                distill_assistant(r, i, m);
            else
                r1_assistant(r, i, m);
        } else if (role_is(m, "tool")) {
            tool_output(r, i, m, fam);
        } /* any other role, or none: the templates have no branch for it */
    }
}

static void
deepseek(render *r, const grpo_tokenizer *tok, grpo_chat_family fam, const grpo_chat_message *msgs,
         size_t n, int add_generation_prompt)
{
    put(r, tok->bos_text);
    if (fam == GRPO_CHAT_R1_DISTILL)
        distill_system(r, msgs, n);
    else
        system_prompt(r, msgs, n);
    render_messages(r, fam, msgs, n);
    if (r->is_tool)
        put(r, U_OUTS_END);
    if (add_generation_prompt && !r->is_tool)
        put(r, fam != GRPO_CHAT_V3 ? U_ASSISTANT "<think>\n" : U_ASSISTANT);
}

/* The family to render with: the one asked for, else the tokenizer's own (refused, naming the
 * file, when its template is not one we implement). */
static grpo_err
pick_family(const grpo_tokenizer *tok, grpo_chat_family *fam)
{
    if (*fam == GRPO_CHAT_NONE)
        *fam = tok->family;
    if (*fam > GRPO_CHAT_NONE && *fam <= GRPO_CHAT_R1_DISTILL)
        return GRPO_OK;
    if (tok->template_unknown != NULL)
        return grpo__fail(GRPO_EUNSUPPORTED,
                          "chat: %s is not a chat template grpo implements; choose one of v3, r1, "
                          "qwen2.5, qwen3, qwen3-nothink, llama3, llama3.1, r1-distill",
                          tok->template_unknown);
    return grpo__fail(GRPO_EUNSUPPORTED, "chat: the tokenizer has no chat template; choose one "
                                         "of v3, r1, qwen2.5, qwen3, qwen3-nothink, llama3, "
                                         "llama3.1, r1-distill");
}

grpo_err
grpo_chat_render(const grpo_tokenizer *tok, grpo_chat_family fam, const grpo_chat_message *msgs,
                 size_t n, int add_generation_prompt, char **text, size_t *len)
{
    *text = NULL;
    if (len != NULL)
        *len = 0;
    grpo_err err = pick_family(tok, &fam);
    if (err != GRPO_OK)
        return err;
    if (n == 0) /* transformers' apply_chat_template fails on an empty list too */
        return grpo__fail(GRPO_EINVAL, "chat: the conversation has no messages");
    render r = {{0}, GRPO_OK, false, false, true};
    if (fam >= GRPO_CHAT_QWEN25 && fam <= GRPO_CHAT_QWEN3_NO_THINK) {
        tok_out o = {{0}, GRPO_OK};
        grpo_chat__qwen(&o, fam, msgs, n, add_generation_prompt);
        r.b = o.b, r.err = o.err;
    } else if (fam == GRPO_CHAT_LLAMA3 || fam == GRPO_CHAT_LLAMA31) {
        tok_out o = {{0}, GRPO_OK};
        grpo_chat__llama(&o, tok, fam, msgs, n, add_generation_prompt);
        r.b = o.b, r.err = o.err;
    } else {
        deepseek(&r, tok, fam, msgs, n, add_generation_prompt);
    }
    if (r.err == GRPO_OK && r.b.data == NULL) /* an empty result is allocated and terminated too */
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

static const char *const family_names[] = {
    "none", "v3", "r1", "qwen2.5", "qwen3", "qwen3-nothink", "llama3", "llama3.1", "r1-distill"};

int
grpo_chat_family_parse(const char *name)
{
    if (name == NULL)
        return -1;
    if (strcmp(name, "V3") == 0)
        return GRPO_CHAT_V3;
    if (strcmp(name, "R1") == 0)
        return GRPO_CHAT_R1;
    for (int i = 0; i < (int)(sizeof family_names / sizeof family_names[0]); i++)
        if (strcmp(name, family_names[i]) == 0)
            return i;
    return -1;
}

const char *
grpo_chat_family_name(grpo_chat_family family)
{
    if ((int)family < 0 || (int)family >= (int)(sizeof family_names / sizeof family_names[0]))
        return "unknown";
    return family_names[family];
}

/* ---- JSON ---- */

typedef struct chat_priv {
    cJSON *root;
    grpo_chat_tool_call *calls;
} chat_priv;

static const grpo_chat_tool_call no_calls[1];

/* Fields that are not strings (an object as arguments too) stay NULL: the templates fail on them
 * only where they read them, and so does the renderer. */
static void
parse_call(const cJSON *c, grpo_chat_tool_call *out)
{
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(c, "type");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
    out->type = cJSON_IsString(type) ? type->valuestring : NULL;
    out->name = cJSON_IsString(name) ? name->valuestring : NULL;
    out->arguments = cJSON_IsString(args) ? args->valuestring : NULL;
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
    if (content != NULL && !cJSON_IsNull(content) && !cJSON_IsString(content))
        return grpo__fail(GRPO_EFORMAT, "%s: message %zu: \"content\" must be a string or null",
                          where, i);
    /* no role, or not a string: a message the templates pass over, like an unknown role */
    out->role = cJSON_IsString(role) ? role->valuestring : NULL;
    out->content = content == NULL           ? grpo_chat_content_absent
                   : cJSON_IsString(content) ? content->valuestring
                                             : NULL;
    if (tc == NULL)
        return GRPO_OK;
    if (cJSON_IsNull(tc)) {
        out->tool_calls = grpo_chat_tool_calls_null;
        return GRPO_OK;
    }
    if (!cJSON_IsArray(tc))
        return grpo__fail(GRPO_EFORMAT, "%s: message %zu: \"tool_calls\" must be an array", where,
                          i);
    out->tool_calls = *calls == NULL ? no_calls : *calls;
    size_t k = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, tc)
    {
        parse_call(c, &(*calls)[k]);
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
