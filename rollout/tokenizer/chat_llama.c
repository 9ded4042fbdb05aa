/* The Meta-Llama-3 and Llama 3.1/3.3 chat templates (data/chat-templates/llama3.jinja,
 * llama3.1.jinja) without tools or builtin_tools, transcribed statement by statement. Their
 * quirks kept: `content | trim` prints a null content as "None"; 3.1 writes a tool output that
 * is a string through tojson (a string is iterable), allows one tool call per message, and
 * renders any other role as a header of that name. */
#include "rollout/tokenizer/tok_int.h"

#include <string.h>

#define HDR_START "<|start_header_id|>"
#define HDR_END "<|end_header_id|>\n\n"
#define EOT "<|eot_id|>"

/* message['content'] | trim: str(value).strip(); null is "None", a missing key "". */
static void
put_trim(tok_out *o, const grpo_chat_message *m)
{
    const char *c = m->content == NULL ? "None" : m->content;
    size_t a, b;
    grpo_chat__py_strip(c, strlen(c), &a, &b);
    grpo_chat__putn(o, c + a, b - a);
}

/* '<|start_header_id|>' + role + ... : a missing or non-string role fails there. */
static void
header_turn(tok_out *o, size_t i, const grpo_chat_message *m)
{
    if (m->role == NULL) {
        grpo_chat__fail(o, i, m, "has no string role; the template concatenates it");
        return;
    }
    grpo_chat__put(o, HDR_START);
    grpo_chat__put(o, m->role);
    grpo_chat__put(o, HDR_END);
    put_trim(o, m);
    grpo_chat__put(o, EOT);
}

static void
llama3(tok_out *o, const char *bos, const grpo_chat_message *msgs, size_t n)
{
    for (size_t i = 0; i < n && o->err == GRPO_OK; i++) {
        if (i == 0)
            grpo_chat__put(o, bos);
        header_turn(o, i, &msgs[i]);
    }
}

static void
llama31_call(tok_out *o, size_t i, const grpo_chat_message *m)
{
    if (m->tool_calls == grpo_chat_tool_calls_null)
        grpo_chat__fail(o, i, m, "has null tool_calls; the template takes their length");
    else if (m->n_tool_calls != 1)
        grpo_chat__fail(o, i, m, "has other than one tool call; Llama 3.1 takes exactly one");
    else if (m->tool_calls[0].name == NULL || m->tool_calls[0].arguments == NULL)
        grpo_chat__fail(o, i, m, "has a tool call without a string function name and arguments");
    if (o->err != GRPO_OK)
        return;
    grpo_chat__put(o, HDR_START "assistant" HDR_END "{\"name\": \"");
    grpo_chat__put(o, m->tool_calls[0].name);
    grpo_chat__put(o, "\", \"parameters\": ");
    grpo_chat__put_json_str(o, m->tool_calls[0].arguments);
    grpo_chat__put(o, "}" EOT);
}

static void
llama31_tool(tok_out *o, size_t i, const grpo_chat_message *m)
{
    if (m->content == grpo_chat_content_absent) {
        grpo_chat__fail(o, i, m, "has no \"content\"; the template writes it through tojson");
        return;
    }
    grpo_chat__put(o, HDR_START "ipython" HDR_END);
    if (m->content == NULL)
        grpo_chat__put(o, "None");
    else
        grpo_chat__put_json_str(o, m->content);
    grpo_chat__put(o, EOT);
}

static void
llama31(tok_out *o, const char *bos, const grpo_chat_message *msgs, size_t n)
{
    size_t i = 0;
    grpo_chat__put(o, bos);
    grpo_chat__put(o, HDR_START "system" HDR_END "Cutting Knowledge Date: December 2023\n"
                                "Today Date: 26 Jul 2024\n\n");
    if (grpo_chat__role_is(&msgs[0], "system"))
        put_trim(o, &msgs[0]), i = 1;
    grpo_chat__put(o, EOT);
    for (; i < n && o->err == GRPO_OK; i++) {
        const grpo_chat_message *m = &msgs[i];
        bool tool = grpo_chat__role_is(m, "ipython") || grpo_chat__role_is(m, "tool");
        if (!tool && m->tool_calls == NULL)
            header_turn(o, i, m);
        else if (m->tool_calls != NULL)
            llama31_call(o, i, m);
        else
            llama31_tool(o, i, m);
    }
}

void
grpo_chat__llama(tok_out *o, const grpo_tokenizer *tok, grpo_chat_family fam,
                 const grpo_chat_message *msgs, size_t n, int add_generation_prompt)
{
    if (fam == GRPO_CHAT_LLAMA3)
        llama3(o, tok->bos_text, msgs, n);
    else
        llama31(o, tok->bos_text, msgs, n);
    if (add_generation_prompt)
        grpo_chat__put(o, HDR_START "assistant" HDR_END);
}
