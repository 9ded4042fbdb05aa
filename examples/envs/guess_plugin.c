/* An example environment plugin (ABI: include/grpo/env_plugin.h): a number-guessing game. The
 * model writes "<guess>N</guess>"; the environment answers "<result>higher</result>" (the secret
 * is higher than N), "lower" or "correct". The episode ends on "correct" (reward 1) or after
 * max_guesses guesses (reward 0). Config (optional): {"max_guesses": 7, "max": 100}.
 *
 * The secret is the prompt record's "answer" field (a number, or a string holding one); a record
 * without one gets 1 + (FNV-1a hash of the whole record line) % max, so a prompt always plays the
 * same game.
 * Build: `ninja grpo_example_env` (examples/envs/CMakeLists.txt) or by hand:
 *     cc -shared -fPIC -I include -o guess_plugin.so examples/envs/guess_plugin.c */
#include "grpo/env_plugin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct game {
    long max_guesses, max;
} game;

typedef struct episode {
    long secret, guesses;
} episode;

/* A deliberately tiny reader: the number after "key": (quotes around it allowed), or def. */
static long
find_long(const char *json, const char *key, long def)
{
    char pat[64];
    const char *p;
    snprintf(pat, sizeof pat, "\"%s\"", key);
    if (json == NULL || (p = strstr(json, pat)) == NULL)
        return def;
    p += strlen(pat);
    while (*p == ' ' || *p == ':' || *p == '"')
        p++;
    char *end;
    long v = strtol(p, &end, 10);
    return end == p ? def : v;
}

static int
guess_init(const char *config_json, void **state, char **err_out)
{
    game *g = calloc(1, sizeof *g);
    if (g == NULL)
        return 1;
    g->max_guesses = find_long(config_json, "max_guesses", 7);
    g->max = find_long(config_json, "max", 100);
    if (g->max_guesses < 1 || g->max < 1) {
        *err_out = strdup("guess plugin: max_guesses and max must be positive");
        free(g);
        return 1;
    }
    *state = g;
    return 0;
}

static int
guess_reset(void *state, const char *record_json, void **out, char **err_out)
{
    const game *g = state;
    episode *e = calloc(1, sizeof *e);
    (void)err_out;
    if (e == NULL)
        return 1;
    uint32_t h = 2166136261u;
    for (const char *c = record_json ? record_json : ""; *c; c++)
        h = (h ^ (unsigned char)*c) * 16777619u;
    e->secret = find_long(record_json, "answer", 1 + (long)(h % (uint32_t)g->max));
    *out = e;
    return 0;
}

static int
guess_step(void *state, void *ep, const char *action, size_t len, grpo_env_plugin_step *out)
{
    const game *g = state;
    episode *e = ep;
    char buf[64] = "", *end;
    const char *verdict = "not a number";
    /* the action is "<guess>N</guess>" (markers included): keep the digits between */
    if (len > 15 && len - 15 < sizeof buf)
        memcpy(buf, action + 7, len - 15);
    long n = strtol(buf, &end, 10);
    while (*end == ' ' || *end == '\n')
        end++;
    int number = end != buf && *end == '\0';
    e->guesses++;
    if (number)
        verdict = n < e->secret ? "higher" : n > e->secret ? "lower" : "correct";
    int won = number && n == e->secret;
    out->done = won || e->guesses >= g->max_guesses;
    out->has_reward = out->done;
    out->reward = won ? 1.0 : 0.0;
    snprintf(out->label, sizeof out->label, "%s", number ? "ok" : "bad-action");
    char obs[64], info[64];
    snprintf(obs, sizeof obs, "\n<result>%s</result>\n", verdict);
    snprintf(info, sizeof info, "{\"guesses\":%ld}", e->guesses);
    out->observation = strdup(obs);
    out->observation_len = out->observation ? strlen(obs) : 0;
    out->info_json = strdup(info);
    return out->observation ? 0 : 1;
}

static void
guess_close(void *state, void *episode)
{
    (void)state;
    free(episode);
}

static void
guess_fini(void *state)
{
    free(state);
}

static const grpo_env_api guess_api = {
    GRPO_ENV_ABI_MAJOR, GRPO_ENV_ABI_MINOR, sizeof(grpo_env_api), "guess",     "1.0.0",
    "<guess>",          "</guess>",         guess_init,           guess_reset, guess_step,
    guess_close,        guess_fini,
};

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
const grpo_env_api *
grpo_env_entry(void)
{
    return &guess_api;
}
