/* Version-2 batches: MoE routes round trip (uint8 and int16 ids), a reader rebuilds
 * [sequence, token, layer, k] for every token from the documented layout, version-1 batches stay
 * version 1, and the decoder refuses ids out of range, repeated experts, prompt blocks that do
 * not follow the layout or link to the tokens, a wrong row count, and a version or dtype that
 * does not match. Version 3: logprobs_processed with and without routes round trips bit for bit,
 * and the decoder refuses it in an older version, its absence in version 3, a non-finite value
 * and a partial set of route tensors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpo/bridge.h"

enum { L = 3, K = 4 };

static uint32_t seed = 12345;
static uint32_t
rnd(void)
{
    seed = seed * 1103515245u + 12345u;
    return seed >> 8;
}

/* The route id of a (sequence, token, layer, k): distinct over k, a pure function of its place,
 * so a test can rebuild what any token must hold. */
static int
id_of(int experts, int group, int tok, int layer, int k, int sample, int in_prompt)
{
    int base = (group * 7 + tok * 3 + layer * 5 + (in_prompt ? 0 : sample * 11)) % experts;
    return (base + k * (experts / K)) % experts;
}

static void
put_id(grpo_batch *b, void *ids, size_t at, int v)
{
    if (b->route_bytes == 1) {
        ((uint8_t *)ids)[at] = (uint8_t)v;
    } else {
        int16_t s = (int16_t)v;
        memcpy((char *)ids + 2 * at, &s, 2);
    }
}

static int
get_id(const grpo_batch *b, const void *ids, size_t at)
{
    if (b->route_bytes == 1)
        return ((const uint8_t *)ids)[at];
    int16_t s;
    memcpy(&s, (const char *)ids + 2 * at, 2);
    return s;
}

/* n_groups groups of G samples; a group's prompt (length 2..6) is shared; completions 0..8. */
static grpo_batch *
routed_batch(int n_groups, int G, int experts)
{
    int plen[16], clen[16][8];
    size_t T = 0, np = 0, nc = 0;
    for (int g = 0; g < n_groups; g++) {
        plen[g] = 2 + (int)(rnd() % 5);
        np += (size_t)plen[g];
        for (int s = 0; s < G; s++) {
            clen[g][s] = (int)(rnd() % 9);
            T += (size_t)(plen[g] + clen[g][s]);
            nc += clen[g][s] > 1 ? (size_t)clen[g][s] - 1 : 0;
        }
    }
    grpo_batch *b = NULL;
    assert_int_equal(grpo_batch_create(&b, "r", (size_t)(n_groups * G), T, 0), GRPO_OK);
    assert_int_equal(grpo_batch_set_routes(b, experts, L, K, np, nc), GRPO_OK);
    size_t t = 0, pr = 0, cr = 0;
    for (int g = 0; g < n_groups; g++) {
        for (int s = 0; s < G; s++) {
            int i = g * G + s;
            b->seq_offsets[i] = (int64_t)t;
            b->prompt_lens[i] = plen[g];
            b->group_ids[i] = g;
            b->sample_idx[i] = s;
            b->route_prompt_offsets[i] = (int64_t)pr;
            for (int j = 0; j < plen[g]; j++)
                b->tokens[t++] = 100 * g + j;
            for (int j = 0; j < clen[g][s]; j++) {
                b->tokens[t] = 7 + j;
                b->loss_mask[t] = 1;
                b->logprobs[t++] = -0.5f;
            }
            for (int j = 0; j + 1 < clen[g][s]; j++, cr++)
                for (int l = 0; l < L; l++)
                    for (int k = 0; k < K; k++)
                        put_id(b, b->route_completion, (cr * L + l) * K + k,
                               id_of(experts, g, plen[g] + j, l, k, s, 0));
        }
        for (int j = 0; j < plen[g]; j++)
            for (int l = 0; l < L; l++)
                for (int k = 0; k < K; k++)
                    put_id(b, b->route_prompt, ((pr + j) * L + l) * K + k,
                           id_of(experts, g, j, l, k, 0, 1));
        pr += (size_t)plen[g];
    }
    b->seq_offsets[n_groups * G] = (int64_t)t;
    return b;
}

/* What schemas/batch_format.md tells a reader: token t of sequence i (t < its length - 1) has
 * its routes at route_prompt[route_prompt_offsets[i] + t] for a prompt token, else at the next
 * row of route_completion, rows taken in sequence order. */
static void
check_rebuild(const grpo_batch *b)
{
    size_t cr = 0;
    for (size_t i = 0; i < b->n_seq; i++) {
        int P = b->prompt_lens[i], n = (int)(b->seq_offsets[i + 1] - b->seq_offsets[i]);
        int g = (int)b->group_ids[i], s = b->sample_idx[i];
        for (int t = 0; t < n - (n > P ? 1 : 0); t++) {
            const void *ids = t < P ? b->route_prompt : b->route_completion;
            size_t row = t < P ? (size_t)b->route_prompt_offsets[i] + (size_t)t : cr++;
            for (int l = 0; l < L; l++)
                for (int k = 0; k < K; k++)
                    assert_int_equal(get_id(b, ids, (row * L + l) * K + k),
                                     id_of(b->route_experts, g, t, l, k, s, t < P));
        }
    }
    assert_int_equal(cr, b->n_route_completion);
}

static grpo_batch *
roundtrip(const grpo_batch *a, void **bytes, size_t *len)
{
    grpo_batch *b = NULL;
    assert_int_equal(grpo_batch_encode(a, bytes, len), GRPO_OK);
    if (grpo_batch_decode(&b, *bytes, *len) != GRPO_OK)
        fail_msg("%s", grpo_error_last());
    return b;
}

static void
test_routes_roundtrip(void **state)
{
    (void)state;
    int experts[] = {16, 256, 300, 1024};
    for (int e = 0; e < 4; e++) {
        grpo_batch *a = routed_batch(3, 4, experts[e]);
        check_rebuild(a);
        void *bytes = NULL;
        size_t len = 0;
        grpo_batch *b = roundtrip(a, &bytes, &len);
        assert_non_null(memmem(bytes, len, "\"schema_version\":\"2\"", 20));
        assert_int_equal(b->flags, GRPO_BATCH_HAS_ROUTES);
        assert_int_equal(b->route_bytes, experts[e] <= 256 ? 1 : 2);
        assert_int_equal(b->route_experts, experts[e]);
        assert_int_equal(b->route_layers, L);
        assert_int_equal(b->route_k, K);
        assert_int_equal(b->n_route_prompt, a->n_route_prompt);
        assert_int_equal(b->n_route_completion, a->n_route_completion);
        check_rebuild(b);
        /* the prompt is carried once per group, not once per sample */
        size_t per_sample = 0;
        for (size_t i = 0; i < b->n_seq; i++)
            per_sample += (size_t)b->prompt_lens[i];
        assert_int_equal(b->n_route_prompt * 4, per_sample);
        free(bytes);
        grpo_batch_destroy(a), grpo_batch_destroy(b);
    }
    /* without routes: version 1, as before */
    grpo_batch *a = routed_batch(2, 2, 16);
    a->flags &= ~GRPO_BATCH_HAS_ROUTES;
    void *bytes = NULL;
    size_t len = 0;
    grpo_batch *b = roundtrip(a, &bytes, &len);
    assert_non_null(memmem(bytes, len, "\"schema_version\":\"1\"", 20));
    assert_null(memmem(bytes, len, "route", 5));
    assert_int_equal(b->flags, 0);
    assert_null(b->route_prompt);
    free(bytes);
    grpo_batch_destroy(a), grpo_batch_destroy(b);
}

/* The k = 8, uint8 shape (DeepSeek-V3/R1) has its own vectorized test: every pair of positions
 * in a row holding the same expert is refused, at rows in the vector body and in the tail, and
 * so is an id at or past the expert count; intact ids pass. Encoding refuses the same, with
 * the same message (on AVX2 its copy of the ids checks them: validation before it leaves them
 * out), and an intact batch encodes to ids that decode unchanged. */
static void
refused_both(const grpo_batch *b, const char *want)
{
    assert_int_equal(grpo_batch_validate(b), GRPO_EINVAL);
    assert_non_null(strstr(grpo_error_last(), want));
    void *bytes = NULL;
    size_t len = 0;
    assert_int_equal(grpo_batch_encode(b, &bytes, &len), GRPO_EINVAL);
    assert_non_null(strstr(grpo_error_last(), want));
    assert_null(bytes);
}

static void
test_routes_k8_refused(void **state)
{
    (void)state;
    const int experts = 200, layers = 2, rows = 37; /* 74 id rows: 72 in blocks of 4, 2 after */
    grpo_batch *b = NULL;
    assert_int_equal(grpo_batch_create(&b, "r", 1, (size_t)rows + 1, 0), GRPO_OK);
    assert_int_equal(grpo_batch_set_routes(b, experts, layers, 8, 0, (size_t)rows), GRPO_OK);
    b->prompt_lens[0] = 0;
    b->seq_offsets[1] = rows + 1;
    uint8_t *ids = b->route_completion;
    for (int r = 0; r < rows * layers; r++)
        for (int k = 0; k < 8; k++)
            ids[8 * r + k] = (uint8_t)((r * 3) % (experts - 8) + k);
    assert_int_equal(grpo_batch_validate(b), GRPO_OK);
    int at_rows[] = {0, 5, 71, 72, 73};
    for (size_t a = 0; a < sizeof at_rows / sizeof at_rows[0]; a++)
        for (int i = 0; i < 8; i++)
            for (int j = i + 1; j < 8; j++) {
                uint8_t *row = ids + 8 * at_rows[a], keep = row[j];
                row[j] = row[i];
                refused_both(b, "twice");
                row[j] = keep;
            }
    for (size_t a = 0; a < sizeof at_rows / sizeof at_rows[0]; a++) {
        uint8_t *row = ids + 8 * at_rows[a] + 3, keep = *row;
        *row = (uint8_t)experts;
        refused_both(b, "outside [0, 200)");
        *row = keep;
    }
    assert_int_equal(grpo_batch_validate(b), GRPO_OK);
    void *bytes = NULL;
    size_t len = 0;
    grpo_batch *back = NULL;
    assert_int_equal(grpo_batch_encode(b, &bytes, &len), GRPO_OK);
    assert_int_equal(grpo_batch_decode(&back, bytes, len), GRPO_OK);
    assert_int_equal(back->n_route_completion, (size_t)rows);
    assert_memory_equal(back->route_completion, ids, (size_t)rows * layers * 8);
    grpo_batch_destroy(back);
    free(bytes);
    grpo_batch_destroy(b);
}

/* Each damage refused by validate (what encode and decode both run), with a message. */
static void
test_routes_refused(void **state)
{
    (void)state;
    for (int c = 0; c < 8; c++) {
        grpo_batch *b = routed_batch(3, 3, 16);
        const char *want = NULL;
        switch (c) {
        case 0: /* an id out of range */
            put_id(b, b->route_prompt, 5, 16);
            want = "outside [0, 16)";
            break;
        case 1: /* the same expert twice for one token and layer */
            put_id(b, b->route_prompt, 1, get_id(b, b->route_prompt, 0));
            want = "twice";
            break;
        case 2: /* sharing across groups */
            b->route_prompt_offsets[3] = b->route_prompt_offsets[2];
            want = "whose group or prompt differ";
            break;
        case 3: /* a prompt token changed under shared routes */
            b->tokens[b->seq_offsets[1]] += 1;
            want = "whose group or prompt differ";
            break;
        case 4: /* a gap between blocks */
            b->route_prompt_offsets[3] += 1;
            for (int i = 4; i < 9; i++)
                b->route_prompt_offsets[i] += 1;
            want = "expected";
            break;
        case 5: /* completion rows not linked to the tokens */
            b->n_route_completion -= 1;
            want = "route_completion has";
            break;
        case 6: /* int8-sized ids for 300 experts */
            b->route_experts = 300;
            want = "in 1-byte ids";
            break;
        case 7: /* fewer prompt rows than the blocks cover */
            b->n_route_prompt -= 1;
            want = "cover";
            break;
        }
        assert_int_equal(grpo_batch_validate(b), GRPO_EINVAL);
        if (strstr(grpo_error_last(), want) == NULL)
            fail_msg("case %d: \"%s\" lacks \"%s\"", c, grpo_error_last(), want);
        void *bytes = NULL;
        size_t len = 0;
        assert_int_equal(grpo_batch_encode(b, &bytes, &len), GRPO_EINVAL);
        grpo_batch_destroy(b);
    }
}

/* Bytes patched after encoding: the decoder refuses them. */
static void
test_routes_decode_refused(void **state)
{
    (void)state;
    grpo_batch *a = routed_batch(2, 3, 200), *b = NULL;
    void *bytes = NULL;
    size_t len = 0;
    assert_int_equal(grpo_batch_encode(a, &bytes, &len), GRPO_OK);
    struct {
        const char *from, *to, *msg;
    } cases[] = {
        {"\"schema_version\":\"2\"", "\"schema_version\":\"1\"", "needs schema_version 2"},
        {"\"schema_version\":\"2\"", "\"schema_version\":\"5\"", "reads 1 to 4"},
        {"\"schema_version\":\"2\"", "\"schema_version\":\"3\"",
         "\"logprobs_processed\" is missing"},
        {"\"route_experts\":\"200\"", "\"route_experts\":\"300\"", "must be I16"},
        {"\"route_experts\":\"200\"", "\"route_experts\":\"000\"", "outside [1, 32767]"},
        {"\"route_experts\":\"200\"", "\"route_experts\":\"100\"", "outside [0, 100)"},
        {"\"route_prompt_offsets\"", "\"route_prompt_offsetz\"", "unknown tensor"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char *copy = malloc(len);
        memcpy(copy, bytes, len);
        char *at = memmem(copy, len, cases[c].from, strlen(cases[c].from));
        assert_non_null(at);
        memcpy(at, cases[c].to, strlen(cases[c].to));
        grpo_err err = grpo_batch_decode(&b, copy, len);
        assert_true(err == GRPO_EFORMAT || err == GRPO_EVERSION);
        assert_null(b);
        if (strstr(grpo_error_last(), cases[c].msg) == NULL)
            fail_msg("case %zu: \"%s\" lacks \"%s\"", c, grpo_error_last(), cases[c].msg);
        free(copy);
    }
    free(bytes);
    grpo_batch_destroy(a);
}

/* Gives b a logprobs_processed tensor (version 3): 0 on prompt tokens, a value per completion
 * token that no other token of the batch has. */
static void
add_processed(grpo_batch *b)
{
    b->logprobs_processed = calloc(b->n_tok ? b->n_tok : 1, sizeof *b->logprobs_processed);
    assert_non_null(b->logprobs_processed);
    b->flags |= GRPO_BATCH_HAS_PROCESSED;
    for (size_t i = 0; i < b->n_seq; i++)
        for (int64_t t = b->seq_offsets[i] + b->prompt_lens[i]; t < b->seq_offsets[i + 1]; t++)
            b->logprobs_processed[t] = -0.001f * (float)(t + 1);
}

static void
test_processed_roundtrip(void **state)
{
    (void)state;
    for (int routes = 0; routes < 2; routes++) {
        grpo_batch *a = routed_batch(3, 4, routes ? 300 : 16);
        if (!routes)
            a->flags &= ~GRPO_BATCH_HAS_ROUTES;
        add_processed(a);
        void *bytes = NULL;
        size_t len = 0;
        grpo_batch *b = roundtrip(a, &bytes, &len);
        assert_non_null(memmem(bytes, len, "\"schema_version\":\"3\"", 20));
        assert_int_equal(memmem(bytes, len, "route_experts", 13) != NULL, routes);
        assert_int_equal(b->flags, GRPO_BATCH_HAS_PROCESSED | (routes ? GRPO_BATCH_HAS_ROUTES : 0));
        assert_memory_equal(b->logprobs_processed, a->logprobs_processed, a->n_tok * sizeof(float));
        assert_memory_equal(b->logprobs, a->logprobs, a->n_tok * sizeof(float));
        if (routes)
            check_rebuild(b);
        free(bytes);
        grpo_batch_destroy(b);
        /* a non-finite value: refused on the way out */
        a->logprobs_processed[a->seq_offsets[1] - 1] = NAN;
        assert_int_equal(grpo_batch_encode(a, &bytes, &len), GRPO_EINVAL);
        assert_non_null(strstr(grpo_error_last(), "logprobs_processed"));
        grpo_batch_destroy(a);
    }
}

/* The seeds numpy wrote (tools/make_route_seeds.py), an independent writer: raw logprobs -0.25,
 * processed -0.125 - (t % 5) / 64 on completion tokens, 0 on prompt tokens. */
static void
test_processed_seeds(void **state)
{
    (void)state;
    const char *names[] = {"v3_routes_u8", "v3_processed"};
    for (int n = 0; n < 2; n++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/fuzz/seeds/batch_decode_fuzz/%s.safetensors",
                 GRPO_SOURCE_DIR, names[n]);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        static char buf[1 << 16];
        size_t len = fread(buf, 1, sizeof buf, f);
        fclose(f);
        grpo_batch *b = NULL;
        if (grpo_batch_decode(&b, buf, len) != GRPO_OK)
            fail_msg("%s: %s", path, grpo_error_last());
        assert_int_equal(b->flags, GRPO_BATCH_HAS_PROCESSED | (n == 0 ? GRPO_BATCH_HAS_ROUTES : 0));
        for (size_t i = 0; i < b->n_seq; i++) {
            int64_t o = b->seq_offsets[i], p = o + b->prompt_lens[i];
            for (int64_t t = o; t < b->seq_offsets[i + 1]; t++) {
                float want = t < p ? 0.0f : (float)(-0.125 - (double)(t % 5) / 64);
                assert_true(b->logprobs_processed[t] == want);
                assert_true(b->logprobs[t] == (t < p ? 0.0f : -0.25f));
            }
        }
        grpo_batch_destroy(b);
    }
}

static void
test_processed_decode_refused(void **state)
{
    (void)state;
    grpo_batch *a = routed_batch(2, 3, 200), *b = NULL;
    add_processed(a);
    void *bytes = NULL;
    size_t len = 0;
    assert_int_equal(grpo_batch_encode(a, &bytes, &len), GRPO_OK);
    struct {
        const char *from, *to, *msg;
    } cases[] = {
        {"\"schema_version\":\"3\"", "\"schema_version\":\"2\"", "needs schema_version 3"},
        {"\"schema_version\":\"3\"", "\"schema_version\":\"1\"", "needs schema_version 3"},
        {"\"logprobs_processed\"", "\"logprobs_processeD\"", "unknown tensor"},
        {"\"route_completion\"", "\"route_completioN\"", "unknown tensor"},
        {"\"route_experts\":\"200\"", "\"route_experts\":\"100\"", "outside [0, 100)"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char *copy = malloc(len);
        memcpy(copy, bytes, len);
        char *at = memmem(copy, len, cases[c].from, strlen(cases[c].from));
        assert_non_null(at);
        memcpy(at, cases[c].to, strlen(cases[c].to));
        grpo_err err = grpo_batch_decode(&b, copy, len);
        assert_int_equal(err, GRPO_EFORMAT);
        assert_null(b);
        if (strstr(grpo_error_last(), cases[c].msg) == NULL)
            fail_msg("case %zu: \"%s\" lacks \"%s\"", c, grpo_error_last(), cases[c].msg);
        free(copy);
    }
    free(bytes);
    /* a version-3 batch with one route tensor dropped: the others are refused as incomplete */
    grpo_batch_destroy(a);
    a = routed_batch(2, 3, 16);
    add_processed(a);
    assert_int_equal(grpo_batch_encode(a, &bytes, &len), GRPO_OK);
    char *at = memmem(bytes, len, "\"route_experts\"", 15);
    assert_non_null(at);
    memcpy(at, "\"route_expertZ\"", 15);
    assert_int_equal(grpo_batch_decode(&b, bytes, len), GRPO_EFORMAT);
    assert_non_null(strstr(grpo_error_last(), "route_experts"));
    free(bytes);
    grpo_batch_destroy(a);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_routes_roundtrip),    cmocka_unit_test(test_routes_refused),
        cmocka_unit_test(test_routes_k8_refused),   cmocka_unit_test(test_routes_decode_refused),
        cmocka_unit_test(test_processed_roundtrip), cmocka_unit_test(test_processed_decode_refused),
        cmocka_unit_test(test_processed_seeds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
