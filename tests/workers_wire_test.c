/* The worker protocol codec and the lease table.
 * Codec: random messages of every type survive encode -> decode field for field (compared with the
 * values the test drew, not with another encoding); every truncation and thousands of random
 * byte flips of an encoded message decode to an error or a message, never past the buffer (ASan
 * run); hand-built hostile messages (huge counts, invalid UTF-8, NUL in strings, wrong magic or
 * version) are refused with the field named.
 * Lease table: a random schedule of issues, heartbeats, expiries, results and releases is checked
 * step by step against a naive reference model written here. */
#include "grpo/workers.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

static uint64_t rng_state;

static uint64_t
rnd(void)
{
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return rng_state;
}

static int
rndi(int lo, int hi)
{
    return lo + (int)(rnd() % (uint64_t)(hi - lo + 1));
}

static char *
rnd_str(int maxlen)
{
    static const char *pieces[] = {"a", "Z", "7", " ", "{", "\"", "é", "→", "😀", "\\", "\n"};
    int n = rndi(1, maxlen);
    char *s = calloc((size_t)n * 4 + 1, 1);
    for (int i = 0; i < n; i++)
        strcat(s, pieces[rnd() % (sizeof pieces / sizeof *pieces)]);
    return s;
}

/* n rows of routes of r's shape: id (t * 7 + l * 3 + j * step) % experts, distinct over j. */
static uint8_t *
fill_routes(const grpo_wresult *r, size_t n, int salt)
{
    size_t row = grpo_wresult_route_row_bytes(r), w = r->route_experts <= 256 ? 1 : 2;
    uint8_t *b = calloc(n * row + 1, 1);
    for (size_t t = 0; t < n; t++)
        for (int l = 0; l < r->route_layers; l++)
            for (int j = 0; j < r->route_k; j++) {
                int v = (int)((t * 7 + (size_t)l * 3 + (size_t)salt) % (size_t)r->route_experts);
                v = (v + j) % r->route_experts;
                uint8_t *at = b + t * row + ((size_t)l * (size_t)r->route_k + (size_t)j) * w;
                at[0] = (uint8_t)v;
                if (w == 2)
                    at[1] = (uint8_t)(v >> 8);
            }
    return b;
}

/* Routes for a result: 1-byte or int16 ids, 1-3 layers, k of 1-4. */
static void
rnd_routes(grpo_wresult *r)
{
    r->route_experts = rnd() % 2 ? rndi(4, 256) : rndi(257, 1000);
    r->route_layers = rndi(1, 3), r->route_k = rndi(1, 4);
    r->prompt_routes = fill_routes(r, (size_t)r->n_prompt, 0);
    for (int i = 0; i < r->n_samples; i++) {
        int n = r->samples[i].n_tokens;
        r->samples[i].routes = fill_routes(r, n > 1 ? (size_t)n - 1 : 0, i + 1);
    }
}

/* Turns in order within a sample's tokens: each action ends 1-5 tokens after the turn before's
 * observation, which has 0-5 tokens; records are JSON objects or absent. */
static void
rnd_turns(grpo_wsample *s)
{
    s->turns = calloc(8, sizeof *s->turns);
    int32_t pos = 0;
    for (int t = 0; t < 8; t++) {
        int32_t end = pos + rndi(1, 5);
        if (end > s->n_tokens)
            break;
        int32_t room = s->n_tokens - end;
        grpo_wturn *u = &s->turns[s->n_turns++];
        u->action_end = end, u->n_obs = rndi(0, room < 5 ? room : 5), u->n_obs_cut = rndi(0, 3);
        u->at_ms = rndi(0, 100000) / 7.0, u->wait_ms = rndi(0, 5000) / 3.0;
        if (rnd() % 3) {
            char *v = rnd_str(10), *esc = calloc(strlen(v) * 2 + 1, 1);
            for (size_t i = 0, k = 0; v[i]; i++) { /* a JSON string: quote, backslash, newline */
                if (v[i] == '"' || v[i] == '\\' || v[i] == '\n')
                    esc[k++] = '\\';
                esc[k++] = v[i] == '\n' ? 'n' : v[i];
            }
            u->record_json = malloc(strlen(esc) + 32);
            sprintf(u->record_json, "{\"env\":\"python\",\"obs\":\"%s\"}", esc);
            free(v), free(esc);
        }
        pos = end + u->n_obs;
    }
}

/* A random message of `type`; strings are heap copies the test frees with grpo_wmsg_fini. */
static void
rnd_msg(grpo_wmsg *m, int type)
{
    memset(m, 0, sizeof *m);
    m->type = type;
    if (type <= GRPO_WMSG_RESULT)
        m->worker_id = rnd_str(20);
    if (type == GRPO_WMSG_PULL || type == GRPO_WMSG_HEARTBEAT) {
        m->worker_version = rndi(0, 1000);
        m->tokens_per_s = (double)rndi(0, 100000) / 7.0;
        m->groups_done = rnd() >> 20;
        m->want = rndi(0, GRPO_WORKERS_MAX_LEASES);
        if (type == GRPO_WMSG_HEARTBEAT) {
            m->n_ids = rndi(0, GRPO_WORKERS_MAX_LEASES);
            m->ids = calloc((size_t)m->n_ids + 1, sizeof *m->ids);
            for (int i = 0; i < m->n_ids; i++)
                m->ids[i] = rnd();
        }
    }
    if (type == GRPO_WMSG_WORK || type == GRPO_WMSG_WAIT || type == GRPO_WMSG_ACK) {
        m->policy.version = rndi(0, 50);
        m->policy.weights_path = rnd() % 2 ? rnd_str(40) : NULL;
        m->policy.sha256 = rnd() % 2 ? strdup("0123456789abcdef0123456789abcdef0123456789abcdef"
                                              "0123456789abcdef")
                                     : NULL;
        m->policy.max_staleness = rndi(-1, 3);
    }
    if (type == GRPO_WMSG_WORK) {
        grpo_wparams *p = &m->params;
        p->group_size = rndi(1, 64), p->seed = rnd();
        p->sampling.temperature = (float)rndi(0, 20) / 10.0f;
        p->sampling.top_p = (float)rndi(1, 100) / 100.0f;
        p->sampling.top_k = rndi(0, 50);
        p->sampling.min_p = (float)rndi(0, 9) / 10.0f;
        p->max_new_tokens = rndi(1, 4096), p->logprobs = rndi(1, 3);
        p->template_name = rnd() % 2 ? strdup("r1") : NULL;
        p->n_stop = rndi(0, GRPO_ROLLOUT_MAX_STOP);
        for (int i = 0; i < p->n_stop; i++)
            p->stop[i] = rnd_str(8);
        p->n_stop_ids = rndi(0, GRPO_ROLLOUT_MAX_STOP);
        for (int i = 0; i < p->n_stop_ids; i++)
            p->stop_ids[i] = rndi(0, 100000);
        p->record_routes = rndi(0, 1);
        p->numerics = rndi(GRPO_NUMERICS_EXACT, GRPO_NUMERICS_FP8_NONDET);
        p->kv_dtype = rndi(GRPO_KV_F32, GRPO_KV_FP8);
        if (rnd() % 2) {
            p->tools = strdup(rnd() % 2 ? "python" : "python,/opt/envs/maze.so");
            p->max_calls = rndi(0, 16), p->max_turns = rndi(0, 16);
            p->max_obs_tokens = rndi(1, 2048), p->tool_time_s = rndi(1, 600) / 4.0;
        }
        m->n_leases = rndi(0, 8);
        m->leases = calloc((size_t)m->n_leases + 1, sizeof *m->leases);
        for (int i = 0; i < m->n_leases; i++) {
            m->leases[i].lease_id = rnd(), m->leases[i].attempt = rndi(0, 5);
            m->leases[i].timeout_s = rndi(1, 600) / 3.0;
            m->leases[i].prompt_id = rnd_str(10), m->leases[i].record_json = rnd_str(60);
        }
    }
    if (type == GRPO_WMSG_WAIT)
        m->retry_ms = (uint32_t)rndi(0, 60000);
    if (type == GRPO_WMSG_ACK)
        m->status = rndi(GRPO_WACK_OK, GRPO_WACK_REFUSED);
    if (type == GRPO_WMSG_ERROR)
        m->message = rnd_str(30);
    if (type == GRPO_WMSG_RESULT) {
        grpo_wresult *r = &m->result;
        r->lease_id = rnd(), r->attempt = rndi(0, 9), r->policy_version = rndi(0, 9);
        r->prompt_id = rnd_str(12);
        r->n_prompt = rndi(1, 30);
        r->prompt = calloc((size_t)r->n_prompt, sizeof *r->prompt);
        for (int k = 0; k < r->n_prompt; k++)
            r->prompt[k] = rndi(0, 129279);
        r->gen_ms = rndi(0, 1000000) / 3.0, r->verify_ms = rndi(0, 1000) / 7.0;
        r->n_samples = rndi(1, 6);
        r->samples = calloc((size_t)r->n_samples, sizeof *r->samples);
        for (int i = 0; i < r->n_samples; i++) {
            grpo_wsample *s = &r->samples[i];
            s->index = i, s->finish = rndi(1, 4), s->n_tokens = rndi(0, 40);
            s->tokens = calloc((size_t)s->n_tokens + 1, sizeof *s->tokens);
            s->logprobs = calloc((size_t)s->n_tokens + 1, sizeof *s->logprobs);
            for (int k = 0; k < s->n_tokens; k++)
                s->tokens[k] = rndi(0, 129279), s->logprobs[k] = -(float)rndi(0, 3000) / 100.0f;
            /* model output: arbitrary bytes, NUL and invalid UTF-8 included */
            s->text_len = (uint32_t)rndi(0, 30);
            s->text = malloc(s->text_len + 1);
            for (uint32_t k = 0; k < s->text_len; k++)
                s->text[k] = (char)rnd();
            s->text[s->text_len] = 0;
            s->reward = rndi(-10, 10) / 4.0, s->skipped = rndi(0, 1);
            s->n_terms = rndi(0, 3);
            s->terms = calloc((size_t)s->n_terms + 1, sizeof *s->terms);
            for (int t = 0; t < s->n_terms; t++) {
                grpo_wterm *tm = &s->terms[t];
                tm->verifier = strdup("math"), tm->version = strdup("1.0.0");
                tm->label = rnd() % 2 ? strdup("correct") : NULL;
                tm->details_json = rnd() % 2 ? rnd_str(20) : NULL;
                tm->kind = rndi(0, 4), tm->score = rndi(0, 4) / 4.0, tm->ms = rndi(0, 99) / 9.0;
            }
            if (rnd() % 2)
                rnd_turns(s);
        }
        if (rnd() % 2)
            rnd_routes(r);
    }
}

static void
assert_str_eq_opt(const char *a, const char *b)
{
    if (a == NULL || b == NULL)
        assert_true(a == b);
    else
        assert_string_equal(a, b);
}

static void
assert_same(const grpo_wmsg *a, const grpo_wmsg *b)
{
    assert_int_equal(a->type, b->type);
    assert_str_eq_opt(a->worker_id, b->worker_id);
    assert_str_eq_opt(a->message, b->message);
    if (a->type == GRPO_WMSG_PULL || a->type == GRPO_WMSG_HEARTBEAT) {
        assert_int_equal(a->worker_version, b->worker_version);
        assert_true(a->tokens_per_s == b->tokens_per_s);
        assert_int_equal(a->groups_done, b->groups_done);
        assert_int_equal(a->want, b->want);
        assert_int_equal(a->n_ids, b->n_ids);
        for (int i = 0; i < a->n_ids; i++)
            assert_int_equal(a->ids[i], b->ids[i]);
    }
    if (a->type == GRPO_WMSG_WORK || a->type == GRPO_WMSG_WAIT || a->type == GRPO_WMSG_ACK) {
        assert_int_equal(a->policy.version, b->policy.version);
        assert_str_eq_opt(a->policy.weights_path, b->policy.weights_path);
        assert_str_eq_opt(a->policy.sha256, b->policy.sha256);
        assert_int_equal(a->policy.max_staleness, b->policy.max_staleness);
    }
    assert_int_equal(a->retry_ms, b->retry_ms);
    assert_int_equal(a->status, b->status);
    if (a->type == GRPO_WMSG_WORK) {
        const grpo_wparams *p = &a->params, *q = &b->params;
        assert_int_equal(p->group_size, q->group_size);
        assert_int_equal(p->seed, q->seed);
        assert_true(memcmp(&p->sampling, &q->sampling, sizeof p->sampling) == 0);
        assert_int_equal(p->max_new_tokens, q->max_new_tokens);
        assert_int_equal(p->logprobs, q->logprobs);
        assert_str_eq_opt(p->template_name, q->template_name);
        assert_int_equal(p->n_stop, q->n_stop);
        for (int i = 0; i < p->n_stop; i++)
            assert_string_equal(p->stop[i], q->stop[i]);
        assert_int_equal(p->n_stop_ids, q->n_stop_ids);
        assert_memory_equal(p->stop_ids, q->stop_ids, (size_t)p->n_stop_ids * sizeof(int32_t));
        assert_int_equal(p->record_routes, q->record_routes);
        assert_int_equal(p->numerics, q->numerics);
        assert_int_equal(p->kv_dtype, q->kv_dtype);
        assert_str_eq_opt(p->tools, q->tools);
        assert_int_equal(p->max_calls, q->max_calls);
        assert_int_equal(p->max_turns, q->max_turns);
        assert_int_equal(p->max_obs_tokens, q->max_obs_tokens);
        assert_true(p->tool_time_s == q->tool_time_s);
        assert_int_equal(a->n_leases, b->n_leases);
        for (int i = 0; i < a->n_leases; i++) {
            assert_int_equal(a->leases[i].lease_id, b->leases[i].lease_id);
            assert_int_equal(a->leases[i].attempt, b->leases[i].attempt);
            assert_true(a->leases[i].timeout_s == b->leases[i].timeout_s);
            assert_string_equal(a->leases[i].prompt_id, b->leases[i].prompt_id);
            assert_string_equal(a->leases[i].record_json, b->leases[i].record_json);
        }
    }
    if (a->type == GRPO_WMSG_RESULT) {
        const grpo_wresult *r = &a->result, *s = &b->result;
        assert_int_equal(r->lease_id, s->lease_id);
        assert_int_equal(r->attempt, s->attempt);
        assert_int_equal(r->policy_version, s->policy_version);
        assert_string_equal(r->prompt_id, s->prompt_id);
        assert_int_equal(r->n_prompt, s->n_prompt);
        assert_memory_equal(r->prompt, s->prompt, (size_t)r->n_prompt * 4);
        assert_true(r->gen_ms == s->gen_ms && r->verify_ms == s->verify_ms);
        assert_int_equal(r->n_samples, s->n_samples);
        size_t row = grpo_wresult_route_row_bytes(r);
        assert_int_equal(row, grpo_wresult_route_row_bytes(s));
        assert_int_equal(r->route_experts, s->route_experts);
        assert_int_equal(r->route_layers, s->route_layers);
        assert_int_equal(r->route_k, s->route_k);
        assert_true((s->prompt_routes != NULL) == (row > 0));
        if (row > 0)
            assert_memory_equal(r->prompt_routes, s->prompt_routes, (size_t)r->n_prompt * row);
        for (int i = 0; row > 0 && i < r->n_samples; i++) {
            int n = r->samples[i].n_tokens;
            if (n > 1)
                assert_memory_equal(r->samples[i].routes, s->samples[i].routes,
                                    (size_t)(n - 1) * row);
        }
        for (int i = 0; i < r->n_samples; i++) {
            const grpo_wsample *x = &r->samples[i], *y = &s->samples[i];
            assert_int_equal(x->index, y->index);
            assert_int_equal(x->finish, y->finish);
            assert_int_equal(x->n_tokens, y->n_tokens);
            if (x->n_tokens) {
                assert_memory_equal(x->tokens, y->tokens, (size_t)x->n_tokens * 4);
                assert_memory_equal(x->logprobs, y->logprobs, (size_t)x->n_tokens * 4);
            }
            assert_int_equal(x->text_len, y->text_len);
            assert_memory_equal(x->text, y->text, x->text_len);
            assert_int_equal(y->text[y->text_len], 0);
            assert_true(x->reward == y->reward);
            assert_int_equal(x->skipped, y->skipped);
            assert_int_equal(x->n_terms, y->n_terms);
            for (int t = 0; t < x->n_terms; t++) {
                assert_string_equal(x->terms[t].verifier, y->terms[t].verifier);
                assert_string_equal(x->terms[t].version, y->terms[t].version);
                assert_str_eq_opt(x->terms[t].label, y->terms[t].label);
                assert_str_eq_opt(x->terms[t].details_json, y->terms[t].details_json);
                assert_int_equal(x->terms[t].kind, y->terms[t].kind);
                assert_true(x->terms[t].score == y->terms[t].score);
                assert_true(x->terms[t].ms == y->terms[t].ms);
            }
            assert_int_equal(x->n_turns, y->n_turns);
            for (int t = 0; t < x->n_turns; t++) {
                const grpo_wturn *u = &x->turns[t], *v = &y->turns[t];
                assert_int_equal(u->action_end, v->action_end);
                assert_int_equal(u->n_obs, v->n_obs);
                assert_int_equal(u->n_obs_cut, v->n_obs_cut);
                assert_true(u->at_ms == v->at_ms && u->wait_ms == v->wait_ms);
                assert_str_eq_opt(u->record_json, v->record_json);
            }
        }
    }
}

static const int types[] = {GRPO_WMSG_PULL, GRPO_WMSG_HEARTBEAT, GRPO_WMSG_RESULT, GRPO_WMSG_WORK,
                            GRPO_WMSG_WAIT, GRPO_WMSG_STOP,      GRPO_WMSG_ACK,    GRPO_WMSG_ERROR};

/* A result whose samples are all the smallest possible (no tokens, empty text, no terms): the
 * decoder's size bound once assumed 44 bytes a sample and refused it. */
static void
test_smallest_samples(void **state)
{
    (void)state;
    grpo_wsample smp[64];
    int32_t prompt[1] = {7};
    memset(smp, 0, sizeof smp);
    for (int i = 0; i < 64; i++)
        smp[i].index = i, smp[i].finish = GRPO_FINISH_EOS, smp[i].text = "";
    grpo_wmsg m, d;
    memset(&m, 0, sizeof m);
    m.type = GRPO_WMSG_RESULT, m.worker_id = "w";
    m.result.lease_id = 1, m.result.prompt_id = "p", m.result.n_prompt = 1;
    m.result.prompt = prompt, m.result.n_samples = 64, m.result.samples = smp;
    void *bytes;
    size_t len;
    assert_int_equal(grpo_wmsg_encode(&m, &bytes, &len), GRPO_OK);
    assert_int_equal(grpo_wmsg_decode(&d, bytes, len), GRPO_OK);
    assert_int_equal(d.result.n_samples, 64);
    assert_int_equal(d.result.samples[63].index, 63);
    grpo_wmsg_fini(&d);
    free(bytes);
}

static void
test_round_trip(void **state)
{
    (void)state;
    for (int it = 0; it < 400; it++) {
        grpo_wmsg m, d;
        rnd_msg(&m, types[it % 8]);
        void *bytes;
        size_t len;
        assert_int_equal(grpo_wmsg_encode(&m, &bytes, &len), GRPO_OK);
        grpo_err derr = grpo_wmsg_decode(&d, bytes, len);
        if (derr != GRPO_OK)
            fprintf(stderr, "decode of a %s: %s\n", grpo_wmsg_type_name(m.type), grpo_error_last());
        assert_int_equal(derr, GRPO_OK);
        assert_same(&m, &d);
        grpo_wmsg_fini(&d);
        grpo_wmsg_fini(&m);
        free(bytes);
    }
}

/* Every prefix is refused; random corruption never crashes (and a decode that succeeds yields a
 * message that encodes again). */
static void
test_truncation_and_corruption(void **state)
{
    (void)state;
    for (int it = 0; it < 48; it++) {
        grpo_wmsg m, d;
        rnd_msg(&m, types[it % 8]);
        void *bytes;
        size_t len;
        assert_int_equal(grpo_wmsg_encode(&m, &bytes, &len), GRPO_OK);
        for (size_t cut = 0; cut < len; cut++) {
            assert_int_not_equal(grpo_wmsg_decode(&d, bytes, cut), GRPO_OK);
            grpo_wmsg_fini(&d);
        }
        unsigned char *c = malloc(len);
        for (int f = 0; f < 200; f++) {
            memcpy(c, bytes, len);
            for (int k = rndi(1, 4); k > 0; k--)
                c[rnd() % len] = (unsigned char)rnd();
            if (grpo_wmsg_decode(&d, c, len) == GRPO_OK) {
                void *b2;
                size_t l2;
                assert_int_equal(grpo_wmsg_encode(&d, &b2, &l2), GRPO_OK);
                free(b2);
            }
            grpo_wmsg_fini(&d);
        }
        free(c);
        grpo_wmsg_fini(&m);
        free(bytes);
    }
}

/* Byte-level builders for hostile messages. */
typedef struct {
    unsigned char b[256];
    size_t n;
} raw;

static void
raw_u32(raw *r, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        r->b[r->n++] = (unsigned char)(v >> (8 * i));
}

static void
raw_hdr(raw *r, int type)
{
    r->n = 0;
    raw_u32(r, GRPO_WORKERS_MAGIC);
    r->b[r->n++] = GRPO_WORKERS_PROTOCOL, r->b[r->n++] = 0;
    r->b[r->n++] = (unsigned char)type, r->b[r->n++] = 0;
}

static void
raw_str(raw *r, const char *s, size_t n)
{
    raw_u32(r, (uint32_t)n);
    memcpy(r->b + r->n, s, n);
    r->n += n;
}

static void
expect_refused(const raw *r, const char *needle)
{
    grpo_wmsg d;
    grpo_err err = grpo_wmsg_decode(&d, r->b, r->n);
    assert_int_not_equal(err, GRPO_OK);
    if (strstr(grpo_error_last(), needle) == NULL)
        fail_msg("message \"%s\" lacks \"%s\"", grpo_error_last(), needle);
    grpo_wmsg_fini(&d);
}

static void
test_hostile(void **state)
{
    (void)state;
    raw r;
    /* wrong magic, wrong version */
    raw_hdr(&r, GRPO_WMSG_STOP);
    r.b[0] ^= 1;
    expect_refused(&r, "magic");
    raw_hdr(&r, GRPO_WMSG_STOP);
    r.b[4] = 9;
    grpo_wmsg d;
    assert_int_equal(grpo_wmsg_decode(&d, r.b, r.n), GRPO_EVERSION);
    grpo_wmsg_fini(&d);
    /* unknown type; trailing bytes */
    raw_hdr(&r, 99);
    expect_refused(&r, "type");
    raw_hdr(&r, GRPO_WMSG_STOP);
    r.b[r.n++] = 0;
    expect_refused(&r, "trailing");
    /* worker id: invalid UTF-8, embedded NUL, longer than the message, over the limit */
    raw_hdr(&r, GRPO_WMSG_PULL);
    raw_str(&r, "\xC3\x28", 2);
    expect_refused(&r, "worker_id");
    raw_hdr(&r, GRPO_WMSG_PULL);
    raw_str(&r, "a\0b", 3);
    expect_refused(&r, "not UTF-8");
    raw_hdr(&r, GRPO_WMSG_PULL);
    raw_u32(&r, 100);
    expect_refused(&r, "truncated");
    raw_hdr(&r, GRPO_WMSG_PULL);
    raw_u32(&r, GRPO_WORKERS_MAX_ID + 1);
    expect_refused(&r, "limit");
    /* a heartbeat claiming 2^31-1 lease ids in a short message */
    raw_hdr(&r, GRPO_WMSG_HEARTBEAT);
    raw_str(&r, "w", 1);
    for (int i = 0; i < 6; i++)
        raw_u32(&r, 0); /* version, tok/s, groups_done */
    raw_u32(&r, 0);     /* want */
    raw_u32(&r, 0x7FFFFFFF);
    expect_refused(&r, "n_ids");
    /* a result claiming 60000 samples with no bytes behind them */
    raw_hdr(&r, GRPO_WMSG_RESULT);
    raw_str(&r, "w", 1);
    raw_u32(&r, 1), raw_u32(&r, 0); /* lease */
    raw_u32(&r, 0);                 /* attempt */
    raw_u32(&r, 0), raw_u32(&r, 0); /* version */
    raw_str(&r, "p", 1);
    raw_u32(&r, 1), raw_u32(&r, 5); /* one prompt token */
    for (int i = 0; i < 4; i++)
        raw_u32(&r, 0); /* gen_ms, verify_ms */
    for (int i = 0; i < 3; i++)
        raw_u32(&r, 0); /* no routes */
    raw_u32(&r, 60000);
    expect_refused(&r, "n_samples");
    /* an absurd message size */
    assert_int_equal(grpo_wmsg_decode(&d, r.b, (size_t)GRPO_WORKERS_MAX_MSG + 1), GRPO_EFORMAT);
    grpo_wmsg_fini(&d);
    /* routes the decoder refuses: an id out of range, an expert twice, a shape out of range,
     * a record_routes flag other than 0/1 */
    for (int c = 0; c < 4; c++) {
        grpo_wmsg x;
        rnd_msg(&x, c == 3 ? GRPO_WMSG_WORK : GRPO_WMSG_RESULT);
        const char *want = c == 0 ? "out of range" : c == 1 ? "twice" : c == 2 ? "shape" : "0 or 1";
        if (c == 3) {
            x.params.record_routes = 2;
        } else {
            if (x.result.prompt_routes == NULL)
                rnd_routes(&x.result);
            if (c == 2) {
                x.result.route_k = x.result.route_experts + 1; /* more experts than there are */
                free(x.result.prompt_routes);
                x.result.prompt_routes =
                    calloc(grpo_wresult_route_row_bytes(&x.result) * (size_t)x.result.n_prompt, 1);
                for (int i = 0; i < x.result.n_samples; i++) {
                    free(x.result.samples[i].routes);
                    x.result.samples[i].routes =
                        calloc(grpo_wresult_route_row_bytes(&x.result) * 40 + 1, 1);
                }
            } else {
                grpo_wresult *q = &x.result;
                if (q->route_k < 2) { /* room for an expert twice: k = 2, routes refilled */
                    q->route_k = 2;
                    free(q->prompt_routes);
                    q->prompt_routes = fill_routes(q, (size_t)q->n_prompt, 0);
                    for (int i = 0; i < q->n_samples; i++) {
                        int n = q->samples[i].n_tokens;
                        free(q->samples[i].routes);
                        q->samples[i].routes = fill_routes(q, n > 1 ? (size_t)n - 1 : 0, 1);
                    }
                }
                size_t w = q->route_experts <= 256 ? 1 : 2;
                if (w == 1 && q->route_experts == 256)
                    q->route_experts = 255; /* so that some byte is out of range */
                int v = c == 0 ? q->route_experts : 0;
                q->prompt_routes[0] = (uint8_t)v;
                if (w == 2)
                    q->prompt_routes[1] = (uint8_t)(v >> 8);
                if (c == 1) /* the second id of the first token and layer: 0 as the first */
                    memset(q->prompt_routes + w, 0, w), memset(q->prompt_routes, 0, w);
            }
        }
        void *xb = NULL;
        size_t xl = 0;
        grpo_err e = grpo_wmsg_encode(&x, &xb, &xl);
        grpo_wmsg y;
        if (e == GRPO_OK) {
            assert_int_not_equal(grpo_wmsg_decode(&y, xb, xl), GRPO_OK);
            if (strstr(grpo_error_last(), want) == NULL)
                fail_msg("case %d: \"%s\" lacks \"%s\"", c, grpo_error_last(), want);
            grpo_wmsg_fini(&y);
        }
        assert_int_equal(e, GRPO_OK);
        free(xb);
        grpo_wmsg_fini(&x);
    }
    /* encode refuses what decode would refuse */
    grpo_wmsg m = {0};
    m.type = GRPO_WMSG_WORK, m.n_leases = GRPO_WORKERS_MAX_LEASES + 1;
    void *bytes;
    size_t len;
    assert_int_equal(grpo_wmsg_encode(&m, &bytes, &len), GRPO_EINVAL);
}

/* A result of one sample of 10 tokens with two turns (tokens 3-4 and 7-8 observations); every
 * case of `bad` breaks one rule of the turns. */
static void
turns_result(grpo_wmsg *m, grpo_wsample *s, grpo_wturn *tu, int32_t *prompt, int32_t *tok,
             float *lp)
{
    memset(m, 0, sizeof *m);
    memset(s, 0, sizeof *s);
    m->type = GRPO_WMSG_RESULT, m->worker_id = "w";
    m->result.lease_id = 1, m->result.prompt_id = "p", m->result.n_prompt = 1;
    m->result.prompt = prompt, m->result.n_samples = 1, m->result.samples = s;
    s->finish = GRPO_FINISH_EOS, s->text = "", s->n_tokens = 10, s->tokens = tok;
    s->logprobs = lp, s->n_turns = 2, s->turns = tu;
    tu[0] = (grpo_wturn){3, 2, 0, 1.5, 20.0, "{\"env\":\"python\"}"};
    tu[1] = (grpo_wturn){7, 2, 1, 40.0, 3.0, NULL};
}

/* Turns that do not lie in order within their sample's tokens, bad records and bad times are
 * refused with the field named; the good ones decode. */
static void
test_turns_refused(void **state)
{
    (void)state;
    int32_t prompt[1] = {7}, tok[10] = {0};
    float lp[10] = {0};
    grpo_wsample s;
    grpo_wturn tu[2];
    grpo_wmsg m, d;
    char *big = malloc(GRPO_WORKERS_MAX_TURN_RECORD + 16);
    memset(big, ' ', GRPO_WORKERS_MAX_TURN_RECORD + 15);
    big[0] = '{', big[GRPO_WORKERS_MAX_TURN_RECORD + 14] = '}';
    big[GRPO_WORKERS_MAX_TURN_RECORD + 15] = 0;
    struct {
        const char *want;
    } cases[] = {{NULL},          {"within"},         {"within"},    {"within"},
                 {"within"},      {"not increasing"}, {"n_obs_cut"}, {"negative time"},
                 {"JSON object"}, {"JSON object"},    {"limit"},     {"n_turns"},
                 {"UTF-8"}};
    for (int c = 0; c < (int)(sizeof cases / sizeof *cases); c++) {
        turns_result(&m, &s, tu, prompt, tok, lp);
        /* 1: the observation runs past the end; 2: inside the turn before's observation;
         * 3: a negative count; 4: past the tokens; 5: the same action end twice; 8: JSON but
         * not an object; 9: not JSON */
        if (c == 1)
            tu[1].action_end = 9;
        else if (c == 2)
            tu[1].action_end = 4;
        else if (c == 3)
            tu[0].n_obs = -1;
        else if (c == 4)
            tu[0].action_end = 11, tu[0].n_obs = 0;
        else if (c == 5)
            tu[1] = tu[0], tu[1].n_obs = 0, tu[0].n_obs = 0;
        else if (c == 6)
            tu[1].n_obs_cut = -2;
        else if (c == 7)
            tu[1].wait_ms = -1;
        else if (c == 8)
            tu[0].record_json = "[1, 2]";
        else if (c == 9)
            tu[0].record_json = "{\"env\": ";
        else if (c == 10)
            tu[0].record_json = big;
        else if (c == 11)
            s.n_turns = GRPO_WORKERS_MAX_TURNS + 1;
        else if (c == 12)
            tu[0].record_json = "{\"a\":\"\xC3\x28\"}";
        void *b = NULL;
        size_t len = 0;
        if (c == 11) { /* the encoder refuses it too: patch the count into a good encoding */
            assert_int_equal(grpo_wmsg_encode(&m, &b, &len), GRPO_EINVAL);
            s.n_turns = 2;
            assert_int_equal(grpo_wmsg_encode(&m, &b, &len), GRPO_OK);
            /* the count sits after the sample's 36-byte turns-free fields: find it by value */
            unsigned char *p = b;
            size_t at = 0;
            for (size_t k = 0; k + 12 <= len; k++)
                if (p[k] == 2 && !p[k + 1] && !p[k + 2] && !p[k + 3] && p[k + 4] == 3 &&
                    !p[k + 5] && !p[k + 6] && !p[k + 7] && p[k + 8] == 2)
                    at = k;
            assert_true(at > 0);
            uint32_t v = GRPO_WORKERS_MAX_TURNS + 1;
            memcpy(p + at, &v, 4);
        } else {
            assert_int_equal(grpo_wmsg_encode(&m, &b, &len), GRPO_OK);
        }
        grpo_err err = grpo_wmsg_decode(&d, b, len);
        if (cases[c].want == NULL) {
            assert_int_equal(err, GRPO_OK);
            assert_int_equal(d.result.samples[0].n_turns, 2);
            assert_int_equal(d.result.samples[0].turns[1].action_end, 7);
            assert_string_equal(d.result.samples[0].turns[0].record_json, "{\"env\":\"python\"}");
            assert_null(d.result.samples[0].turns[1].record_json);
        } else {
            assert_int_equal(err, GRPO_EFORMAT);
            if (strstr(grpo_error_last(), cases[c].want) == NULL)
                fail_msg("case %d: \"%s\" lacks \"%s\"", c, grpo_error_last(), cases[c].want);
        }
        grpo_wmsg_fini(&d);
        free(b);
    }
    free(big);
}

/* A WORK message with valid generation params (group 2, 8 tokens, raw logprobs, T = 1). */
static grpo_wmsg
valid_work(void)
{
    grpo_wmsg m = {0};
    m.type = GRPO_WMSG_WORK;
    m.params.group_size = 2, m.params.max_new_tokens = 8, m.params.logprobs = 1;
    m.params.sampling.temperature = 1, m.params.sampling.top_p = 1;
    return m;
}

/* m encodes, and its decoding is refused with an error naming field. */
static void
expect_work_refused(const grpo_wmsg *m, const char *field)
{
    grpo_wmsg d;
    void *b;
    size_t len;
    assert_int_equal(grpo_wmsg_encode(m, &b, &len), GRPO_OK);
    assert_int_equal(grpo_wmsg_decode(&d, b, len), GRPO_EFORMAT);
    assert_non_null(strstr(grpo_error_last(), field));
    grpo_wmsg_fini(&d);
    free(b);
}

/* The tools config of a WORK message: an empty list or a negative limit is refused. */
static void
test_tools_params_refused(void **state)
{
    (void)state;
    for (int c = 0; c < 3; c++) {
        grpo_wmsg m = valid_work();
        m.params.tools = c == 0 ? "" : "python";
        m.params.max_calls = c == 1 ? -1 : 8, m.params.max_obs_tokens = 512;
        m.params.tool_time_s = c == 2 ? -5 : 60;
        expect_work_refused(&m, "params.tool");
    }
}

/* How the workers load the model: numerics and a KV dtype other than the known ones are refused
 * by field. */
static void
test_model_params_refused(void **state)
{
    (void)state;
    for (int c = 0; c < 4; c++) {
        grpo_wmsg m = valid_work();
        m.params.numerics = c == 0 ? GRPO_NUMERICS_FP8_NONDET + 1 : c == 1 ? -1 : 0;
        m.params.kv_dtype = c == 2 ? 3 : c == 3 ? -1 : 0;
        expect_work_refused(&m, c < 2 ? "params.numerics" : "params.kv_dtype");
    }
}

/* ---- lease table against a reference model ---- */

enum { R_PENDING, R_LEASED, R_DONE };
typedef struct {
    int state, attempt, requeued;
    double deadline;
    char worker[8];
} ref_item;

static void
test_lease_table_model(void **state)
{
    (void)state;
    for (int round = 0; round < 20; round++) {
        size_t n = (size_t)rndi(1, 40);
        double timeout = 5.0, now = 100.0;
        grpo_lease_table *t;
        assert_int_equal(grpo_lease_table_create(&t, n, timeout), GRPO_OK);
        ref_item *ref = calloc(n, sizeof *ref);
        size_t *queue = calloc(n * 64 + 1024, sizeof *queue), qh = 0, qt = 0, fresh = 0;
        uint64_t reissued = 0, expired = 0, issued = 0;
        for (size_t i = 0; i < n; i++)
            ref[i].attempt = -1;
        for (size_t i = 0; i < n; i++) /* some already recorded by an earlier coordinator */
            if (rnd() % 5 == 0) {
                grpo_lease_table_mark_done(t, i);
                ref[i].state = R_DONE;
            }
        for (int step = 0; step < 400; step++) {
            now += rndi(0, 30) / 10.0;
            int op = rndi(0, 4);
            char w[8];
            snprintf(w, sizeof w, "w%d", rndi(0, 3));
            if (op == 0) { /* issue: requeued first (FIFO), then the lowest fresh pending */
                size_t want = n;
                while (qh < qt && want == n) {
                    size_t i = queue[qh++];
                    ref[i].requeued = 0;
                    if (ref[i].state == R_PENDING)
                        want = i;
                }
                while (want == n && fresh < n) {
                    if (ref[fresh].state == R_PENDING)
                        want = fresh;
                    fresh++;
                }
                size_t item;
                uint64_t id;
                int32_t att;
                int got = grpo_lease_table_issue(t, w, now, &item, &id, &att);
                assert_int_equal(got, want != n);
                if (!got)
                    continue;
                assert_int_equal(item, want);
                ref[want].attempt++;
                reissued += ref[want].attempt > 0;
                issued++;
                assert_int_equal(att, ref[want].attempt);
                ref[want].state = R_LEASED, ref[want].deadline = now + timeout;
                snprintf(ref[want].worker, sizeof ref[want].worker, "%s", w);
                size_t li;
                int32_t la;
                assert_int_equal(grpo_lease_table_lookup(t, id, &li, &la), GRPO_LEASE_NEW);
                assert_int_equal(li, want);
                assert_int_equal(la, att);
            } else if (op == 1) { /* heartbeat a random (item, attempt) by a random worker */
                size_t i = (size_t)rndi(0, (int)n - 1);
                int32_t a = ref[i].attempt < 0 ? 0 : ref[i].attempt - rndi(0, 1);
                if (a < 0)
                    a = 0;
                uint64_t id = (((uint64_t)a << 40) | i) + 1;
                int expect = ref[i].state == R_LEASED && ref[i].attempt == a &&
                             strcmp(ref[i].worker, w) == 0;
                assert_int_equal(grpo_lease_table_heartbeat(t, id, w, now), expect);
                if (expect)
                    ref[i].deadline = now + timeout;
            } else if (op == 2) { /* expire */
                size_t e = 0;
                for (size_t i = 0; i < fresh; i++)
                    if (ref[i].state == R_LEASED && ref[i].deadline < now) {
                        ref[i].state = R_PENDING, e++;
                        if (!ref[i].requeued)
                            queue[qt++] = i, ref[i].requeued = 1;
                    }
                expired += e;
                assert_int_equal(grpo_lease_table_expire(t, now, NULL, NULL), e);
            } else if (op == 4) { /* worker w disconnected: its leases return at once */
                if (rnd() % 4)
                    continue; /* rarer than the rest */
                size_t e = 0;
                for (size_t i = 0; i < fresh; i++)
                    if (ref[i].state == R_LEASED && strcmp(ref[i].worker, w) == 0) {
                        ref[i].state = R_PENDING, e++;
                        if (!ref[i].requeued)
                            queue[qt++] = i, ref[i].requeued = 1;
                    }
                expired += e;
                assert_int_equal(grpo_lease_table_expire_worker(t, w, NULL, NULL), e);
            } else { /* a result for some issued item: recorded, or a refused one released */
                size_t i = (size_t)rndi(0, (int)n - 1);
                if (ref[i].attempt < 0)
                    continue;
                uint64_t id = (((uint64_t)ref[i].attempt << 40) | i) + 1;
                size_t li;
                int32_t la;
                grpo_lease_outcome o = grpo_lease_table_lookup(t, id, &li, &la);
                assert_int_equal(o, ref[i].state == R_DONE ? GRPO_LEASE_DUPLICATE : GRPO_LEASE_NEW);
                if (o == GRPO_LEASE_NEW && rnd() % 4 == 0) {
                    grpo_lease_table_release(t, i);
                    if (ref[i].state == R_LEASED) {
                        ref[i].state = R_PENDING;
                        if (!ref[i].requeued)
                            queue[qt++] = i, ref[i].requeued = 1;
                    }
                } else if (o == GRPO_LEASE_NEW) {
                    grpo_lease_table_complete(t, i);
                    ref[i].state = R_DONE;
                }
            }
            grpo_lease_counts c;
            grpo_lease_table_counts(t, &c);
            size_t cnt[3] = {0, 0, 0};
            for (size_t i = 0; i < n; i++)
                cnt[ref[i].state]++;
            assert_int_equal(c.items, n);
            assert_int_equal(c.pending, cnt[R_PENDING]);
            assert_int_equal(c.leased, cnt[R_LEASED]);
            assert_int_equal(c.done, cnt[R_DONE]);
            assert_int_equal(c.issued, issued);
            assert_int_equal(c.reissued, reissued);
            assert_int_equal(c.expired, expired);
        }
        /* unknown ids */
        size_t li;
        int32_t la;
        assert_int_equal(grpo_lease_table_lookup(t, 0, &li, &la), GRPO_LEASE_UNKNOWN);
        assert_int_equal(grpo_lease_table_lookup(t, (uint64_t)n + 1, &li, &la), GRPO_LEASE_UNKNOWN);
        grpo_lease_table_destroy(t);
        free(ref), free(queue);
    }
}

/* Collects the tags of lapsed leases. */
static void
note_tag(void *ctx, size_t item, int32_t attempt, const char *worker, int64_t tag)
{
    int64_t *tags = ctx;
    (void)item, (void)attempt, (void)worker;
    tags[++tags[0]] = tag;
}

/* Backup leases at a run's tail, step by step. */
static void
test_lease_table_backup(void **state)
{
    (void)state;
    grpo_lease_table *t;
    size_t it[4], bi;
    uint64_t id[4], bid, bid2;
    int32_t at[4], ba;
    grpo_lease_counts c;
    assert_int_equal(grpo_lease_table_create(&t, 3, 10), GRPO_OK);
    assert_true(grpo_lease_table_issue(t, "A", 0.0, &it[0], &id[0], &at[0]));
    assert_true(grpo_lease_table_issue(t, "B", 1.0, &it[1], &id[1], &at[1]));
    /* an item is still pending: no backup yet */
    assert_false(grpo_lease_table_issue_backup(t, "D", 2.0, 0, &bi, &bid, &ba));
    assert_true(grpo_lease_table_issue(t, "C", 2.0, &it[2], &id[2], &at[2]));
    assert_false(grpo_lease_table_issue(t, "D", 2.0, &it[3], &id[3], &at[3]));
    /* nothing is old enough */
    assert_false(grpo_lease_table_issue_backup(t, "D", 2.5, 3.0, &bi, &bid, &ba));
    /* the oldest lease (A's) gets the backup; never the holder's own */
    assert_false(grpo_lease_table_issue_backup(t, "A", 3.0, 2.5, &bi, &bid, &ba));
    assert_true(grpo_lease_table_issue_backup(t, "D", 3.0, 0, &bi, &bid, &ba));
    assert_int_equal(bi, it[0]);
    assert_int_equal(ba, 1);
    assert_true(bid != id[0]);
    /* one backup per item: the next goes to the next oldest (B's) */
    assert_true(grpo_lease_table_issue_backup(t, "D", 3.0, 0, &bi, &bid2, &ba));
    assert_int_equal(bi, it[1]);
    /* both leases of item 0 stand: heartbeats from their holders only */
    assert_true(grpo_lease_table_heartbeat(t, id[0], "A", 4.0));
    assert_true(grpo_lease_table_heartbeat(t, bid, "D", 9.5));
    assert_false(grpo_lease_table_heartbeat(t, bid, "A", 4.0));
    size_t li;
    int32_t la;
    assert_int_equal(grpo_lease_table_lookup(t, bid, &li, &la), GRPO_LEASE_NEW);
    assert_int_equal(li, it[0]);
    assert_int_equal(la, 1);
    /* A's primary lapses (deadline 14) while D's backup (19.5) stands: D becomes the primary,
     * the item is not re-queued; B's backup (deadline 13) lapses alone, B keeps item 1 */
    assert_true(grpo_lease_table_heartbeat(t, id[1], "B", 6.0));  /* B: 16 */
    assert_true(grpo_lease_table_heartbeat(t, id[2], "C", 20.0)); /* C: 30 */
    grpo_lease_table_set_tag(t, id[0], 100);                      /* the tags follow their leases */
    grpo_lease_table_set_tag(t, bid, 101);
    grpo_lease_table_set_tag(t, bid2, 102);
    int64_t tags[8] = {0};
    assert_int_equal(grpo_lease_table_expire(t, 15.0, note_tag, tags), 2);
    assert_int_equal(tags[0], 2); /* B's backup lapsed first, then A's primary */
    assert_int_equal(tags[1], 102);
    assert_int_equal(tags[2], 100);
    grpo_lease_table_counts(t, &c);
    assert_int_equal(c.pending, 0);
    assert_int_equal(c.leased, 3);
    assert_int_equal(grpo_lease_table_attempt(t, it[0]), 1);
    assert_true(grpo_lease_table_heartbeat(t, bid, "D", 15.0));
    assert_false(grpo_lease_table_heartbeat(t, id[0], "A", 15.0));
    assert_false(grpo_lease_table_heartbeat(t, bid2, "D", 15.0));
    assert_true(grpo_lease_table_heartbeat(t, id[1], "B", 15.0));
    /* the first result completes the item; the other lease's result is a duplicate */
    grpo_lease_table_complete(t, it[0]);
    assert_int_equal(grpo_lease_table_lookup(t, id[0], &li, &la), GRPO_LEASE_DUPLICATE);
    /* a new backup on item 1 (held by B), then B's connection closes: D takes over */
    assert_true(grpo_lease_table_issue_backup(t, "D", 16.0, 0, &bi, &bid, &ba));
    assert_int_equal(bi, it[1]);
    assert_int_equal(ba, 2); /* attempts stay unique per item: 0 B, 1 lapsed backup, 2 */
    grpo_lease_table_set_tag(t, bid, 103);
    assert_int_equal(grpo_lease_table_expire_worker(t, "B", NULL, NULL), 1);
    assert_int_equal(grpo_lease_table_attempt(t, it[1]), 2);
    /* and when D goes too, item 1 is pending again and re-issued with the next attempt */
    tags[0] = 0;
    assert_int_equal(grpo_lease_table_expire_worker(t, "D", note_tag, tags), 1);
    assert_int_equal(tags[1], 103); /* the promoted backup kept its tag */
    assert_true(grpo_lease_table_issue(t, "E", 17.0, &it[3], &id[3], &at[3]));
    assert_int_equal(it[3], it[1]);
    assert_int_equal(at[3], 3);
    grpo_lease_table_counts(t, &c);
    assert_int_equal(c.backups, 3);
    assert_int_equal(c.issued, 7);
    grpo_lease_table_destroy(t);
}

int
main(void)
{
    rng_state = 0x9E3779B97F4A7C15ull ^ (uint64_t)time(NULL);
    printf("# seed %llu\n", (unsigned long long)rng_state);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_smallest_samples),
        cmocka_unit_test(test_truncation_and_corruption),
        cmocka_unit_test(test_hostile),
        cmocka_unit_test(test_turns_refused),
        cmocka_unit_test(test_tools_params_refused),
        cmocka_unit_test(test_model_params_refused),
        cmocka_unit_test(test_lease_table_model),
        cmocka_unit_test(test_lease_table_backup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
