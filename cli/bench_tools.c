/* `grpo bench run --tools`: the tool calls of run A, by (prompt, sample), and a turns hook that
 * answers run B's calls at once with them. B parks each sample where A's did and feeds A's
 * observation (and record), so B's completions are A's and only the tools' cost differs. */
#include "cli/bench_tools.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

typedef struct rturn {
    int32_t action_end, n_obs, n_given, done; /* n_given: with the tokens A cut for room */
    int32_t *obs;
    char *record;
} rturn;

typedef struct cell {
    int32_t have, n, next; /* next: the turn B feeds next (scheduler thread only) */
    rturn *t;
} cell;

typedef struct keyed {
    uint64_t key;
    size_t item;
} keyed;

struct bench_tools {
    size_t n_items;
    int32_t G;
    cell *cells;
    keyed *keys; /* sorted by key */
    pthread_mutex_t mu;
    grpo_rollout_turns hook;
    uint64_t fed;
};

static int
cmp_key(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    return x->key < y->key ? -1 : x->key > y->key;
}

static cell *
cell_of(bench_tools *b, uint64_t prompt_key, int32_t sample)
{
    size_t lo = 0, hi = b->n_items;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (b->keys[mid].key < prompt_key)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == b->n_items || b->keys[lo].key != prompt_key || sample < 0 || sample >= b->G)
        return NULL;
    return &b->cells[b->keys[lo].item * (size_t)b->G + (size_t)sample];
}

grpo_err
bench_tools_create(bench_tools **out, const grpo_prompt_set *ps, int32_t G)
{
    bench_tools *b = calloc(1, sizeof *b);
    *out = b;
    if (b == NULL)
        return grpo__fail(GRPO_ENOMEM, "bench run: out of memory");
    pthread_mutex_init(&b->mu, NULL);
    b->n_items = ps->n, b->G = G;
    b->cells = calloc((ps->n ? ps->n : 1) * (size_t)G, sizeof *b->cells);
    b->keys = calloc(ps->n ? ps->n : 1, sizeof *b->keys);
    if (b->cells == NULL || b->keys == NULL)
        return grpo__fail(GRPO_ENOMEM, "bench run: out of memory");
    for (size_t i = 0; i < ps->n; i++)
        b->keys[i] = (keyed){grpo_rollout_prompt_key(ps->items[i].id), i};
    qsort(b->keys, ps->n, sizeof *b->keys, cmp_key);
    return GRPO_OK;
}

void
bench_tools_destroy(bench_tools *b)
{
    if (b == NULL)
        return;
    for (size_t k = 0; b->cells && k < b->n_items * (size_t)b->G; k++) {
        for (int32_t j = 0; j < b->cells[k].n; j++)
            free(b->cells[k].t[j].obs), free(b->cells[k].t[j].record);
        free(b->cells[k].t);
    }
    free(b->cells), free(b->keys);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

/* Copies one sample's turns (A's) into its cell, once. */
static grpo_err
keep_sample(cell *c, const grpo_run_sample *s)
{
    if ((c->t = calloc(s->n_turns > 0 ? (size_t)s->n_turns : 1, sizeof *c->t)) == NULL)
        return grpo__fail(GRPO_ENOMEM, "bench run: out of memory");
    for (int32_t j = 0; j < s->n_turns; j++, c->n++) {
        const grpo_rollout_turn *u = &s->turns[j];
        rturn *r = &c->t[j];
        r->action_end = u->action_end, r->n_obs = u->n_obs, r->n_given = u->n_obs + u->n_obs_cut;
        cJSON *rec = u->record_json ? cJSON_Parse(u->record_json) : NULL;
        r->done = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rec, "done"));
        cJSON_Delete(rec);
        /* the tokens A cut for lack of room are not kept; B is given as many (never fed) */
        r->obs = calloc((size_t)(r->n_given > 0 ? r->n_given : 1), sizeof *r->obs);
        r->record = u->record_json ? strdup(u->record_json) : NULL;
        if (r->obs == NULL || (u->record_json && r->record == NULL))
            return grpo__fail(GRPO_ENOMEM, "bench run: out of memory");
        memcpy(r->obs, s->tokens + u->action_end, (size_t)u->n_obs * sizeof *r->obs);
    }
    c->have = 1;
    return GRPO_OK;
}

grpo_err
bench_tools_keep(bench_tools *b, const grpo_run_group *g)
{
    grpo_err err = GRPO_OK;
    pthread_mutex_lock(&b->mu);
    for (int32_t i = 0; i < g->n_samples && err == GRPO_OK; i++) {
        const grpo_run_sample *s = &g->samples[i];
        if (g->item < 0 || (size_t)g->item >= b->n_items || s->index < 0 || s->index >= b->G)
            continue;
        cell *c = &b->cells[(size_t)g->item * (size_t)b->G + (size_t)s->index];
        if (!c->have)
            err = keep_sample(c, s);
    }
    pthread_mutex_unlock(&b->mu);
    return err;
}

/* ---- the hook: B's calls answered from the table ---- */

static int
h_detect(void *ctx, const grpo_rollout_group *g, int32_t i, const char *text, size_t len,
         size_t scan_from, size_t new_from)
{
    bench_tools *b = ctx;
    (void)text, (void)len, (void)scan_from, (void)new_from;
    cell *c = cell_of(b, g->req.prompt_key, g->samples[i].index);
    return c != NULL && c->next < c->n && g->samples[i].n_tokens == c->t[c->next].action_end;
}

static grpo_err
h_start(void *ctx, const grpo_rollout_group *g, int32_t i)
{
    (void)ctx, (void)g, (void)i;
    return GRPO_OK;
}

static int
h_poll(void *ctx, const grpo_rollout_group *g, int32_t i, grpo_rollout_obs *out)
{
    bench_tools *b = ctx;
    cell *c = cell_of(b, g->req.prompt_key, g->samples[i].index);
    if (c == NULL || c->next >= c->n)
        return 1;
    const rturn *r = &c->t[c->next++];
    out->tokens = malloc((size_t)(r->n_given > 0 ? r->n_given : 1) * sizeof *out->tokens);
    if (out->tokens != NULL) {
        memcpy(out->tokens, r->obs, (size_t)r->n_given * sizeof *out->tokens);
        out->n_tokens = r->n_given;
    }
    out->done = r->done;
    out->record_json = r->record ? strdup(r->record) : NULL;
    b->fed++;
    return 1;
}

static void
h_wait(void *ctx, int timeout_ms)
{
    (void)ctx, (void)timeout_ms;
}

static void
h_end(void *ctx, const grpo_rollout_group *g, int32_t i)
{
    (void)ctx, (void)g, (void)i;
}

const grpo_rollout_turns *
bench_tools_hook(bench_tools *b)
{
    for (size_t k = 0; k < b->n_items * (size_t)b->G; k++)
        b->cells[k].next = 0;
    b->fed = 0;
    b->hook = (grpo_rollout_turns){b, h_detect, h_start, h_poll, h_wait, h_end};
    return &b->hook;
}
