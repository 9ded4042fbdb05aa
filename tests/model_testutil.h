/* Helpers shared by the model tests: fixture paths and files, comparisons. */
#ifndef GRPO_MODEL_TESTUTIL_H
#define GRPO_MODEL_TESTUTIL_H

#include "common/json.h"
#include "grpo/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Fixture directory of one tiny model ("bf16", "fp8", "router"), relative to tests/. */
static inline const char *
tm_dir(const char *name, char *buf, size_t n)
{
    const char *src = getenv("GRPO_SOURCE_DIR");
    if (src != NULL)
        snprintf(buf, n, "%s/tests/data/tiny_models/%s", src, name);
    else
        snprintf(buf, n, "data/tiny_models/%s", name);
    return buf;
}

/* Reads a little-endian float32 file of exactly count values; NULL on mismatch. */
static inline float *
tm_read_f32(const char *path, size_t count)
{
    char *buf = NULL;
    size_t len = 0;
    if (grpo__read_file(path, 0, &buf, &len) != GRPO_OK || len != count * 4) {
        free(buf);
        return NULL;
    }
    float *v = malloc(count * 4);
    memcpy(v, buf, count * 4);
    free(buf);
    return v;
}

typedef struct {
    int32_t *tokens;
    int n, vocab, hidden, n_hidden;
    float *logits;        /* (n, vocab) */
    float *hidden_states; /* (n_hidden, n, hidden) */
} tm_expected;

static inline int
tm_expected_load(const char *dir, tm_expected *e)
{
    char p[1024];
    cJSON *j = NULL;
    memset(e, 0, sizeof *e);
    snprintf(p, sizeof p, "%s/expected.json", dir);
    if (grpo__json_parse_file(p, 1 << 20, &j) != GRPO_OK)
        return -1;
    const cJSON *t = cJSON_GetObjectItem(j, "tokens");
    e->n = cJSON_GetArraySize(t);
    e->vocab = cJSON_GetObjectItem(j, "vocab")->valueint;
    e->hidden = cJSON_GetObjectItem(j, "hidden")->valueint;
    e->n_hidden = cJSON_GetObjectItem(j, "hidden_states")->valueint;
    e->tokens = malloc((size_t)e->n * sizeof *e->tokens);
    for (int i = 0; i < e->n; i++)
        e->tokens[i] = cJSON_GetArrayItem(t, i)->valueint;
    cJSON_Delete(j);
    snprintf(p, sizeof p, "%s/expected_logits.f32", dir);
    e->logits = tm_read_f32(p, (size_t)e->n * e->vocab);
    snprintf(p, sizeof p, "%s/expected_hidden.f32", dir);
    e->hidden_states = tm_read_f32(p, (size_t)e->n_hidden * e->n * e->hidden);
    return e->logits != NULL && e->hidden_states != NULL ? 0 : -1;
}

static inline void
tm_expected_free(tm_expected *e)
{
    free(e->tokens);
    free(e->logits);
    free(e->hidden_states);
}

/* max |a - b| / max |b| over n values. */
static inline double
tm_rel_err(const float *a, const float *b, size_t n)
{
    double md = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= md)) /* NaN counts as infinitely wrong */
            md = isnan(d) ? INFINITY : d;
        if (fabs((double)b[i]) > mb)
            mb = fabs((double)b[i]);
    }
    return mb > 0 ? md / mb : md;
}

/* The worst tm_rel_err of n rows of got (V values each) against rows r0..r0+n-1 of ref. */
static inline double
tm_worst_rows(const float *got, const float *ref, int V, int r0, int n)
{
    double w = 0;
    for (int t = 0; t < n; t++) {
        double r = tm_rel_err(got + (size_t)t * V, ref + (size_t)(r0 + t) * V, (size_t)V);
        w = r > w ? r : w;
    }
    return w;
}

/* Fixture directory tests/data/<set>/<name> (set "gqa_models", "v2_models", ...). */
static inline const char *
tm_set_dir(const char *set, const char *name, char *buf, size_t n)
{
    const char *src = getenv("GRPO_SOURCE_DIR");
    snprintf(buf, n, "%s%sdata/%s/%s", src ? src : "", src ? "/tests/" : "", set, name);
    return buf;
}

/* An int array of j[key] into out (at most cap); its length, or -1 when longer than cap. */
static inline int
tm_ints(const cJSON *j, const char *key, int32_t *out, int cap)
{
    const cJSON *a = cJSON_GetObjectItem(j, key);
    int n = cJSON_GetArraySize(a);
    for (int i = 0; i < n && i < cap; i++)
        out[i] = cJSON_GetArrayItem(a, i)->valueint;
    return n <= cap ? n : -1;
}

/* A transformers-written fixture with its greedy run: the model, expected.json's logits, the
 * greedy prompt and tokens, and transformers' logits of each greedy decode step. */
typedef struct {
    grpo_model *m;
    tm_expected e;
    int32_t gprompt[16], gtok[32];
    int n_gprompt, n_gtok;
    float *dec; /* (n_gtok, vocab) */
    char dir[512];
} tm_fx;

/* Loads tests/data/<set>/<name> with `threads` threads; 0, or -1 (a message on stderr for a load
 * failure) when a file is missing or the vocabulary is above max_vocab. */
static inline int
tm_fx_open(tm_fx *f, const char *set, const char *name, int threads, int max_vocab)
{
    tm_set_dir(set, name, f->dir, sizeof f->dir);
    grpo_model_opts o = {threads, 0, 0, 0, 0};
    if (grpo_model_load(&f->m, f->dir, &o) != GRPO_OK) {
        fprintf(stderr, "load %s: %s\n", f->dir, grpo_error_last());
        return -1;
    }
    char p[1100];
    cJSON *j = NULL;
    snprintf(p, sizeof p, "%s/expected.json", f->dir);
    if (tm_expected_load(f->dir, &f->e) != 0 || grpo__json_parse_file(p, 1 << 20, &j) != GRPO_OK)
        return -1;
    f->n_gprompt = tm_ints(j, "greedy_prompt", f->gprompt, 16);
    f->n_gtok = tm_ints(j, "greedy_tokens", f->gtok, 32);
    cJSON_Delete(j);
    snprintf(p, sizeof p, "%s/expected_decode.f32", f->dir);
    f->dec = tm_read_f32(p, (size_t)f->n_gtok * f->e.vocab);
    return f->dec != NULL && f->n_gprompt > 0 && f->n_gtok > 0 && f->e.vocab <= max_vocab ? 0 : -1;
}

static inline void
tm_fx_close(tm_fx *f)
{
    grpo_model_destroy(f->m);
    tm_expected_free(&f->e);
    free(f->dec);
    memset(f, 0, sizeof *f);
}

#endif
