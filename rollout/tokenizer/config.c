/* tokenizer_config.json: the BOS/EOS tokens and which chat template family the model uses. */
#include "rollout/tokenizer/tok_int.h"
#include "common/json.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

/* A special token entry: a string, or an AddedToken object with "content", or null. */
static grpo_err
token_field(grpo_tokenizer *tok, const cJSON *root, const char *key, const char *where, int32_t *id,
            const char **content)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    *content = NULL;
    if (v == NULL || cJSON_IsNull(v))
        return GRPO_OK;
    if (cJSON_IsObject(v))
        v = cJSON_GetObjectItemCaseSensitive(v, "content");
    if (!cJSON_IsString(v))
        return grpo__fail(GRPO_EFORMAT, "%s: \"%s\" must be a string or an object with \"content\"",
                          where, key);
    int32_t found = grpo_tokenizer_token_id(tok, v->valuestring);
    if (found < 0)
        return grpo__fail(GRPO_EFORMAT, "%s: \"%s\" is \"%.80s\", which is not a token", where, key,
                          v->valuestring);
    *id = found;
    *content = v->valuestring;
    return GRPO_OK;
}

static grpo_chat_family
family_of(const char *tmpl)
{
    if (strstr(tmpl, "<｜Assistant｜>") == NULL || strstr(tmpl, "<｜User｜>") == NULL)
        return GRPO_CHAT_NONE;
    if (strstr(tmpl, "<think>") != NULL || strstr(tmpl, "</think>") != NULL)
        return GRPO_CHAT_R1;
    return GRPO_CHAT_V3;
}

static grpo_err
chat_template(grpo_tokenizer *tok, const cJSON *root, const char *where)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "chat_template");
    if (t == NULL || cJSON_IsNull(t))
        return GRPO_OK;
    if (cJSON_IsString(t)) {
        tok->family = family_of(t->valuestring);
        return GRPO_OK;
    }
    if (!cJSON_IsArray(t))
        return grpo__fail(GRPO_EFORMAT, "%s: \"chat_template\" must be a string or a list", where);
    const cJSON *it; /* [{"name": "default", "template": ...}, ...] */
    cJSON_ArrayForEach(it, t)
    {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
        const cJSON *tt = cJSON_GetObjectItemCaseSensitive(it, "template");
        if (cJSON_IsString(name) && strcmp(name->valuestring, "default") == 0 && cJSON_IsString(tt))
            tok->family = family_of(tt->valuestring);
    }
    return GRPO_OK;
}

grpo_err
grpo_tok__read_config(grpo_tokenizer *tok, const char *path, bool must_exist)
{
    if (!must_exist && access(path, F_OK) != 0 && errno == ENOENT)
        return GRPO_OK;
    cJSON *root = NULL;
    grpo_err err = grpo__json_parse_file(path, (size_t)64 << 20, &root);
    if (err != GRPO_OK)
        return err;
    const char *bos = NULL, *eos = NULL;
    if (!cJSON_IsObject(root))
        err = grpo__fail(GRPO_EFORMAT, "%s: expected a JSON object", path);
    if (err == GRPO_OK)
        err = token_field(tok, root, "bos_token", path, &tok->bos, &bos);
    if (err == GRPO_OK)
        err = token_field(tok, root, "eos_token", path, &tok->eos, &eos);
    if (err == GRPO_OK && bos != NULL &&
        (tok->bos_text = grpo_arena_strdup(tok->arena, bos)) == NULL)
        err = grpo__fail(GRPO_ENOMEM, "tokenizer: out of memory");
    if (err == GRPO_OK)
        err = chat_template(tok, root, path);
    cJSON_Delete(root);
    return err;
}
