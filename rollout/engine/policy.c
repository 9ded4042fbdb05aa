/* A policy for rollouts: the model, its KV pool, its tokenizer and chat template, behind one
 * handle, so `grpo rollout`, `grpo replay` and `grpo bench rollout` set up the same way (replay
 * depends on it: the prompt must tokenize exactly as it did when it was sampled). */
#include "rollout/engine/engine_int.h"
#include "grpo/tokenizer.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct grpo_policy {
    grpo_model *model;
    grpo_kv *kv;
    grpo_tokenizer *tok;     /* NULL: byte tokenizer */
    grpo_chat_family family; /* GRPO_CHAT_NONE: plain text */
    grpo_rollout_backend be;
    int32_t eos, bos;
    char bytes[256][1];
};

static int
is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static grpo_err
open_tokenizer(grpo_policy *p, const char *model_dir, const grpo_policy_opts *o)
{
    char path[4096];
    const char *t = o->template_name ? o->template_name : "r1";
    bool automatic = strcmp(t, "auto") == 0; /* the template of the tokenizer_config.json */
    int fam = automatic ? GRPO_CHAT_NONE : grpo_chat_family_parse(t);
    if (fam < 0)
        return grpo__fail(GRPO_EINVAL,
                          "template \"%s\": expected auto, r1, v3, qwen2.5, qwen3, qwen3-nothink, "
                          "llama3, llama3.1, r1-distill or none",
                          t);
    p->family = (grpo_chat_family)fam;
    if (o->tokenizer == NULL) {
        snprintf(path, sizeof path, "%s/tokenizer.json", model_dir);
        if (!is_file(path)) { /* byte tokenizer (tiny test models) */
            p->family = GRPO_CHAT_NONE;
            return GRPO_OK;
        }
    } else {
        snprintf(path, sizeof path, "%s", o->tokenizer);
    }
    grpo_tokenizer_opts to = {0};
    to.r1 = fam == GRPO_CHAT_R1;
    grpo_err err = grpo_tokenizer_load(&p->tok, path, &to);
    if (err != GRPO_OK)
        return err;
    /* auto with no known template: the renderer's refusal names the file and the template */
    if (automatic && (p->family = grpo_tokenizer_chat_family(p->tok)) == GRPO_CHAT_NONE)
        return grpo_chat_render(p->tok, GRPO_CHAT_NONE, NULL, 0, 1, &(char *){NULL}, NULL);
    const grpo_model_config *cfg = grpo_model_get_config(p->model);
    if (grpo_tokenizer_vocab_size(p->tok) > cfg->vocab_size)
        return grpo__fail(GRPO_EINVAL,
                          "%s: ids run to %d, beyond the model's vocabulary of %d (vocab_size in "
                          "%s/config.json): a prompt using one would index past the embedding",
                          path, grpo_tokenizer_vocab_size(p->tok) - 1, cfg->vocab_size, model_dir);
    if (grpo_tokenizer_eos_id(p->tok) >= 0)
        p->eos = grpo_tokenizer_eos_id(p->tok);
    p->bos = grpo_tokenizer_bos_id(p->tok);
    return GRPO_OK;
}

/* The KV pool: kv_budget_tokens (whole pages) when given, else kv_budget_bytes, else 1 GiB. */
static grpo_err
kv_open(grpo_policy *p, const grpo_model_config *cfg, const grpo_policy_opts *o)
{
    int dt = grpo_model_kv_dtype(p->model);
    size_t bytes = o->kv_budget_bytes ? o->kv_budget_bytes : (size_t)1 << 30;
    if (o->kv_budget_tokens > 0) {
        grpo_kv *probe = NULL;
        size_t page = (size_t)GRPO_KV_PAGE * (size_t)cfg->num_hidden_layers *
                      grpo_model_kv_row(cfg) * 8; /* fp64 bound */
        grpo_err err = grpo_kv_create_dtype(&probe, cfg, dt, page);
        if (err != GRPO_OK)
            return err;
        page = grpo_kv_page_bytes(probe);
        grpo_kv_destroy(probe);
        size_t pages =
            o->kv_budget_tokens / GRPO_KV_PAGE + (o->kv_budget_tokens % GRPO_KV_PAGE != 0);
        if (pages > INT32_MAX)
            return grpo__fail(GRPO_EINVAL,
                              "kv: a budget of %zu tokens is %zu pages; a pool holds at most %d",
                              o->kv_budget_tokens, pages, INT32_MAX);
        bytes = pages * page;
    }
    return grpo_kv_create_for(&p->kv, p->model, bytes);
}

grpo_err
grpo_policy_open(grpo_policy **out, const char *model_dir, const grpo_policy_opts *opts)
{
    grpo_policy_opts o = {0};
    if (opts)
        o = *opts;
    *out = NULL;
    grpo_policy *p = calloc(1, sizeof *p);
    if (p == NULL)
        return grpo__fail(GRPO_ENOMEM, "policy: out of memory");
    for (int i = 0; i < 256; i++)
        p->bytes[i][0] = (char)i;
    grpo_model_opts mo = {0};
    mo.n_threads = o.n_threads;
    mo.backend = o.backend;
    mo.numerics = o.numerics;
    mo.kv_dtype = o.kv_dtype;
    mo.load_mtp = o.load_mtp;
    grpo_err err = grpo_model_load(&p->model, model_dir, &mo);
    if (err != GRPO_OK)
        goto done;
    const grpo_model_config *cfg = grpo_model_get_config(p->model);
    p->eos = cfg->eos_token_id, p->bos = cfg->bos_token_id;
    if ((err = kv_open(p, cfg, &o)) != GRPO_OK ||
        (err = open_tokenizer(p, model_dir, &o)) != GRPO_OK ||
        (err = grpo_rollout_backend_model(&p->be, p->model, p->kv)) != GRPO_OK)
        goto done;
    if (p->tok == NULL && cfg->vocab_size < 256)
        err = grpo__fail(GRPO_EUNSUPPORTED, "%s: no tokenizer.json and a vocabulary of %d < 256",
                         model_dir, cfg->vocab_size);
done:
    if (err != GRPO_OK) {
        grpo_policy_close(p);
        p = NULL;
    }
    *out = p;
    return err;
}

void
grpo_policy_close(grpo_policy *p)
{
    if (p == NULL)
        return;
    grpo_rollout_backend_fini(&p->be);
    grpo_tokenizer_destroy(p->tok);
    grpo_kv_destroy(p->kv);
    grpo_model_destroy(p->model);
    free(p);
}

const grpo_rollout_backend *
grpo_policy_backend(grpo_policy *p)
{
    return &p->be;
}

grpo_model *
grpo_policy_model(grpo_policy *p)
{
    return p->model;
}

grpo_kv *
grpo_policy_kv(grpo_policy *p)
{
    return p->kv;
}

int32_t
grpo_policy_eos_id(const grpo_policy *p)
{
    return p->eos;
}

int
grpo_policy_opens_think(const grpo_policy *p)
{
    /* R1's and the R1-Distill templates end the prompt with "<think>\n"; Qwen3's leaves opening
     * it to the model (and with thinking off closes an empty block itself). */
    return p->tok != NULL && (p->family == GRPO_CHAT_R1 || p->family == GRPO_CHAT_R1_DISTILL);
}

const char *
grpo_policy_template(const grpo_policy *p)
{
    if (p->tok == NULL)
        return "bytes";
    return grpo_chat_family_name(p->family);
}

const char *
grpo_policy_token_bytes(const void *policy, int32_t id, size_t *len)
{
    const grpo_policy *p = policy;
    if (p->tok != NULL)
        return grpo_tokenizer_token_bytes(p->tok, id, len);
    *len = 0;
    if (id < 0 || id >= 256)
        return NULL;
    *len = 1;
    return p->bytes[id];
}

/* Byte tokenizer: BOS, then the bytes of the text (messages: their contents, one per line). */
static grpo_err
encode_bytes(const grpo_policy *p, const char *text, int32_t **ids, size_t *n)
{
    size_t len = strlen(text), k = 0;
    int32_t *v = malloc((len + 1) * sizeof *v);
    if (v == NULL)
        return grpo__fail(GRPO_ENOMEM, "policy: out of memory");
    if (p->bos >= 0)
        v[k++] = p->bos;
    for (size_t i = 0; i < len; i++)
        v[k++] = (unsigned char)text[i];
    *ids = v, *n = k;
    return GRPO_OK;
}

grpo_err
grpo_policy_encode_text(const grpo_policy *p, const char *text, size_t len, int32_t **ids,
                        size_t *n)
{
    if (p->tok != NULL)
        return grpo_tokenizer_encode(p->tok, text, len, GRPO_TOK_PARSE_SPECIAL, ids, n);
    int32_t *v = malloc((len + 1) * sizeof *v);
    if (v == NULL)
        return grpo__fail(GRPO_ENOMEM, "policy: out of memory");
    for (size_t i = 0; i < len; i++)
        v[i] = (unsigned char)text[i];
    *ids = v, *n = len;
    return GRPO_OK;
}

static grpo_err
messages_of(const grpo_prompt *pr, grpo_chat *chat, grpo_chat_message *one)
{
    memset(chat, 0, sizeof *chat);
    if (pr->messages_json != NULL)
        return grpo_chat_parse_json(chat, pr->messages_json, strlen(pr->messages_json), pr->id);
    memset(one, 0, sizeof *one);
    one->role = "user";
    one->content = pr->prompt;
    chat->msgs = one;
    chat->n = 1;
    return GRPO_OK;
}

grpo_err
grpo_policy_encode(const grpo_policy *p, const grpo_prompt *pr, int32_t **ids, size_t *n,
                   char **text)
{
    grpo_chat chat;
    grpo_chat_message one;
    grpo_buf plain = {0};
    char *rendered = NULL;
    size_t rlen = 0;
    grpo_err err = messages_of(pr, &chat, &one);
    *ids = NULL, *n = 0;
    if (err != GRPO_OK)
        return err;
    if (p->tok != NULL && p->family != GRPO_CHAT_NONE) {
        err = grpo_chat_render(p->tok, p->family, chat.msgs, chat.n, 1, &rendered, &rlen);
        if (err == GRPO_OK)
            err = grpo_tokenizer_encode(p->tok, rendered, rlen, GRPO_TOK_PARSE_SPECIAL, ids, n);
    } else {
        for (size_t i = 0; i < chat.n && err == GRPO_OK; i++)
            err = grpo__buf_printf(&plain, "%s%s", i ? "\n" : "",
                                   chat.msgs[i].content ? chat.msgs[i].content : "");
        if (err == GRPO_OK && (err = grpo__buf_append(&plain, "", 1)) == GRPO_OK) {
            rendered = plain.data, plain.data = NULL;
            if (p->tok != NULL)
                err = grpo_tokenizer_encode(p->tok, rendered, strlen(rendered), GRPO_TOK_ADD_BOS,
                                            ids, n);
            else
                err = encode_bytes(p, rendered, ids, n);
        }
    }
    if (chat.msgs != &one)
        grpo_chat_fini(&chat);
    grpo__buf_fini(&plain);
    if (err == GRPO_OK && *n == 0)
        err = grpo__fail(GRPO_EINVAL, "prompt \"%s\" encodes to no tokens", pr->id);
    if (err == GRPO_OK && text != NULL)
        *text = rendered, rendered = NULL;
    if (err != GRPO_OK)
        free(*ids), *ids = NULL, *n = 0;
    free(rendered);
    return err;
}
