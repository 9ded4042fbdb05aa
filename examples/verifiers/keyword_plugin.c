/* An example verifier plugin (ABI: include/grpo/verifier.h). It passes a completion whose answer
 * part (after the last "</think>") contains a keyword given in the config, e.g.
 *     {"keyword": "QED", "reward": 1.0}
 * Build: `ninja grpo_example_verifier` (examples/verifiers/CMakeLists.txt) or by hand:
 *     cc -shared -fPIC -I include -o keyword_plugin.so examples/verifiers/keyword_plugin.c
 * Use: `grpo verify --plugin ./keyword_plugin.so ...` (runs it in a sandboxed worker). */
#include "grpo/verifier.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct kw_state {
    char keyword[256];
    double reward;
} kw_state;

/* A deliberately tiny reader for {"keyword": "...", "reward": x}: no escapes in the keyword. */
static const char *
find_value(const char *json, const char *key)
{
    char pat[64];
    const char *p;
    snprintf(pat, sizeof pat, "\"%s\"", key);
    if ((p = strstr(json, pat)) == NULL)
        return NULL;
    p += strlen(pat);
    while (*p == ' ' || *p == ':')
        p++;
    return p;
}

static int
kw_init(const char *config_json, void **state, char **err_out)
{
    kw_state *s = calloc(1, sizeof *s);
    const char *v;
    *state = NULL;
    if (s == NULL)
        return 1;
    s->reward = 1.0;
    v = config_json ? find_value(config_json, "keyword") : NULL;
    if (v == NULL || *v != '"' || strchr(v + 1, '"') == NULL) {
        if (err_out)
            *err_out = strdup("keyword plugin: config needs {\"keyword\": \"...\"}");
        free(s);
        return 1;
    }
    size_t n = (size_t)(strchr(v + 1, '"') - (v + 1));
    if (n == 0 || n >= sizeof s->keyword) {
        if (err_out)
            *err_out = strdup("keyword plugin: keyword must have 1 to 255 bytes");
        free(s);
        return 1;
    }
    memcpy(s->keyword, v + 1, n);
    if ((v = find_value(config_json, "reward")) != NULL)
        s->reward = strtod(v, NULL);
    if (!(s->reward >= GRPO_VERDICT_SCORE_MIN && s->reward <= GRPO_VERDICT_SCORE_MAX)) {
        if (err_out) /* the host would make every such verdict a "bad-score" error */
            *err_out = strdup("keyword plugin: reward must be in [0, 1]");
        free(s);
        return 1;
    }
    *state = s;
    return 0;
}

static int
kw_score(void *state, const grpo_verifier_sample *sample, grpo_verdict *out)
{
    const kw_state *s = state;
    const char *text = sample->completion ? sample->completion : "";
    const char *close, *answer = text;
    char details[320];
    while ((close = strstr(answer, "</think>")) != NULL)
        answer = close + 8;
    int found = strstr(answer, s->keyword) != NULL;
    memset(out, 0, sizeof *out);
    out->kind = found ? GRPO_VERDICT_PASS : GRPO_VERDICT_FAIL;
    out->score = found ? s->reward : 0.0;
    snprintf(out->label, sizeof out->label, "%s", found ? "keyword-found" : "keyword-missing");
    snprintf(details, sizeof details, "{\"keyword_found\":%s}", found ? "true" : "false");
    out->details_json = strdup(details);
    return 0;
}

static void
kw_fini(void *state)
{
    free(state);
}

static const grpo_verifier_api kw_api = {
    GRPO_VERIFIER_ABI_MAJOR,
    GRPO_VERIFIER_ABI_MINOR,
    sizeof(grpo_verifier_api),
    "keyword",
    "1.0.0",
    kw_init,
    kw_score,
    kw_fini,
};

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
const grpo_verifier_api *
grpo_verifier_entry(void)
{
    return &kw_api;
}
