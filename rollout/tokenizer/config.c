/* tokenizer_config.json: the BOS/EOS tokens and which chat template family the model uses. */
#include "rollout/tokenizer/tok_int.h"
#include "common/json.h"

#include <errno.h>
#include <stdio.h>
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

/* sha256 of each implemented template's text without trailing whitespace (the files of
 * data/chat-templates/; tools/check_chat_family.py checks these against them). */
static const struct {
    const char *sha256;
    grpo_chat_family family;
} known_templates[] = {
    {"55b2f4a26ac9ee719330a61a0c39d9e538b0e9322212f048326318cff4f8674a", GRPO_CHAT_QWEN25},
    {"87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5", GRPO_CHAT_QWEN3},
    {"ba03a121d097859c7b5b9cd03af99aafe95275210d2876f642ad9929a150f122", GRPO_CHAT_LLAMA3},
    {"93c0e9aa3629bbd77e68dbc0f5621f6e6b23aa8d74b932595cdb8d64684526d7", GRPO_CHAT_LLAMA31},
    {"56a1447ad31926fdc21fb07e56e5642bd9c850c4f52d8c8af7bbe5f079a84f5f", GRPO_CHAT_R1_DISTILL},
};

static void
template_hash(const char *tmpl, char hex[65])
{
    size_t n = strlen(tmpl);
    while (n > 0 && (tmpl[n - 1] == ' ' || tmpl[n - 1] == '\n' || tmpl[n - 1] == '\t' ||
                     tmpl[n - 1] == '\r'))
        n--;
    grpo_sha256_hex(tmpl, n, hex);
}

/* By hash first; DeepSeek-V3/R1 templates by their role tokens (as before the hashes). */
static grpo_chat_family
family_of(const char *tmpl, const char *hex)
{
    for (size_t i = 0; i < sizeof known_templates / sizeof known_templates[0]; i++)
        if (strcmp(hex, known_templates[i].sha256) == 0)
            return known_templates[i].family;
    if (strstr(tmpl, "<｜Assistant｜>") == NULL || strstr(tmpl, "<｜User｜>") == NULL)
        return GRPO_CHAT_NONE;
    /* The R1-Distill structure (the last system prompt only) in a text that is not the one
     * implemented (e.g. its January 2025 version without "<think>\n" in the prompt): rendering it
     * as R1 or V3 would be a guess. */
    if (strstr(tmpl, "{% set ns.system_prompt = message['content'] %}") != NULL)
        return GRPO_CHAT_NONE;
    if (strstr(tmpl, "<think>") != NULL || strstr(tmpl, "</think>") != NULL)
        return GRPO_CHAT_R1;
    return GRPO_CHAT_V3;
}

/* Sets the family from one template text; an unknown one is remembered with its hash so that
 * rendering with the tokenizer's own template can say which file and template it refuses. */
static grpo_err
set_family(grpo_tokenizer *tok, const char *tmpl, const char *where)
{
    char hex[65], msg[1200];
    template_hash(tmpl, hex);
    tok->family = family_of(tmpl, hex);
    tok->template_unknown = NULL;
    if (tok->family != GRPO_CHAT_NONE)
        return GRPO_OK;
    snprintf(msg, sizeof msg, "%.1000s: \"chat_template\" (sha256 %.16s...)", where, hex);
    if ((tok->template_unknown = grpo_arena_strdup(tok->arena, msg)) == NULL)
        return grpo__fail(GRPO_ENOMEM, "tokenizer: out of memory");
    return GRPO_OK;
}

static grpo_err
chat_template(grpo_tokenizer *tok, const cJSON *root, const char *where)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "chat_template");
    if (t == NULL || cJSON_IsNull(t))
        return GRPO_OK;
    if (cJSON_IsString(t))
        return set_family(tok, t->valuestring, where);
    if (!cJSON_IsArray(t))
        return grpo__fail(GRPO_EFORMAT, "%s: \"chat_template\" must be a string or a list", where);
    const cJSON *it; /* [{"name": "default", "template": ...}, ...] */
    cJSON_ArrayForEach(it, t)
    {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
        const cJSON *tt = cJSON_GetObjectItemCaseSensitive(it, "template");
        grpo_err err = GRPO_OK;
        if (cJSON_IsString(name) && strcmp(name->valuestring, "default") == 0 && cJSON_IsString(tt))
            err = set_family(tok, tt->valuestring, where);
        if (err != GRPO_OK)
            return err;
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
