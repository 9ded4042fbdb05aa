/* The worker protocol's messages: common/codec.h fields behind a magic and a version. The decoder
 * is the network boundary: every count is checked against the bytes left and the limits in
 * grpo/workers.h before anything is allocated, and strings must be UTF-8 without NUL. */
#include "common/codec.h"
#include "common/common_int.h"
#include "common/json.h"
#include "grpo/workers.h"

#include <stdlib.h>
#include <string.h>

/* ---- encoding ---- */

/* The common writer (common/codec.h), and the first failure of this protocol's own. */
typedef struct wr {
    grpo_wr c;
    grpo_err err; /* a string over GRPO_WORKERS_MAX_STR */
} wr;

/* A string of n bytes, or absent when s is NULL. */
static void
put_bytes(wr *w, const char *s, size_t n)
{
    if (s != NULL && n > GRPO_WORKERS_MAX_STR && w->err == GRPO_OK)
        w->err = grpo__fail(GRPO_EINVAL, "workers: a string of %zu bytes is over the limit", n);
    grpo__put_strn(&w->c, s, n);
}

static void
put_str(wr *w, const char *s)
{
    put_bytes(w, s, s ? strlen(s) : 0);
}

static void
put_policy(wr *w, const grpo_wpolicy *p)
{
    grpo__put_u64(&w->c, (uint64_t)p->version);
    put_str(w, p->weights_path);
    put_str(w, p->sha256);
    grpo__put_i32(&w->c, p->max_staleness);
}

static void
put_params(wr *w, const grpo_wparams *p)
{
    grpo__put_i32(&w->c, p->group_size);
    grpo__put_u64(&w->c, p->seed);
    grpo__put_f32(&w->c, p->sampling.temperature);
    grpo__put_f32(&w->c, p->sampling.top_p);
    grpo__put_i32(&w->c, p->sampling.top_k);
    grpo__put_f32(&w->c, p->sampling.min_p);
    grpo__put_i32(&w->c, p->max_new_tokens);
    grpo__put_i32(&w->c, p->logprobs);
    put_str(w, p->template_name);
    grpo__put_i32(&w->c, p->n_stop);
    for (int32_t i = 0; i < p->n_stop && i < GRPO_ROLLOUT_MAX_STOP; i++)
        put_str(w, p->stop[i]);
    grpo__put_i32(&w->c, p->n_stop_ids);
    for (int32_t i = 0; i < p->n_stop_ids && i < GRPO_ROLLOUT_MAX_STOP; i++)
        grpo__put_i32(&w->c, p->stop_ids[i]);
    grpo__put_i32(&w->c, p->record_routes);
    put_str(w, p->tools);
    grpo__put_i32(&w->c, p->max_calls);
    grpo__put_i32(&w->c, p->max_turns);
    grpo__put_i32(&w->c, p->max_obs_tokens);
    grpo__put_f64(&w->c, p->tool_time_s);
    grpo__put_i32(&w->c, p->speculative);
    grpo__put_i32(&w->c, p->numerics);
    grpo__put_i32(&w->c, p->kv_dtype);
}

size_t
grpo_wresult_route_row_bytes(const grpo_wresult *r)
{
    if (r->route_experts <= 0 || r->route_layers <= 0 || r->route_k <= 0)
        return 0;
    return (size_t)r->route_layers * (size_t)r->route_k * (r->route_experts <= 256 ? 1u : 2u);
}

/* Routed tokens of a completion of n tokens: all but the last. */
static size_t
routed(int32_t n)
{
    return n > 1 ? (size_t)n - 1 : 0;
}

static void
put_sample(wr *w, const grpo_wsample *s, size_t row)
{
    grpo__put_i32(&w->c, s->index);
    grpo__put_i32(&w->c, s->finish);
    grpo__put_i32(&w->c, s->n_tokens);
    for (int32_t k = 0; k < s->n_tokens; k++)
        grpo__put_i32(&w->c, s->tokens[k]);
    for (int32_t k = 0; k < s->n_tokens; k++)
        grpo__put_f32(&w->c, s->logprobs ? s->logprobs[k] : 0.0f);
    put_bytes(w, s->text ? s->text : "", s->text ? s->text_len : 0);
    grpo__put_f64(&w->c, s->reward);
    grpo__put_i32(&w->c, s->skipped);
    grpo__put_i32(&w->c, s->n_terms);
    for (int32_t t = 0; t < s->n_terms; t++) {
        const grpo_wterm *tm = &s->terms[t];
        put_str(w, tm->verifier);
        put_str(w, tm->version);
        put_str(w, tm->label);
        put_str(w, tm->details_json);
        grpo__put_i32(&w->c, tm->kind);
        grpo__put_f64(&w->c, tm->score);
        grpo__put_f64(&w->c, tm->ms);
    }
    if (row > 0)
        grpo__put_bytes(&w->c, s->routes, routed(s->n_tokens) * row);
    grpo__put_i32(&w->c, s->n_turns);
    for (int32_t t = 0; t < s->n_turns; t++) {
        const grpo_wturn *u = &s->turns[t];
        grpo__put_i32(&w->c, u->action_end);
        grpo__put_i32(&w->c, u->n_obs);
        grpo__put_i32(&w->c, u->n_obs_cut);
        grpo__put_f64(&w->c, u->at_ms);
        grpo__put_f64(&w->c, u->wait_ms);
        put_str(w, u->record_json);
    }
}

static void
put_result(wr *w, const grpo_wresult *r)
{
    grpo__put_u64(&w->c, r->lease_id);
    grpo__put_i32(&w->c, r->attempt);
    grpo__put_u64(&w->c, (uint64_t)r->policy_version);
    put_str(w, r->prompt_id);
    grpo__put_i32(&w->c, r->n_prompt);
    for (int32_t k = 0; k < r->n_prompt; k++)
        grpo__put_i32(&w->c, r->prompt[k]);
    grpo__put_f64(&w->c, r->gen_ms);
    grpo__put_f64(&w->c, r->verify_ms);
    size_t row = grpo_wresult_route_row_bytes(r);
    grpo__put_i32(&w->c, row ? r->route_experts : 0);
    grpo__put_i32(&w->c, row ? r->route_layers : 0);
    grpo__put_i32(&w->c, row ? r->route_k : 0);
    if (row > 0)
        grpo__put_bytes(&w->c, r->prompt_routes, (size_t)r->n_prompt * row);
    grpo__put_i32(&w->c, r->n_samples);
    for (int32_t i = 0; i < r->n_samples; i++)
        put_sample(w, &r->samples[i], row);
}

static grpo_err
check_encodable(const grpo_wmsg *m)
{
    if (m->type == GRPO_WMSG_WORK && (m->n_leases < 0 || m->n_leases > GRPO_WORKERS_MAX_LEASES))
        return grpo__fail(GRPO_EINVAL, "workers: %d leases in one message", m->n_leases);
    if (m->type == GRPO_WMSG_HEARTBEAT && (m->n_ids < 0 || m->n_ids > GRPO_WORKERS_MAX_LEASES))
        return grpo__fail(GRPO_EINVAL, "workers: %d lease ids in one heartbeat", m->n_ids);
    if (m->type == GRPO_WMSG_WORK &&
        (m->params.n_stop < 0 || m->params.n_stop > GRPO_ROLLOUT_MAX_STOP ||
         m->params.n_stop_ids < 0 || m->params.n_stop_ids > GRPO_ROLLOUT_MAX_STOP))
        return grpo__fail(GRPO_EINVAL, "workers: too many stop strings or ids");
    if (m->type == GRPO_WMSG_RESULT) {
        const grpo_wresult *r = &m->result;
        if (r->n_samples < 0 || r->n_samples > GRPO_WORKERS_MAX_GROUP || r->n_prompt < 0)
            return grpo__fail(GRPO_EINVAL, "workers: result sizes out of range");
        for (int32_t i = 0; i < r->n_samples; i++)
            if (r->samples[i].n_terms < 0 || r->samples[i].n_terms > GRPO_WORKERS_MAX_TERMS ||
                r->samples[i].n_tokens < 0 || r->samples[i].n_turns < 0 ||
                r->samples[i].n_turns > GRPO_WORKERS_MAX_TURNS)
                return grpo__fail(GRPO_EINVAL, "workers: sample %d sizes out of range", i);
        size_t row = grpo_wresult_route_row_bytes(r);
        for (int32_t i = 0; row > 0 && i < r->n_samples; i++)
            if (r->samples[i].routes == NULL && routed(r->samples[i].n_tokens) > 0)
                return grpo__fail(GRPO_EINVAL, "workers: sample %d has no routes", i);
        if (row > 0 && r->prompt_routes == NULL)
            return grpo__fail(GRPO_EINVAL, "workers: the result has no prompt routes");
    }
    return GRPO_OK;
}

/* The word after the magic: the protocol version in the low 16 bits, the type in the high. */
static uint32_t
header(int32_t type)
{
    return (uint32_t)(GRPO_WORKERS_PROTOCOL & 0xFFFF) | ((uint32_t)type & 0xFFFF) << 16;
}

grpo_err
grpo_wmsg_encode(const grpo_wmsg *m, void **bytes, size_t *len)
{
    wr w = {{{0}, false}, GRPO_OK};
    *bytes = NULL, *len = 0;
    if ((w.err = check_encodable(m)) != GRPO_OK)
        return w.err;
    grpo__put_u32(&w.c, GRPO_WORKERS_MAGIC);
    grpo__put_u32(&w.c, header(m->type));
    switch (m->type) {
    case GRPO_WMSG_PULL:
    case GRPO_WMSG_HEARTBEAT:
        put_str(&w, m->worker_id);
        grpo__put_u64(&w.c, (uint64_t)m->worker_version);
        grpo__put_f64(&w.c, m->tokens_per_s);
        grpo__put_u64(&w.c, m->groups_done);
        grpo__put_i32(&w.c, m->want);
        grpo__put_i32(&w.c, m->type == GRPO_WMSG_HEARTBEAT ? m->n_ids : 0);
        for (int32_t i = 0; m->type == GRPO_WMSG_HEARTBEAT && i < m->n_ids; i++)
            grpo__put_u64(&w.c, m->ids[i]);
        break;
    case GRPO_WMSG_RESULT:
        put_str(&w, m->worker_id);
        put_result(&w, &m->result);
        break;
    case GRPO_WMSG_WORK:
        put_policy(&w, &m->policy);
        put_params(&w, &m->params);
        grpo__put_i32(&w.c, m->n_leases);
        for (int32_t i = 0; i < m->n_leases; i++) {
            grpo__put_u64(&w.c, m->leases[i].lease_id);
            grpo__put_i32(&w.c, m->leases[i].attempt);
            grpo__put_f64(&w.c, m->leases[i].timeout_s);
            put_str(&w, m->leases[i].prompt_id);
            put_str(&w, m->leases[i].record_json);
        }
        break;
    case GRPO_WMSG_WAIT:
        put_policy(&w, &m->policy);
        grpo__put_u32(&w.c, m->retry_ms);
        break;
    case GRPO_WMSG_STOP:
        break;
    case GRPO_WMSG_ACK:
        put_policy(&w, &m->policy);
        grpo__put_i32(&w.c, m->status);
        break;
    case GRPO_WMSG_ERROR:
        put_str(&w, m->message ? m->message : "");
        break;
    default:
        grpo__buf_fini(&w.c.b);
        return grpo__fail(GRPO_EINVAL, "workers: cannot encode message type %d", m->type);
    }
    if (w.err == GRPO_OK && w.c.oom) /* grpo__buf_append said so */
        w.err = GRPO_ENOMEM;
    if (w.err == GRPO_OK && w.c.b.len > GRPO_WORKERS_MAX_MSG)
        w.err = grpo__fail(GRPO_EINVAL, "workers: a %s message of %zu bytes is over the limit",
                           grpo_wmsg_type_name(m->type), w.c.b.len);
    if (w.err != GRPO_OK) {
        grpo__buf_fini(&w.c.b);
        return w.err;
    }
    *bytes = w.c.b.data, *len = w.c.b.len;
    return GRPO_OK;
}

/* ---- decoding ---- */

/* The common reader (common/codec.h), and the first failure as this protocol names it. r->c.bad
 * is set whenever err is, so the codec reads nothing after a failure. */
typedef struct rd {
    grpo_rd c;
    const char *msg; /* message type name for errors */
    grpo_err err;
} rd;

static int
bad(rd *r, const char *field, const char *why)
{
    if (r->err == GRPO_OK)
        r->err = grpo__fail(GRPO_EFORMAT, "workers: %s message: %s: %s", r->msg, field, why);
    r->c.bad = true;
    return -1;
}

static void *
oom(rd *r)
{
    if (r->err == GRPO_OK)
        r->err = grpo__fail(GRPO_ENOMEM, "workers: out of memory");
    r->c.bad = true;
    return NULL;
}

/* The reader, after naming field when fewer than n bytes are left for it (the codec itself
 * would only set bad). */
static grpo_rd *
need(rd *r, const char *field, size_t n)
{
    if (r->err == GRPO_OK && n > grpo__rd_left(&r->c))
        bad(r, field, "truncated");
    return &r->c;
}

static uint32_t
get_u32(rd *r, const char *field)
{
    return grpo__get_u32(need(r, field, 4));
}

static uint64_t
get_u64(rd *r, const char *field)
{
    return grpo__get_u64(need(r, field, 8));
}

static int32_t
get_i32(rd *r, const char *field)
{
    return grpo__get_i32(need(r, field, 4));
}

static float
get_f32(rd *r, const char *field)
{
    return grpo__get_f32(need(r, field, 4));
}

static double
get_f64(rd *r, const char *field, int finite)
{
    double v = grpo__get_f64(need(r, field, 8));
    if (finite && !(v == v && v - v == 0))
        bad(r, field, "not a finite number");
    return v;
}

/* A count in [lo, hi] whose elements (elem bytes each at least) fit in what is left. */
static int32_t
get_count(rd *r, const char *field, int32_t lo, int32_t hi, size_t elem)
{
    int32_t n = get_i32(r, field);
    if (r->err != GRPO_OK)
        return 0;
    if (n < lo || n > hi) {
        bad(r, field, "count out of range");
        return 0;
    }
    if (elem > 0 && (size_t)n > grpo__rd_left(&r->c) / elem) {
        bad(r, field, "count larger than the message");
        return 0;
    }
    return n;
}

/* A length-prefixed field as a new NUL-terminated string. text = 1: UTF-8 without NUL. */
static char *
get_bytes(rd *r, const char *field, uint32_t max, int text, int optional, uint32_t *len_out)
{
    uint32_t n = get_u32(r, field);
    if (r->err != GRPO_OK)
        return NULL;
    if (n == GRPO_CODEC_NULL) {
        if (!optional)
            bad(r, field, "missing");
        return NULL;
    }
    if (n > max || n > grpo__rd_left(&r->c)) {
        bad(r, field, n > max ? "longer than the limit" : "truncated");
        return NULL;
    }
    const char *p = grpo__get_raw(&r->c, n);
    if (text && (memchr(p, 0, n) != NULL || !grpo__utf8_valid(p, n))) {
        bad(r, field, "not UTF-8 text");
        return NULL;
    }
    char *s = malloc((size_t)n + 1);
    if (s == NULL)
        return oom(r);
    memcpy(s, p, n);
    s[n] = '\0';
    if (len_out)
        *len_out = n;
    return s;
}

static char *
get_str(rd *r, const char *field, uint32_t max, int optional)
{
    return get_bytes(r, field, max, 1, optional, NULL);
}

static void *
get_array(rd *r, size_t n, size_t elem)
{
    if (r->err != GRPO_OK)
        return NULL;
    void *p = calloc(n ? n : 1, elem);
    return p ? p : oom(r);
}

static void
get_policy(rd *r, grpo_wpolicy *p)
{
    p->version = (int64_t)get_u64(r, "policy.version");
    p->weights_path = get_str(r, "policy.weights_path", 4096, 1);
    p->sha256 = get_str(r, "policy.sha256", 64, 1);
    p->max_staleness = get_i32(r, "policy.max_staleness");
    if (r->err == GRPO_OK && (p->version < 0 || p->max_staleness < -1))
        bad(r, "policy", "negative version or staleness");
}

/* The tools config: a list (or absent) and limits grpo_run_tools accepts. */
static void
get_tools(rd *r, grpo_wparams *p)
{
    p->tools = get_str(r, "params.tools", GRPO_WORKERS_MAX_TOOLS, 1);
    p->max_calls = get_i32(r, "params.max_calls");
    p->max_turns = get_i32(r, "params.max_turns");
    p->max_obs_tokens = get_i32(r, "params.max_obs_tokens");
    p->tool_time_s = get_f64(r, "params.tool_time_s", 1);
    if (r->err != GRPO_OK)
        return;
    if (p->tools != NULL && p->tools[0] == '\0')
        bad(r, "params.tools", "empty (absent means no tools)");
    else if (p->max_calls < 0 || p->max_turns < 0 || p->max_obs_tokens < 0 ||
             p->max_obs_tokens > GRPO_WORKERS_MAX_TOKENS || p->tool_time_s < 0)
        bad(r, "params.tools", "a limit out of range");
}

static void
get_params(rd *r, grpo_wparams *p)
{
    p->group_size = get_i32(r, "params.group_size");
    p->seed = get_u64(r, "params.seed");
    p->sampling.temperature = get_f32(r, "params.temperature");
    p->sampling.top_p = get_f32(r, "params.top_p");
    p->sampling.top_k = get_i32(r, "params.top_k");
    p->sampling.min_p = get_f32(r, "params.min_p");
    p->max_new_tokens = get_i32(r, "params.max_new_tokens");
    p->logprobs = get_i32(r, "params.logprobs");
    p->template_name = get_str(r, "params.template", 64, 1);
    if (r->err != GRPO_OK)
        return;
    if (p->group_size < 1 || p->group_size > GRPO_WORKERS_MAX_GROUP)
        bad(r, "params.group_size", "out of range");
    else if (p->max_new_tokens < 1 || p->max_new_tokens > GRPO_WORKERS_MAX_TOKENS)
        bad(r, "params.max_new_tokens", "out of range");
    else if (p->logprobs < 0 || p->logprobs > GRPO_LOGPROBS_BOTH)
        bad(r, "params.logprobs", "out of range");
    else if (grpo_sampling_check(&p->sampling) != GRPO_OK)
        bad(r, "params.sampling", "out of range");
    p->n_stop = get_count(r, "params.n_stop", 0, GRPO_ROLLOUT_MAX_STOP, 4);
    for (int32_t i = 0; i < p->n_stop && r->err == GRPO_OK; i++) {
        p->stop[i] = get_str(r, "params.stop", GRPO_ROLLOUT_MAX_STOP_LEN, 0);
        if (p->stop[i] != NULL && p->stop[i][0] == '\0')
            bad(r, "params.stop", "empty");
    }
    p->n_stop_ids = get_count(r, "params.n_stop_ids", 0, GRPO_ROLLOUT_MAX_STOP, 4);
    for (int32_t i = 0; i < p->n_stop_ids && r->err == GRPO_OK; i++)
        if ((p->stop_ids[i] = get_i32(r, "params.stop_ids")) < 0)
            bad(r, "params.stop_ids", "negative");
    p->record_routes = get_i32(r, "params.record_routes");
    if (r->err == GRPO_OK && p->record_routes != 0 && p->record_routes != 1)
        bad(r, "params.record_routes", "not 0 or 1");
    get_tools(r, p);
    p->speculative = get_i32(r, "params.speculative");
    if (r->err == GRPO_OK && (p->speculative < 0 || p->speculative > 3))
        bad(r, "params.speculative", "not 0 to 3");
    p->numerics = get_i32(r, "params.numerics");
    if (r->err == GRPO_OK && (p->numerics < GRPO_NUMERICS_EXACT || p->numerics > GRPO_NUMERICS_FP8_NONDET))
        bad(r, "params.numerics", "not exact, q8 or fp8");
    p->kv_dtype = get_i32(r, "params.kv_dtype");
    if (r->err == GRPO_OK && (p->kv_dtype < GRPO_KV_F32 || p->kv_dtype > GRPO_KV_FP8))
        bad(r, "params.kv_dtype", "not f32, bf16 or fp8");
}

/* n rows of routes (row bytes each, layers x k ids) as a new copy: every id below experts and
 * none twice for one token and layer. */
static uint8_t *
get_routes(rd *r, const char *field, size_t n, size_t row, const grpo_wresult *res)
{
    uint32_t len = 0;
    char *b = get_bytes(r, field, GRPO_WORKERS_MAX_MSG, 0, 0, &len);
    if (r->err != GRPO_OK)
        return NULL;
    if ((size_t)len != n * row) {
        free(b);
        bad(r, field, "not one row of routes per routed token");
        return NULL;
    }
    size_t w = res->route_experts <= 256 ? 1 : 2, k = (size_t)res->route_k;
    for (size_t t = 0; t < n * (size_t)res->route_layers; t++) {
        const uint8_t *ids = (const uint8_t *)b + t * k * w;
        for (size_t j = 0; j < k; j++) {
            int v = w == 1 ? ids[j] : (int16_t)(ids[2 * j] | ids[2 * j + 1] << 8);
            for (size_t q = 0; q < j; q++) {
                int u = w == 1 ? ids[q] : (int16_t)(ids[2 * q] | ids[2 * q + 1] << 8);
                if (u == v) {
                    free(b);
                    bad(r, field, "an expert twice for one token and layer");
                    return NULL;
                }
            }
            if (v < 0 || v >= res->route_experts) {
                free(b);
                bad(r, field, "an expert id out of range");
                return NULL;
            }
        }
    }
    return (uint8_t *)b;
}

static void
get_term(rd *r, grpo_wterm *t)
{
    t->verifier = get_str(r, "term.verifier", 64, 0);
    t->version = get_str(r, "term.version", 64, 0);
    t->label = get_str(r, "term.label", 64, 1);
    t->details_json = get_str(r, "term.details", GRPO_WORKERS_MAX_STR, 1);
    t->kind = get_i32(r, "term.kind");
    t->score = get_f64(r, "term.score", 1);
    t->ms = get_f64(r, "term.ms", 1);
    if (r->err == GRPO_OK && (t->kind < 0 || t->kind > 4))
        bad(r, "term.kind", "not a verdict kind");
}

/* A turn's record: a JSON object of bounded size, or absent. */
static char *
get_turn_record(rd *r)
{
    char *s = get_str(r, "turn.record", GRPO_WORKERS_MAX_TURN_RECORD, 1);
    if (s == NULL || r->err != GRPO_OK)
        return s;
    cJSON *o = NULL;
    if (grpo__json_parse(s, strlen(s), "turn.record", &o) != GRPO_OK || !cJSON_IsObject(o))
        bad(r, "turn.record", "not a JSON object");
    cJSON_Delete(o);
    return s;
}

/* A sample's turns (after its tokens): in order within the n tokens. */
static void
get_turns(rd *r, grpo_wsample *s)
{
    /* the smallest turn, 32 bytes: three counts, two times, an absent record */
    s->n_turns = get_count(r, "sample.n_turns", 0, GRPO_WORKERS_MAX_TURNS, 32);
    s->turns = s->n_turns > 0 ? get_array(r, (size_t)s->n_turns, sizeof *s->turns) : NULL;
    int64_t from = 0; /* the first token a turn's action may end at */
    for (int32_t t = 0; t < s->n_turns && r->err == GRPO_OK; t++) {
        grpo_wturn *u = &s->turns[t];
        u->action_end = get_i32(r, "turn.action_end");
        u->n_obs = get_i32(r, "turn.n_obs");
        u->n_obs_cut = get_i32(r, "turn.n_obs_cut");
        u->at_ms = get_f64(r, "turn.at_ms", 1);
        u->wait_ms = get_f64(r, "turn.wait_ms", 1);
        u->record_json = get_turn_record(r);
        if (r->err != GRPO_OK)
            break;
        int64_t end = (int64_t)u->action_end + u->n_obs;
        if (u->action_end < from || u->n_obs < 0 || end > s->n_tokens)
            bad(r, "turn", "not within the sample's tokens after the turn before");
        else if (t > 0 && u->action_end <= s->turns[t - 1].action_end)
            bad(r, "turn.action_end", "not increasing");
        else if (u->n_obs_cut < 0 || u->n_obs_cut > GRPO_WORKERS_MAX_TOKENS)
            bad(r, "turn.n_obs_cut", "out of range");
        else if (u->at_ms < 0 || u->wait_ms < 0)
            bad(r, "turn", "a negative time");
        from = end;
    }
}

static void
get_sample(rd *r, grpo_wsample *s, const grpo_wresult *res)
{
    s->index = get_i32(r, "sample.index");
    s->finish = get_i32(r, "sample.finish");
    if (r->err == GRPO_OK && (s->index < 0 || s->index >= GRPO_WORKERS_MAX_GROUP))
        bad(r, "sample.index", "out of range");
    if (r->err == GRPO_OK && (s->finish < GRPO_FINISH_EOS || s->finish > GRPO_FINISH_ABORT))
        bad(r, "sample.finish", "not a finish reason");
    s->n_tokens = get_count(r, "sample.n_tokens", 0, GRPO_WORKERS_MAX_TOKENS, 8);
    s->tokens = get_array(r, (size_t)s->n_tokens, sizeof *s->tokens);
    s->logprobs = get_array(r, (size_t)s->n_tokens, sizeof *s->logprobs);
    for (int32_t k = 0; k < s->n_tokens && r->err == GRPO_OK; k++)
        if ((s->tokens[k] = get_i32(r, "sample.tokens")) < 0)
            bad(r, "sample.tokens", "negative token id");
    for (int32_t k = 0; k < s->n_tokens && r->err == GRPO_OK; k++) {
        s->logprobs[k] = get_f32(r, "sample.logprobs");
        if (!(s->logprobs[k] <= 0.0f) && r->err == GRPO_OK) /* also catches NaN */
            bad(r, "sample.logprobs", "not a log probability");
    }
    s->text = get_bytes(r, "sample.text", GRPO_WORKERS_MAX_STR, 0, 0, &s->text_len);
    s->reward = get_f64(r, "sample.reward", 1);
    s->skipped = get_i32(r, "sample.skipped");
    s->n_terms = get_count(r, "sample.n_terms", 0, GRPO_WORKERS_MAX_TERMS, 36);
    s->terms = get_array(r, (size_t)s->n_terms, sizeof *s->terms);
    for (int32_t t = 0; t < s->n_terms && r->err == GRPO_OK; t++)
        get_term(r, &s->terms[t]);
    size_t row = grpo_wresult_route_row_bytes(res);
    if (row > 0 && r->err == GRPO_OK)
        s->routes = get_routes(r, "sample.routes", routed(s->n_tokens), row, res);
    get_turns(r, s);
}

/* The result's route shape: none (all 0), or experts in [1, 32767], layers in [1, 4096] and k
 * in [1, min(experts, 256)]. */
static void
get_route_shape(rd *r, grpo_wresult *res)
{
    res->route_experts = get_i32(r, "result.route_experts");
    res->route_layers = get_i32(r, "result.route_layers");
    res->route_k = get_i32(r, "result.route_k");
    if (r->err != GRPO_OK)
        return;
    int32_t e = res->route_experts, l = res->route_layers, k = res->route_k;
    if (e == 0 && l == 0 && k == 0)
        return;
    if (e < 1 || e > 32767 || l < 1 || l > 4096 || k < 1 || k > e || k > 256)
        bad(r, "result.routes", "shape out of range");
    else
        res->prompt_routes = get_routes(r, "result.prompt_routes", (size_t)res->n_prompt,
                                        grpo_wresult_route_row_bytes(res), res);
}

static void
get_result(rd *r, grpo_wresult *res)
{
    res->lease_id = get_u64(r, "result.lease_id");
    res->attempt = get_i32(r, "result.attempt");
    res->policy_version = (int64_t)get_u64(r, "result.policy_version");
    if (r->err == GRPO_OK && (res->attempt < 0 || res->policy_version < 0))
        bad(r, "result", "negative attempt or policy version");
    res->prompt_id = get_str(r, "result.prompt_id", 4096, 0);
    res->n_prompt = get_count(r, "result.n_prompt", 1, GRPO_WORKERS_MAX_TOKENS, 4);
    res->prompt = get_array(r, (size_t)res->n_prompt, sizeof *res->prompt);
    for (int32_t k = 0; k < res->n_prompt && r->err == GRPO_OK; k++)
        if ((res->prompt[k] = get_i32(r, "result.prompt")) < 0)
            bad(r, "result.prompt", "negative token id");
    res->gen_ms = get_f64(r, "result.gen_ms", 1);
    res->verify_ms = get_f64(r, "result.verify_ms", 1);
    get_route_shape(r, res);
    /* the smallest sample, 36 bytes: index, finish, n_tokens, text length, reward, skipped,
     * n_terms, n_turns */
    res->n_samples = get_count(r, "result.n_samples", 1, GRPO_WORKERS_MAX_GROUP, 36);
    res->samples = get_array(r, (size_t)res->n_samples, sizeof *res->samples);
    for (int32_t i = 0; i < res->n_samples && r->err == GRPO_OK; i++)
        get_sample(r, &res->samples[i], res);
}

static void
get_worker(rd *r, grpo_wmsg *m)
{
    m->worker_id = get_str(r, "worker_id", GRPO_WORKERS_MAX_ID, 0);
    if (m->worker_id != NULL && m->worker_id[0] == '\0')
        bad(r, "worker_id", "empty");
}

static void
get_body(rd *r, grpo_wmsg *m)
{
    switch (m->type) {
    case GRPO_WMSG_PULL:
    case GRPO_WMSG_HEARTBEAT:
        get_worker(r, m);
        m->worker_version = (int64_t)get_u64(r, "worker_version");
        m->tokens_per_s = get_f64(r, "tokens_per_s", 1);
        m->groups_done = get_u64(r, "groups_done");
        m->want = get_i32(r, "want");
        if (r->err == GRPO_OK && (m->want < 0 || m->want > GRPO_WORKERS_MAX_LEASES))
            bad(r, "want", "out of range");
        m->n_ids = get_count(r, "n_ids", 0, GRPO_WORKERS_MAX_LEASES, 8);
        m->ids = get_array(r, (size_t)m->n_ids, sizeof *m->ids);
        for (int32_t i = 0; i < m->n_ids && r->err == GRPO_OK; i++)
            m->ids[i] = get_u64(r, "ids");
        break;
    case GRPO_WMSG_RESULT:
        get_worker(r, m);
        get_result(r, &m->result);
        break;
    case GRPO_WMSG_WORK:
        get_policy(r, &m->policy);
        get_params(r, &m->params);
        m->n_leases = get_count(r, "n_leases", 0, GRPO_WORKERS_MAX_LEASES, 24);
        m->leases = get_array(r, (size_t)m->n_leases, sizeof *m->leases);
        for (int32_t i = 0; i < m->n_leases && r->err == GRPO_OK; i++) {
            grpo_wlease *l = &m->leases[i];
            l->lease_id = get_u64(r, "lease.id");
            l->attempt = get_i32(r, "lease.attempt");
            l->timeout_s = get_f64(r, "lease.timeout_s", 1);
            l->prompt_id = get_str(r, "lease.prompt_id", 4096, 0);
            l->record_json = get_str(r, "lease.record", GRPO_PROMPTS_MAX_LINE, 0);
            if (r->err == GRPO_OK && (l->attempt < 0 || !(l->timeout_s > 0)))
                bad(r, "lease", "negative attempt or timeout");
        }
        break;
    case GRPO_WMSG_WAIT:
        get_policy(r, &m->policy);
        m->retry_ms = get_u32(r, "retry_ms");
        if (r->err == GRPO_OK && m->retry_ms > 600000)
            bad(r, "retry_ms", "over 10 minutes");
        break;
    case GRPO_WMSG_STOP:
        break;
    case GRPO_WMSG_ACK:
        get_policy(r, &m->policy);
        m->status = get_i32(r, "status");
        if (r->err == GRPO_OK && (m->status < GRPO_WACK_OK || m->status > GRPO_WACK_REFUSED))
            bad(r, "status", "unknown");
        break;
    case GRPO_WMSG_ERROR:
        m->message = get_str(r, "message", 4096, 0);
        break;
    default:
        bad(r, "type", "unknown message type");
    }
}

grpo_err
grpo_wmsg_decode(grpo_wmsg *out, const void *bytes, size_t len)
{
    memset(out, 0, sizeof *out);
    rd r = {{bytes, len, 0, false}, "?", GRPO_OK};
    if (len > GRPO_WORKERS_MAX_MSG)
        return grpo__fail(GRPO_EFORMAT, "workers: a message of %zu bytes is over the limit", len);
    uint32_t magic = get_u32(&r, "magic");
    uint32_t hv = get_u32(&r, "header");
    if (r.err != GRPO_OK)
        return r.err;
    if (magic != GRPO_WORKERS_MAGIC)
        return grpo__fail(GRPO_EFORMAT, "workers: not a grpo worker message (bad magic)");
    unsigned version = hv & 0xFFFF;
    if (version != GRPO_WORKERS_PROTOCOL)
        return grpo__fail(GRPO_EVERSION, "workers: protocol version %u; this grpo speaks %d",
                          version, GRPO_WORKERS_PROTOCOL);
    out->type = (int32_t)(hv >> 16);
    r.msg = grpo_wmsg_type_name(out->type);
    get_body(&r, out);
    if (r.err == GRPO_OK && grpo__rd_left(&r.c) != 0)
        bad(&r, "end", "trailing bytes");
    return r.err;
}

static void
params_fini(grpo_wparams *p)
{
    free(p->template_name), free(p->tools);
    for (int32_t i = 0; i < GRPO_ROLLOUT_MAX_STOP; i++)
        free(p->stop[i]);
}

static void
result_fini(grpo_wresult *r)
{
    for (int32_t i = 0; r->samples && i < r->n_samples; i++) {
        grpo_wsample *s = &r->samples[i];
        free(s->tokens), free(s->logprobs), free(s->text), free(s->routes);
        for (int32_t t = 0; s->terms && t < s->n_terms; t++) {
            grpo_wterm *tm = &s->terms[t];
            free(tm->verifier), free(tm->version), free(tm->label), free(tm->details_json);
        }
        free(s->terms);
        for (int32_t t = 0; s->turns && t < s->n_turns; t++)
            free(s->turns[t].record_json);
        free(s->turns);
    }
    free(r->samples), free(r->prompt), free(r->prompt_id), free(r->prompt_routes);
}

void
grpo_wmsg_fini(grpo_wmsg *m)
{
    if (m == NULL)
        return;
    free(m->worker_id), free(m->ids), free(m->message);
    free(m->policy.weights_path), free(m->policy.sha256);
    params_fini(&m->params);
    for (int32_t i = 0; m->leases && i < m->n_leases; i++)
        free(m->leases[i].prompt_id), free(m->leases[i].record_json);
    free(m->leases);
    result_fini(&m->result);
    memset(m, 0, sizeof *m);
}

const char *
grpo_wmsg_type_name(int32_t type)
{
    switch (type) {
    case GRPO_WMSG_PULL:
        return "pull";
    case GRPO_WMSG_HEARTBEAT:
        return "heartbeat";
    case GRPO_WMSG_RESULT:
        return "result";
    case GRPO_WMSG_WORK:
        return "work";
    case GRPO_WMSG_WAIT:
        return "wait";
    case GRPO_WMSG_STOP:
        return "stop";
    case GRPO_WMSG_ACK:
        return "ack";
    case GRPO_WMSG_ERROR:
        return "error";
    default:
        return "?";
    }
}
