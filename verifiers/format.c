/* The R1 think-format verifier: one non-empty reasoning block closed once by </think>, then a
 * non-empty answer, and no other think tags. One linear scan over the bytes (no regex, so no
 * backtracking); a <think> the chat template already emitted counts as open
 * (sample->prompt_opens_think). Config (JSON, optional): {"partial": false} gives partial credit
 * (a quarter per property that holds) instead of 0 on failure. */
#include "grpo/verify.h"

#include "common/json.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FORMAT_VERSION "1.0.0"

typedef struct fstate {
    bool partial;
} fstate;

typedef struct fscan {
    int opens, closes;
    size_t open_end; /* byte after the first <think> (or 0 when the prompt opened it) */
    size_t close_at; /* position of the first </think> */
    size_t close_end;
    bool preamble;   /* non-space text before the first <think> */
    const char *bad; /* first structural fault, as a verdict label */
} fscan;

static bool
blank(const char *s, size_t a, size_t b)
{
    for (size_t i = a; i < b; i++)
        if (!isspace((unsigned char)s[i]))
            return false;
    return true;
}

static void
scan(const char *s, size_t n, bool prompt_open, fscan *f)
{
    bool open = prompt_open;
    memset(f, 0, sizeof *f);
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '<')
            continue;
        if (i + 7 <= n && memcmp(s + i, "<think>", 7) == 0) {
            if (f->opens == 0 && !prompt_open) {
                f->preamble = !blank(s, 0, i);
                f->open_end = i + 7;
            }
            if (open && f->bad == NULL)
                f->bad = "nested-think";
            else if (f->closes > 0 && f->bad == NULL)
                f->bad = "extra-think";
            f->opens++;
            open = true;
            i += 6;
        } else if (i + 8 <= n && memcmp(s + i, "</think>", 8) == 0) {
            if (!open && f->bad == NULL)
                f->bad = "stray-close";
            if (f->closes == 0) {
                f->close_at = i;
                f->close_end = i + 8;
            }
            f->closes++;
            open = false;
            i += 7;
        }
    }
    if (open && f->bad == NULL)
        f->bad = "unclosed-think";
}

/* Fills v from the scan; returns the number of the four properties that hold. */
static int
judge(const char *s, size_t n, bool prompt_open, const fscan *f, grpo_verdict *v)
{
    bool opened = prompt_open || f->opens > 0;
    bool closed_once = f->closes == 1;
    size_t r0 = prompt_open ? 0 : f->open_end;
    bool reasoning = opened && f->closes > 0 && f->close_at >= r0 && !blank(s, r0, f->close_at);
    bool answer = f->closes > 0 && !blank(s, f->close_end, n);
    int props = opened + closed_once + reasoning + answer;
    const char *label = "ok";
    if (!opened && f->closes == 0)
        label = "no-think";
    else if (f->bad)
        label = f->bad;
    else if (prompt_open && f->opens > 0)
        label = "nested-think";
    else if (f->preamble)
        label = "text-before-think";
    else if (!closed_once)
        label = "stray-close";
    else if (!reasoning)
        label = "empty-reasoning";
    else if (!answer)
        label = "empty-answer";
    snprintf(v->label, sizeof v->label, "%s", label);
    v->kind = strcmp(label, "ok") == 0 ? GRPO_VERDICT_PASS : GRPO_VERDICT_FAIL;
    return props;
}

static int
format_init(const char *config_json, void **state, char **err_out)
{
    fstate *st = calloc(1, sizeof *st);
    cJSON *j = NULL;
    *err_out = NULL;
    if (st == NULL)
        return -1;
    if (config_json && *config_json) {
        bool partial = false;
        static const char *const keys[] = {"partial", NULL};
        if (grpo__json_parse(config_json, strlen(config_json), "format config", &j) != GRPO_OK ||
            grpo__json_check_keys(j, "format config", keys) != GRPO_OK ||
            grpo__json_bool_opt(j, "partial", "format config", &partial) != GRPO_OK) {
            *err_out = strdup(grpo_error_last());
            cJSON_Delete(j);
            free(st);
            return -1;
        }
        st->partial = partial;
    }
    cJSON_Delete(j);
    *state = st;
    return 0;
}

static int
format_score(void *state, const grpo_verifier_sample *s, grpo_verdict *out)
{
    const fstate *st = state;
    fscan f;
    const char *c = s->completion ? s->completion : "";
    size_t n = s->completion ? s->completion_len : 0;
    memset(out, 0, sizeof *out);
    scan(c, n, s->prompt_opens_think != 0, &f);
    int props = judge(c, n, s->prompt_opens_think != 0, &f, out);
    if (out->kind == GRPO_VERDICT_PASS)
        out->score = 1.0;
    else if (st && st->partial)
        out->score = props / 4.0;
    char d[128];
    snprintf(d, sizeof d, "{\"opens\":%d,\"closes\":%d}", f.opens, f.closes);
    out->details_json = strdup(d);
    return 0;
}

static void
format_fini(void *state)
{
    free(state);
}

const grpo_verifier_api *
grpo_verifier_format(void)
{
    static const grpo_verifier_api api = {GRPO_VERIFIER_ABI_MAJOR,
                                          GRPO_VERIFIER_ABI_MINOR,
                                          sizeof(grpo_verifier_api),
                                          "format",
                                          FORMAT_VERSION,
                                          format_init,
                                          format_score,
                                          format_fini};
    return &api;
}
