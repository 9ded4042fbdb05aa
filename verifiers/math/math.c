/* The math verifier: extracts the answer (after </think>), parses gold and prediction with the
 * same parser, compares them, and maps the outcome to a verdict. Config (JSON, all optional):
 *   {"timeout_ms": 2000, "max_steps": 5000000, "precision": 6, "last_number": false,
 *    "think": true, "strict": true}
 * State is read-only after init, so score() is safe from many threads at once. */
#include "verifiers/math/math_int.h"

#include "common/json.h"
#include "grpo/verify.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MATH_VERSION "1.0.0"

bool
mb_step(mbudget *b, int64_t n)
{
    if (b->exhausted)
        return false;
    int64_t before = b->steps;
    b->steps += n;
    if (b->steps > b->max_steps) {
        b->exhausted = true;
        return false;
    }
    /* look at the clock every 4096 steps */
    if ((before >> 12) != (b->steps >> 12) && grpo_now() > b->deadline) {
        b->exhausted = true;
        return false;
    }
    return true;
}

void *
ma_alloc(marena *m, size_t n)
{
    void *p = grpo_arena_alloc(m->a, n ? n : 1);
    if (p == NULL)
        m->oom = true;
    return p;
}

char *
ma_strndup(marena *m, const char *s, size_t n)
{
    char *p = ma_alloc(m, n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

void
mgrade_opts_default(mgrade_opts *o)
{
    memset(o, 0, sizeof *o);
    o->gold_x.latex = true;
    o->gold_x.boxed_first = true;
    o->gold_x.last_number = false;
    o->pred_x = o->gold_x;
    o->cmp.precision = 6;
    o->cmp.strict = true;
    o->think = true;
    o->gold_whole = true;
    o->max_steps = 5000000;
    o->timeout_s = 2.0;
    o->max_answer = 65536;
}

const char *
mverdict_label(mverdict v)
{
    static const char *const l[] = {
        "correct",          "wrong",   "no-answer", "unparseable-answer",
        "unparseable-gold", "timeout", "error"};
    return (unsigned)v < sizeof l / sizeof l[0] ? l[v] : "error";
}

/* Parses one candidate (joining "$1$ and $2$" into a list). */
static mnode *
parse_cand(mparse_ctx *ctx, const mspan *sp, size_t max_answer)
{
    const char *s = sp->s ? sp->s : sp->num;
    if (sp->n > max_answer) {
        ctx->err = "answer too long";
        return NULL;
    }
    if (sp->n_join > 1) {
        mnode *l = ma_alloc(ctx->ar, sizeof *l);
        mnode **kids = ma_alloc(ctx->ar, (size_t)sp->n_join * sizeof *kids);
        if (l == NULL || kids == NULL)
            return NULL;
        l->kind = N_LIST;
        l->kids = kids;
        for (int k = 0; k < sp->n_join; k++) {
            if (sp->join_n[k] > max_answer)
                return NULL;
            mnode *e = mparse(ctx, sp->join_s[k], sp->join_n[k]);
            if (e == NULL)
                return NULL;
            /* a list inside a joined item flattens: "$1, 2$ and $3$" */
            if (e->kind == N_LIST || e->kind == N_SET) {
                mnode **nk = ma_alloc(ctx->ar, (size_t)(l->n + e->n + sp->n_join) * sizeof *nk);
                if (nk == NULL)
                    return NULL;
                memcpy(nk, kids, (size_t)l->n * sizeof *nk);
                memcpy(nk + l->n, e->kids, (size_t)e->n * sizeof *nk);
                kids = l->kids = nk;
                l->n += e->n;
            } else
                kids[l->n++] = e;
        }
        return l;
    }
    return mparse(ctx, s, sp->n);
}

/* The first candidate that parses. *found says whether any candidate existed. */
static mnode *
best_answer(mparse_ctx *ctx, const char *text, size_t n, const mextract_opts *x, bool whole,
            size_t max_answer, bool *found)
{
    mspan c[MX_MAX_CAND];
    int nc = mextract(text, n, x, c, ctx->bud);
    *found = nc > 0;
    for (int k = 0; k < nc; k++) {
        ctx->depth = 0;
        ctx->err = NULL;
        ctx->plain = c[k].plain;
        mnode *e = parse_cand(ctx, &c[k], max_answer);
        ctx->plain = false;
        if (e && c[k].plain && e->kind == N_TEXT)
            e = NULL; /* prose after an anchor ("... is correct") is not an answer */
        if (e)
            return e;
        if (ctx->bud->exhausted || ctx->ar->oom)
            return NULL;
    }
    if (whole && n <= max_answer) {
        *found = true;
        ctx->depth = 0;
        ctx->err = NULL;
        return mparse(ctx, text, n);
    }
    return NULL;
}

/* What the prediction says after its reasoning: the text after the last </think>. *open is set
 * when a reasoning block was opened and never closed. */
static const char *
after_think(const char *s, size_t n, bool opened_by_prompt, size_t *out_n, bool *open)
{
    static const char close[] = "</think>";
    const char *last = NULL;
    bool saw_open = opened_by_prompt;
    for (size_t i = 0; i + 7 <= n; i++) {
        if (s[i] != '<')
            continue;
        if (i + 8 <= n && memcmp(s + i, close, 8) == 0)
            last = s + i + 8;
        else if (memcmp(s + i, "<think>", 7) == 0)
            saw_open = true;
    }
    *open = false;
    if (last) {
        *out_n = n - (size_t)(last - s);
        return last;
    }
    *open = saw_open;
    *out_n = n;
    return s;
}

static bool
looks_like_solution(const char *s, size_t n)
{
    static const char *const marks[] = {"$",   "\\boxed", "\\fbox",  "\\(",
                                        "\\[", "nswer",   "</think>"};
    for (size_t k = 0; k < sizeof marks / sizeof marks[0]; k++) {
        size_t l = strlen(marks[k]);
        for (size_t i = 0; i + l <= n; i++)
            if (memcmp(s + i, marks[k], l) == 0)
                return true;
    }
    return false;
}

mverdict
mgrade(const char *gold, size_t glen, const char *pred, size_t plen, const mgrade_opts *o,
       char *detail, size_t detail_cap)
{
    mbudget bud = {0, o->max_steps, grpo_now() + o->timeout_s, false};
    marena ar = {NULL, false};
    mverdict v = MV_ERROR;
    char gbuf[200] = "", pbuf[200] = "";
    if (detail && detail_cap)
        detail[0] = 0;
    if (grpo_arena_create(&ar.a, 1 << 16) != GRPO_OK)
        return MV_ERROR;
    mparse_ctx ctx = {&ar, &bud, 0, 200, NULL, false};
    bool found = false;
    mnode *g = NULL;
    /* a bare gold ("3\frac{1}{2}", "x^2+1") is the answer as a whole; extraction is for golds
     * written as solutions ($...$, \boxed{}, "Answer: ...") */
    if (o->gold_whole && glen <= o->max_answer && !looks_like_solution(gold, glen)) {
        g = mparse(&ctx, gold, glen);
        ctx.err = NULL;
        ctx.depth = 0;
    }
    if (g == NULL && !bud.exhausted)
        g = best_answer(&ctx, gold, glen, &o->gold_x, o->gold_whole, o->max_answer, &found);
    if (g == NULL) {
        v = bud.exhausted ? MV_TIMEOUT : ar.oom ? MV_ERROR : MV_BAD_GOLD;
        if (detail)
            snprintf(detail, detail_cap, "gold: %s", ctx.err ? ctx.err : "no answer");
        goto done;
    }
    size_t an = plen;
    bool open = false;
    const char *ans = pred;
    if (o->think)
        ans = after_think(pred, plen, o->prompt_opens_think, &an, &open);
    if (open) {
        v = MV_NO_ANSWER;
        if (detail)
            snprintf(detail, detail_cap, "reasoning never closed with </think>");
        goto done;
    }
    ctx.err = NULL;
    mnode *p = best_answer(&ctx, ans, an, &o->pred_x, false, o->max_answer, &found);
    if (p == NULL) {
        v = bud.exhausted ? MV_TIMEOUT : ar.oom ? MV_ERROR : found ? MV_BAD_ANSWER : MV_NO_ANSWER;
        if (detail)
            snprintf(detail, detail_cap, "answer: %s", ctx.err ? ctx.err : "none found");
        goto done;
    }
    mcmp_res r = mcompare(g, p, &o->cmp, &bud, &ar);
    v = r == MC_EQ ? MV_CORRECT : r == MC_BUDGET ? MV_TIMEOUT : MV_WRONG;
    if (detail) {
        mnode_print(g, gbuf, sizeof gbuf);
        mnode_print(p, pbuf, sizeof pbuf);
        snprintf(detail, detail_cap, "gold %s; answer %s", gbuf, pbuf);
    }
done:
    grpo_arena_destroy(ar.a);
    return v;
}

/* ---- the verifier table ------------------------------------------------------------------- */

static int
math_init(const char *config_json, void **state, char **err_out)
{
    mgrade_opts *o = malloc(sizeof *o);
    cJSON *j = NULL;
    grpo_err err = GRPO_OK;
    *err_out = NULL;
    if (o == NULL)
        return -1;
    mgrade_opts_default(o);
    if (config_json && *config_json) {
        static const char *const keys[] = {"timeout_ms", "max_steps", "precision", "last_number",
                                           "think",      "strict",    NULL};
        if ((err = grpo__json_parse(config_json, strlen(config_json), "math config", &j)) != 0 ||
            (err = grpo__json_check_keys(j, "math config", keys)) != 0)
            goto done;
        int64_t ms = (int64_t)(o->timeout_s * 1000), steps = o->max_steps, prec = 6;
        bool ln = false, think = true, strict = true;
        if ((err = grpo__json_int_opt(j, "timeout_ms", "math config", 1, 600000, &ms)) ||
            (err = grpo__json_int_opt(j, "max_steps", "math config", 1000, INT64_C(1) << 40,
                                      &steps)) ||
            (err = grpo__json_int_opt(j, "precision", "math config", 0, 30, &prec)) ||
            (err = grpo__json_bool_opt(j, "last_number", "math config", &ln)) ||
            (err = grpo__json_bool_opt(j, "think", "math config", &think)) ||
            (err = grpo__json_bool_opt(j, "strict", "math config", &strict)))
            goto done;
        o->timeout_s = (double)ms / 1000.0;
        o->max_steps = steps;
        o->cmp.precision = (int)prec;
        o->cmp.strict = strict;
        o->pred_x.last_number = ln;
        o->think = think;
    }
done:
    cJSON_Delete(j);
    if (err != GRPO_OK) {
        *err_out = strdup(grpo_error_last());
        free(o);
        return -1;
    }
    *state = o;
    return 0;
}

static int
math_score(void *state, const grpo_verifier_sample *s, grpo_verdict *out)
{
    mgrade_opts o = *(const mgrade_opts *)state;
    char detail[512];
    o.prompt_opens_think = s->prompt_opens_think != 0;
    memset(out, 0, sizeof *out);
    if (s->answer == NULL) {
        out->kind = GRPO_VERDICT_SKIP;
        snprintf(out->label, sizeof out->label, "unparseable-gold");
        out->details_json = strdup("{\"reason\":\"no gold answer\"}");
        return 0;
    }
    const char *comp = s->completion ? s->completion : "";
    size_t clen = s->completion ? s->completion_len : 0;
    mverdict v = mgrade(s->answer, strlen(s->answer), comp, clen, &o, detail, sizeof detail);
    snprintf(out->label, sizeof out->label, "%s", mverdict_label(v));
    switch (v) {
    case MV_CORRECT:
        out->kind = GRPO_VERDICT_PASS;
        out->score = 1.0;
        break;
    case MV_BAD_GOLD:
        out->kind = GRPO_VERDICT_SKIP;
        break;
    case MV_TIMEOUT:
        out->kind = GRPO_VERDICT_TIMEOUT;
        break;
    case MV_ERROR:
        out->kind = GRPO_VERDICT_ERROR;
        break;
    default:
        out->kind = GRPO_VERDICT_FAIL;
        break;
    }
    cJSON *d = cJSON_CreateObject();
    if (d) {
        cJSON_AddStringToObject(d, "detail", detail);
        out->details_json = cJSON_PrintUnformatted(d);
        cJSON_Delete(d);
    }
    return 0;
}

static void
math_fini(void *state)
{
    free(state);
}

const grpo_verifier_api *
grpo_verifier_math(void)
{
    static const grpo_verifier_api api = {GRPO_VERIFIER_ABI_MAJOR,
                                          GRPO_VERIFIER_ABI_MINOR,
                                          sizeof(grpo_verifier_api),
                                          "math",
                                          MATH_VERSION,
                                          math_init,
                                          math_score,
                                          math_fini};
    return &api;
}
