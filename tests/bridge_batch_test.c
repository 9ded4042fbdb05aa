/* The batch codec: encode/decode round trips of random batches, the safetensors layout read back
 * field by field with an independent little parser here, and the decoder refusing every kind of
 * damage (dtype, shape, offsets, sizes, metadata, truncation) with a message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common_int.h"
#include "grpo/bridge.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t
rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

static grpo_batch *
random_batch(uint32_t flags, size_t n_seq)
{
    size_t lens[64], plens[64], T = 0;
    for (size_t i = 0; i < n_seq; i++) {
        plens[i] = rnd() % 6;
        lens[i] = plens[i] + rnd() % 9;
        T += lens[i];
    }
    grpo_batch *b = NULL;
    assert_int_equal(grpo_batch_create(&b, "run-\"q\"\\x", n_seq, T, flags), GRPO_OK);
    b->batch_id = rnd();
    b->step = rnd() % 1000;
    b->policy_version = rnd() % 7;
    assert_int_equal(grpo_batch_set_str(b, &b->sampling_json, "{\"temperature\":0.7,\"top_p\":1}"),
                     GRPO_OK);
    assert_int_equal(grpo_batch_set_str(b, &b->reward_config_hash, "ab12"), GRPO_OK);
    size_t t = 0;
    for (size_t i = 0; i < n_seq; i++) {
        b->seq_offsets[i] = (int64_t)t;
        b->prompt_lens[i] = (int32_t)plens[i];
        b->group_ids[i] = (int64_t)(i / 4);
        b->sample_idx[i] = (int32_t)(i % 4);
        b->advantages[i] = (float)((int)(rnd() % 2001) - 1000) / 500.0f;
        b->rewards[i] = (float)(rnd() % 2);
        if (b->policy_versions)
            b->policy_versions[i] = b->policy_version;
        for (size_t j = 0; j < lens[i]; j++, t++) {
            b->tokens[t] = (int32_t)(rnd() % 129280);
            b->loss_mask[t] = j >= plens[i] && rnd() % 8 != 0;
            b->logprobs[t] = j >= plens[i] ? -(float)(rnd() % 1000) / 100.0f : 0.0f;
            if (b->ref_logprobs)
                b->ref_logprobs[t] = b->logprobs[t] - 0.01f;
            if (b->token_advantages)
                b->token_advantages[t] = b->advantages[i] * 0.5f;
            if (b->tool_mask) { /* every third completion token an observation */
                b->tool_mask[t] = j >= plens[i] && j % 3 != 0;
                b->loss_mask[t] &= b->tool_mask[t];
            }
        }
    }
    b->seq_offsets[n_seq] = (int64_t)t;
    return b;
}

static void
assert_same(const grpo_batch *a, const grpo_batch *b)
{
    assert_string_equal(a->run_id, b->run_id);
    assert_string_equal(a->sampling_json, b->sampling_json);
    assert_string_equal(a->reward_config_hash, b->reward_config_hash);
    assert_int_equal(a->batch_id, b->batch_id);
    assert_int_equal(a->step, b->step);
    assert_int_equal(a->policy_version, b->policy_version);
    assert_int_equal(a->flags, b->flags);
    assert_int_equal(a->n_seq, b->n_seq);
    assert_int_equal(a->n_tok, b->n_tok);
    assert_memory_equal(a->seq_offsets, b->seq_offsets, (a->n_seq + 1) * 8);
    if (a->n_seq) {
        assert_memory_equal(a->prompt_lens, b->prompt_lens, a->n_seq * 4);
        assert_memory_equal(a->advantages, b->advantages, a->n_seq * 4);
        assert_memory_equal(a->rewards, b->rewards, a->n_seq * 4);
        assert_memory_equal(a->group_ids, b->group_ids, a->n_seq * 8);
        assert_memory_equal(a->sample_idx, b->sample_idx, a->n_seq * 4);
    }
    if (a->n_tok) {
        assert_memory_equal(a->tokens, b->tokens, a->n_tok * 4);
        assert_memory_equal(a->loss_mask, b->loss_mask, a->n_tok);
        assert_memory_equal(a->logprobs, b->logprobs, a->n_tok * 4);
        if (a->ref_logprobs)
            assert_memory_equal(a->ref_logprobs, b->ref_logprobs, a->n_tok * 4);
        if (a->token_advantages)
            assert_memory_equal(a->token_advantages, b->token_advantages, a->n_tok * 4);
        if (a->tool_mask)
            assert_memory_equal(a->tool_mask, b->tool_mask, a->n_tok);
    }
}

/* A multi-turn batch is version 4 and round-trips its tool_mask; the decoder and validate refuse
 * a loss mask set on an observation token and a tool_mask in an older version. */
static void
test_tool_mask(void **state)
{
    (void)state;
    grpo_batch *a = random_batch(GRPO_BATCH_HAS_TOOL_MASK | GRPO_BATCH_HAS_REF, 6), *b = NULL;
    void *bytes = NULL;
    size_t len = 0;
    assert_int_equal(grpo_batch_encode(a, &bytes, &len), GRPO_OK);
    assert_non_null(memmem(bytes, len, "\"schema_version\":\"4\"", 20));
    assert_int_equal(grpo_batch_decode(&b, bytes, len), GRPO_OK);
    assert_same(a, b);
    grpo_batch_destroy(b);
    char *v = memmem(bytes, len, "\"schema_version\":\"4\"", 20);
    v[18] = '3';
    assert_int_equal(grpo_batch_decode(&b, bytes, len), GRPO_EFORMAT);
    assert_non_null(strstr(grpo_error_last(), "needs schema_version 4"));
    free(bytes);
    size_t t = 0;
    while (a->tool_mask[t] != 0 || t < (size_t)a->prompt_lens[0])
        t++;
    a->loss_mask[t] = 1; /* an observation token trained on */
    assert_int_equal(grpo_batch_validate(a), GRPO_EINVAL);
    assert_non_null(strstr(grpo_error_last(), "tool_mask is 0"));
    grpo_batch_destroy(a);
}

static void
test_roundtrip(void **state)
{
    (void)state;
    for (int k = 0; k < 40; k++) {
        uint32_t flags = (uint32_t)k % 8;
        grpo_batch *a = random_batch(flags, (size_t)(k % 17) + 1), *b = NULL;
        void *bytes = NULL;
        size_t len = 0;
        assert_int_equal(grpo_batch_encode(a, &bytes, &len), GRPO_OK);
        assert_int_equal(grpo_batch_decode(&b, bytes, len), GRPO_OK);
        assert_same(a, b);
        int64_t id = -1, ver = -1;
        char run[64];
        assert_int_equal(grpo_batch_peek(bytes, len, &id, &ver, run, sizeof run), GRPO_OK);
        assert_int_equal(id, a->batch_id);
        assert_int_equal(ver, a->policy_version);
        assert_string_equal(run, a->run_id);
        grpo_batch_info info;
        assert_int_equal(grpo_batch_peek_info(bytes, len, &info), GRPO_OK);
        assert_int_equal(info.step, a->step);
        assert_int_equal(info.n_seq, a->n_seq);
        assert_int_equal(info.n_tok, a->n_tok);
        assert_int_equal(info.n_groups, (a->n_seq + 3) / 4); /* random_batch: 4 per group */
        assert_string_equal(info.run_id, a->run_id);
        free(bytes);
        grpo_batch_destroy(a);
        grpo_batch_destroy(b);
    }
}

/* The layout promised by schemas/batch_format.md, read with cJSON rather than our parser. */
static void
test_layout(void **state)
{
    (void)state;
    grpo_batch *a = random_batch(GRPO_BATCH_HAS_REF, 5);
    void *bytes = NULL;
    size_t len = 0;
    assert_int_equal(grpo_batch_encode(a, &bytes, &len), GRPO_OK);
    const uint8_t *p = bytes;
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++)
        hl |= (uint64_t)p[i] << (8 * i);
    assert_int_equal((8 + hl) % 8, 0); /* data section 8-aligned */
    cJSON *h = cJSON_ParseWithLength((const char *)p + 8, hl);
    assert_non_null(h);
    const cJSON *meta = cJSON_GetObjectItem(h, "__metadata__");
    assert_string_equal(cJSON_GetObjectItem(meta, "schema")->valuestring, "grpo.batch");
    assert_string_equal(cJSON_GetObjectItem(meta, "schema_version")->valuestring, "1");
    assert_string_equal(cJSON_GetObjectItem(meta, "run_id")->valuestring, a->run_id);
    const cJSON *tok = cJSON_GetObjectItem(h, "tokens");
    assert_string_equal(cJSON_GetObjectItem(tok, "dtype")->valuestring, "I32");
    size_t b0 =
        (size_t)cJSON_GetArrayItem(cJSON_GetObjectItem(tok, "data_offsets"), 0)->valuedouble;
    assert_memory_equal(p + 8 + hl + b0, a->tokens, a->n_tok * 4);
    const cJSON *off = cJSON_GetObjectItem(h, "seq_offsets");
    assert_string_equal(cJSON_GetObjectItem(off, "dtype")->valuestring, "I64");
    assert_int_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(off, "shape"), 0)->valueint, 6);
    assert_null(cJSON_GetObjectItem(h, "token_advantages"));
    assert_non_null(cJSON_GetObjectItem(h, "ref_logprobs"));
    cJSON_Delete(h);
    free(bytes);
    grpo_batch_destroy(a);
}

static void
test_validate_refuses(void **state)
{
    (void)state;
    grpo_batch *a = random_batch(0, 4);
    void *bytes = NULL;
    size_t len = 0;
    a->seq_offsets[2] = a->seq_offsets[1] - 1; /* decreasing */
    assert_int_equal(grpo_batch_encode(a, &bytes, &len), GRPO_EINVAL);
    assert_non_null(strstr(grpo_error_last(), "seq_offsets"));
    grpo_batch_destroy(a);

    a = random_batch(0, 4);
    a->prompt_lens[1] = (int32_t)(a->seq_offsets[2] - a->seq_offsets[1] + 1);
    assert_int_equal(grpo_batch_encode(a, &bytes, &len), GRPO_EINVAL);
    assert_non_null(strstr(grpo_error_last(), "prompt_lens"));
    grpo_batch_destroy(a);

    a = random_batch(0, 4);
    a->rewards[3] = NAN;
    assert_int_equal(grpo_batch_encode(a, &bytes, &len), GRPO_EINVAL);
    grpo_batch_destroy(a);

    a = random_batch(0, 4);
    a->prompt_lens[0] = 1;
    a->loss_mask[a->seq_offsets[0]] = 1; /* mask on a prompt token */
    assert_int_equal(grpo_batch_encode(a, &bytes, &len), GRPO_EINVAL);
    grpo_batch_destroy(a);

    a = random_batch(0, 2);
    assert_int_equal(grpo_batch_set_str(a, &a->run_id, ""), GRPO_OK);
    assert_int_equal(grpo_batch_encode(a, &bytes, &len), GRPO_EINVAL);
    grpo_batch_destroy(a);
}

/* The per-token checks run block by block: a fault anywhere (first token, either side of a block
 * boundary, the short last block) is found, and the message names exactly the token planted;
 * with two faults, the first. */
static void
test_validate_positions(void **state)
{
    (void)state;
    const size_t n = 3 * 1024 + 5, at[] = {0, 1023, 1024, 2047, 3071, 3072, n - 1};
    uint32_t fl = GRPO_BATCH_HAS_REF | GRPO_BATCH_HAS_TOOL_MASK | GRPO_BATCH_HAS_TOKEN_ADV;
    grpo_batch *b = NULL;
    assert_int_equal(grpo_batch_create(&b, "r", 1, n, fl), GRPO_OK);
    b->seq_offsets[1] = (int64_t)n;
    for (size_t t = 0; t < n; t++) {
        b->tokens[t] = (int32_t)t, b->tool_mask[t] = 1, b->loss_mask[t] = t % 2;
        b->logprobs[t] = b->ref_logprobs[t] = b->token_advantages[t] = -0.25f;
    }
    assert_int_equal(grpo_batch_validate(b), GRPO_OK);
    float *fv[] = {b->logprobs, b->ref_logprobs, b->token_advantages};
    const char *fname[] = {"logprobs", "ref_logprobs", "token_advantages"};
    for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
        size_t t = at[k];
        char want[64];
        snprintf(want, sizeof want, "token %zu has", t);
        for (int kind = 0; kind < 4; kind++) { /* negative id, masks above 1, loss on no tool */
            if (kind == 0)
                b->tokens[t] = -1;
            else if (kind == 1)
                b->loss_mask[t] = 2;
            else if (kind == 2)
                b->tool_mask[t] = 2;
            else
                b->tool_mask[t] = 0, b->loss_mask[t] = 1;
            assert_int_equal(grpo_batch_validate(b), GRPO_EINVAL);
            assert_non_null(strstr(grpo_error_last(), want));
            b->tokens[t] = (int32_t)t, b->tool_mask[t] = 1, b->loss_mask[t] = t % 2;
        }
        for (int f = 0; f < 3; f++)
            for (int v = 0; v < 3; v++) {
                fv[f][t] = v == 0 ? NAN : v == 1 ? INFINITY : -INFINITY;
                snprintf(want, sizeof want, "%s[%zu] is not finite", fname[f], t);
                assert_int_equal(grpo_batch_validate(b), GRPO_EINVAL);
                assert_non_null(strstr(grpo_error_last(), want));
                fv[f][t] = -0.25f;
            }
    }
    b->logprobs[2500] = NAN, b->logprobs[1500] = INFINITY; /* two in different blocks */
    assert_int_equal(grpo_batch_validate(b), GRPO_EINVAL);
    assert_non_null(strstr(grpo_error_last(), "logprobs[1500]"));
    b->logprobs[2500] = b->logprobs[1500] = -0.25f;
    b->logprobs[7] = 3.4e38f, b->logprobs[8] = -1e-45f; /* the largest and a subnormal: finite */
    assert_int_equal(grpo_batch_validate(b), GRPO_OK);
    grpo_batch_destroy(b);
}

/* Replaces the first occurrence of `from` in the header with `to` (same length). */
static int
patch(uint8_t *buf, size_t len, const char *from, const char *to)
{
    size_t n = strlen(from);
    assert_int_equal(n, strlen(to));
    for (size_t i = 8; i + n <= len; i++)
        if (memcmp(buf + i, from, n) == 0) {
            memcpy(buf + i, to, n);
            return 1;
        }
    return 0;
}

static void
expect_bad(const uint8_t *orig, size_t len, const char *from, const char *to, const char *word)
{
    uint8_t *c = malloc(len);
    memcpy(c, orig, len);
    assert_true(patch(c, len, from, to));
    grpo_batch *b = NULL;
    grpo_err err = grpo_batch_decode(&b, c, len);
    if (err == GRPO_OK || strstr(grpo_error_last(), word) == NULL) {
        fprintf(stderr, "patch %s -> %s: err %d msg \"%s\" (wanted \"%s\")\n", from, to, err,
                grpo_error_last(), word);
        fail();
    }
    assert_null(b);
    free(c);
}

static void
test_decode_refuses(void **state)
{
    (void)state;
    grpo_batch *a = random_batch(GRPO_BATCH_HAS_REF, 6);
    a->batch_id = 12345;
    uint8_t *bytes = NULL;
    size_t len = 0;
    assert_int_equal(grpo_batch_encode(a, (void **)&bytes, &len), GRPO_OK);
    expect_bad(bytes, len, "\"I32\"", "\"F32\"", "tokens");
    expect_bad(bytes, len, "\"grpo.batch\"", "\"grpo.batcX\"", "schema");
    expect_bad(bytes, len, "\"schema_version\":\"1\"", "\"schema_version\":\"5\"",
               "schema_version");
    expect_bad(bytes, len, "\"12345\"", "\"1234x\"", "batch_id");
    expect_bad(bytes, len, "\"tokens\"", "\"tokenz\"", "unknown tensor");
    expect_bad(bytes, len, "\"advantages\"", "\"sample_idx\"", "twice");
    /* a tensor offset moved: overlap or gap */
    char from[64], to[64];
    snprintf(from, sizeof from, "\"data_offsets\":[0,");
    snprintf(to, sizeof to, "\"data_offsets\":[8,");
    expect_bad(bytes, len, from, to, "seq_offsets");
    /* truncations at every length must fail cleanly */
    for (size_t n = 0; n < len; n += 1 + n / 7) {
        grpo_batch *b = NULL;
        assert_int_not_equal(grpo_batch_decode(&b, bytes, n), GRPO_OK);
        assert_null(b);
    }
    /* damage in the data: a seq_offsets entry made huge */
    grpo_batch *ok = NULL;
    assert_int_equal(grpo_batch_decode(&ok, bytes, len), GRPO_OK);
    grpo_batch_destroy(ok);
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++)
        hl |= (uint64_t)bytes[i] << (8 * i);
    bytes[8 + hl + 8 + 7] = 0x7f; /* seq_offsets[1] high byte (seq_offsets is the first tensor) */
    grpo_batch *b = NULL;
    assert_int_equal(grpo_batch_decode(&b, bytes, len), GRPO_EFORMAT);
    assert_non_null(strstr(grpo_error_last(), "seq_offsets"));
    free(bytes);
    grpo_batch_destroy(a);
}

static void
test_empty_batch(void **state)
{
    (void)state;
    grpo_batch *a = NULL, *b = NULL;
    assert_int_equal(grpo_batch_create(&a, "r", 0, 0, 0), GRPO_OK);
    void *bytes = NULL;
    size_t len = 0;
    assert_int_equal(grpo_batch_encode(a, &bytes, &len), GRPO_OK);
    assert_int_equal(grpo_batch_decode(&b, bytes, len), GRPO_OK);
    assert_int_equal(b->n_seq, 0);
    free(bytes);
    grpo_batch_destroy(a);
    grpo_batch_destroy(b);
    grpo_batch_destroy(NULL);
}

/* Batches encoded by the Python client (safetensors.numpy) decode to the values it was given. */
static double
jnum(const cJSON *a, size_t i)
{
    return cJSON_GetArrayItem(a, (int)i)->valuedouble;
}

static void
test_python_encoded(void **state)
{
    (void)state;
    char *text = NULL;
    size_t n = 0;
    assert_int_equal(
        grpo__read_file(GRPO_SOURCE_DIR "/tests/data/bridge/py_batches.json", 0, &text, &n),
        GRPO_OK);
    cJSON *all = cJSON_ParseWithLength(text, n), *c;
    free(text);
    int seen = 0;
    cJSON_ArrayForEach(c, all)
    {
        char path[4096];
        snprintf(path, sizeof path, GRPO_SOURCE_DIR "/tests/data/bridge/%s",
                 cJSON_GetObjectItem(c, "file")->valuestring);
        char *bytes = NULL;
        size_t len = 0;
        assert_int_equal(grpo__read_file(path, 0, &bytes, &len), GRPO_OK);
        grpo_batch *b = NULL;
        grpo_err err = grpo_batch_decode(&b, bytes, len);
        if (err != GRPO_OK)
            fprintf(stderr, "%s: %s\n", path, grpo_error_last());
        assert_int_equal(err, GRPO_OK);
        assert_string_equal(b->run_id, cJSON_GetObjectItem(c, "run_id")->valuestring);
        assert_int_equal(b->batch_id, cJSON_GetObjectItem(c, "batch_id")->valueint);
        assert_int_equal(b->policy_version, cJSON_GetObjectItem(c, "policy_version")->valueint);
        const cJSON *t = cJSON_GetObjectItem(c, "tensors");
        for (size_t i = 0; i < b->n_tok; i++) {
            assert_int_equal(b->tokens[i], (int32_t)jnum(cJSON_GetObjectItem(t, "tokens"), i));
            assert_int_equal(b->loss_mask[i],
                             (uint8_t)jnum(cJSON_GetObjectItem(t, "loss_mask"), i));
            assert_true(b->logprobs[i] == (float)jnum(cJSON_GetObjectItem(t, "logprobs"), i));
            if (b->ref_logprobs)
                assert_true(b->ref_logprobs[i] ==
                            (float)jnum(cJSON_GetObjectItem(t, "ref_logprobs"), i));
        }
        for (size_t i = 0; i <= b->n_seq; i++)
            assert_int_equal(b->seq_offsets[i],
                             (int64_t)jnum(cJSON_GetObjectItem(t, "seq_offsets"), i));
        for (size_t i = 0; i < b->n_seq; i++) {
            assert_true(b->advantages[i] == (float)jnum(cJSON_GetObjectItem(t, "advantages"), i));
            assert_int_equal(b->prompt_lens[i],
                             (int32_t)jnum(cJSON_GetObjectItem(t, "prompt_lens"), i));
            assert_int_equal(b->group_ids[i],
                             (int64_t)jnum(cJSON_GetObjectItem(t, "group_ids"), i));
        }
        assert_int_equal(!!b->token_advantages, !!cJSON_GetObjectItem(t, "token_advantages"));
        grpo_batch_destroy(b);
        free(bytes);
        seen++;
    }
    cJSON_Delete(all);
    assert_int_equal(seen, 2);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_validate_refuses), cmocka_unit_test(test_decode_refuses),
        cmocka_unit_test(test_empty_batch),      cmocka_unit_test(test_python_encoded),
        cmocka_unit_test(test_tool_mask),        cmocka_unit_test(test_validate_positions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
