/* rollout/tokenizer: encode and decode against HF `tokenizers` on the fixture corpus (ids written
 * by tools/make_tokenizer_fixtures.py): the real DeepSeek-V3 tokenizer.json, its R1 variant, and a
 * small byte-level BPE trained with HF (lone ByteLevel pre-tokenizer, lstrip/rstrip tokens). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tokenizer_fixtures.h"
#include <cjson/cJSON.h>
#include <pthread.h>

static grpo_tokenizer *v3;
static fx_file corpus;

static int
setup(void **state)
{
    (void)state;
    const char *p = fx_v3_path();
    if (p == NULL)
        return -1;
    if (grpo_tokenizer_load(&v3, p, NULL) != GRPO_OK) {
        fprintf(stderr, "FATAL: %s\n", grpo_error_last());
        return -1;
    }
    return fx_load(&corpus, "corpus.bin", 'C');
}

static int
teardown(void **state)
{
    (void)state;
    grpo_tokenizer_destroy(v3);
    fx_free(&corpus);
    return 0;
}

/* Encodes every item of an encodings file and counts mismatches against the oracle. */
static size_t
check_encodings(const grpo_tokenizer *tok, const fx_file *enc, bool own_texts, unsigned flags,
                const char *what)
{
    size_t bad = 0;
    for (size_t i = 0; i < enc->n; i++) {
        const fx_item *want = &enc->items[i];
        const fx_item *src = own_texts ? want : &corpus.items[want->index];
        int32_t *ids = NULL;
        size_t n = 0;
        grpo_err err = grpo_tokenizer_encode(tok, src->text, src->len, flags, &ids, &n);
        assert_int_equal(err, GRPO_OK);
        if (n != want->n || memcmp(ids, want->ids, n * sizeof *ids) != 0) {
            if (bad < 8)
                fx_show_diff(what, i, src->text, src->len, want->ids, want->n, ids, n);
            bad++;
        }
        free(ids);
    }
    if (bad)
        fprintf(stderr, "%s: %zu of %zu differ\n", what, bad, enc->n);
    return bad;
}

static void
test_corpus_v3(void **state)
{
    (void)state;
    fx_file enc;
    assert_int_equal(fx_load(&enc, "encode_v3.bin", 'E'), 0);
    assert_int_equal(enc.n, corpus.n);
    assert_true(corpus.n >= 20000);
    assert_int_equal(check_encodings(v3, &enc, false, GRPO_TOK_PARSE_SPECIAL, "v3"), 0);
    fx_free(&enc);
}

static void
test_corpus_v3_special_as_text(void **state)
{
    (void)state;
    fx_file enc;
    assert_int_equal(fx_load(&enc, "encode_v3_plain.bin", 'E'), 0);
    assert_true(enc.n > 1000);
    assert_int_equal(check_encodings(v3, &enc, false, 0, "v3 plain"), 0);
    fx_free(&enc);
}

/* decode(encode(s)) == s, byte for byte, for every valid UTF-8 string of the corpus. */
static void
test_roundtrip(void **state)
{
    (void)state;
    size_t checked = 0;
    for (size_t i = 0; i < corpus.n; i++) {
        const fx_item *s = &corpus.items[i];
        if (!grpo__utf8_valid(s->text, s->len))
            continue;
        int32_t *ids;
        size_t n, len;
        char *text;
        assert_int_equal(
            grpo_tokenizer_encode(v3, s->text, s->len, GRPO_TOK_PARSE_SPECIAL, &ids, &n), GRPO_OK);
        assert_int_equal(grpo_tokenizer_decode(v3, ids, n, 0, &text, &len), GRPO_OK);
        assert_int_equal(len, s->len);
        assert_memory_equal(text, s->text, len);
        assert_int_equal(text[len], 0);
        free(text);
        free(ids);
        checked++;
    }
    assert_true(checked == corpus.n); /* the corpus is valid UTF-8 by construction */
}

static void
test_bos_and_ids(void **state)
{
    (void)state;
    assert_int_equal(grpo_tokenizer_bos_id(v3), 0);
    assert_int_equal(grpo_tokenizer_eos_id(v3), 1);
    assert_int_equal(grpo_tokenizer_vocab_size(v3), 128815);
    assert_int_equal(grpo_tokenizer_chat_family(v3), GRPO_CHAT_V3);
    assert_int_equal(grpo_tokenizer_token_id(v3, "<｜User｜>"), 128803);
    assert_int_equal(grpo_tokenizer_token_id(v3, "<｜Assistant｜>"), 128804);
    assert_int_equal(grpo_tokenizer_token_id(v3, "<think>"), -1);
    assert_true(grpo_tokenizer_is_special(v3, 0));
    assert_false(grpo_tokenizer_is_special(v3, 128803)); /* non-special in the V3 file */
    int32_t *ids;
    size_t n;
    assert_int_equal(grpo_tokenizer_encode(v3, "hi", 2, GRPO_TOK_ADD_BOS, &ids, &n), GRPO_OK);
    assert_true(n >= 2);
    assert_int_equal(ids[0], 0);
    free(ids);
    assert_int_equal(grpo_tokenizer_encode(v3, "", 0, 0, &ids, &n), GRPO_OK);
    assert_int_equal(n, 0);
    assert_non_null(ids);
    free(ids);
    /* ids the tokenizer does not know decode to nothing, as HF's decode (checked with tokenizers
     * 0.22: decode([33310, 128815, 129279, 33310]) == "hellohello"); negative ids fail */
    int32_t odd[4] = {33310, 128815, 129279, 33310};
    char *text;
    size_t len;
    assert_int_equal(grpo_tokenizer_decode(v3, odd, 4, 0, &text, &len), GRPO_OK);
    assert_string_equal(text, "hellohello");
    free(text);
    odd[1] = -3;
    assert_int_equal(grpo_tokenizer_decode(v3, odd, 4, 0, &text, &len), GRPO_EINVAL);
    assert_non_null(strstr(grpo_error_last(), "-3"));
}

static void
test_r1(void **state)
{
    (void)state;
    grpo_tokenizer *r1 = NULL;
    grpo_tokenizer_opts o = {0};
    o.r1 = 1;
    assert_int_equal(grpo_tokenizer_load(&r1, fx_v3_path(), &o), GRPO_OK);
    assert_int_equal(grpo_tokenizer_token_id(r1, "<think>"), GRPO_TOKENIZER_R1_THINK_ID);
    assert_int_equal(grpo_tokenizer_token_id(r1, "</think>"), GRPO_TOKENIZER_R1_THINK_END_ID);
    assert_int_equal(grpo_tokenizer_chat_family(r1), GRPO_CHAT_R1);
    fx_file enc;
    assert_int_equal(fx_load(&enc, "encode_r1.bin", 'T'), 0);
    assert_int_equal(check_encodings(r1, &enc, true, GRPO_TOK_PARSE_SPECIAL, "r1"), 0);
    /* the think tags survive decode with skip_special (as in R1's file they are not special) */
    int32_t ids[3] = {128798, 33310, 128799};
    char *text;
    size_t len;
    assert_int_equal(grpo_tokenizer_decode(r1, ids, 3, GRPO_TOK_SKIP_SPECIAL, &text, &len),
                     GRPO_OK);
    assert_string_equal(text, "<think>hello</think>");
    free(text);
    fx_free(&enc);
    grpo_tokenizer_destroy(r1);
}

/* HF decode() on random id sequences (split UTF-8 included): ours with GRPO_TOK_LOSSY, and the
 * streaming decoder, which must yield the same text in whole characters only. */
static void
test_decode_lossy_and_stream(void **state)
{
    (void)state;
    fx_file dec;
    assert_int_equal(fx_load(&dec, "decode_v3.bin", 'D'), 0);
    assert_true(dec.n >= 1000);
    size_t bad = 0;
    grpo_buf acc = {0};
    for (size_t i = 0; i < dec.n; i++) {
        const fx_item *it = &dec.items[i];
        unsigned fl = GRPO_TOK_LOSSY | (it->flag ? GRPO_TOK_SKIP_SPECIAL : 0);
        char *text;
        size_t len;
        assert_int_equal(grpo_tokenizer_decode(v3, it->ids, it->n, fl, &text, &len), GRPO_OK);
        if (len != it->len || memcmp(text, it->text, len) != 0)
            bad++;
        free(text);
        grpo_detok d;
        grpo_detok_init(&d, v3, it->flag ? GRPO_TOK_SKIP_SPECIAL : 0);
        acc.len = 0;
        for (size_t k = 0; k < it->n; k++) {
            const char *piece;
            size_t pl;
            assert_int_equal(grpo_detok_feed(&d, it->ids[k], &piece, &pl), GRPO_OK);
            assert_true(grpo__utf8_valid(piece, pl));
            assert_int_equal(grpo__buf_append(&acc, piece, pl), GRPO_OK);
        }
        const char *tail;
        size_t tl;
        grpo_detok_fini(&d, &tail, &tl);
        assert_int_equal(grpo__buf_append(&acc, tail, tl), GRPO_OK);
        if (acc.len != it->len || memcmp(acc.data, it->text, acc.len) != 0)
            bad += 1000000;
    }
    grpo__buf_fini(&acc);
    if (bad)
        fprintf(stderr, "decode: %zu lossy and %zu streaming mismatches\n", bad % 1000000,
                bad / 1000000);
    assert_int_equal(bad, 0);
    fx_free(&dec);
}

static grpo_tokenizer *
load_small(bool prefix)
{
    char path[4096];
    fx_path(path, sizeof path, "small/tokenizer.json");
    grpo_tokenizer *t = NULL;
    if (!prefix) {
        assert_int_equal(grpo_tokenizer_load(&t, path, NULL), GRPO_OK);
        return t;
    }
    char *json;
    size_t n;
    assert_int_equal(grpo__read_file(path, 0, &json, &n), GRPO_OK);
    cJSON *root = cJSON_Parse(json);
    assert_non_null(root);
    cJSON *pre = cJSON_GetObjectItem(root, "pre_tokenizer");
    cJSON_ReplaceItemInObject(pre, "add_prefix_space", cJSON_CreateTrue());
    char *text = cJSON_PrintUnformatted(root);
    assert_int_equal(grpo_tokenizer_load_json(&t, text, strlen(text), "small+prefix", NULL),
                     GRPO_OK);
    free(text);
    free(json);
    cJSON_Delete(root);
    return t;
}

static void
test_small_bytelevel(void **state)
{
    (void)state;
    for (int prefix = 0; prefix < 2; prefix++) {
        grpo_tokenizer *t = load_small(prefix);
        fx_file enc;
        assert_int_equal(
            fx_load(&enc, prefix ? "encode_small_prefix.bin" : "encode_small.bin", 'E'), 0);
        assert_true(enc.n >= 500);
        assert_int_equal(check_encodings(t, &enc, false, GRPO_TOK_PARSE_SPECIAL,
                                         prefix ? "small+prefix" : "small"),
                         0);
        assert_int_equal(grpo_tokenizer_chat_family(t), GRPO_CHAT_NONE);
        fx_free(&enc);
        grpo_tokenizer_destroy(t);
    }
}

/* Variants of the small tokenizer (Split String/Removed/invert, \\S, the DeepSeek sequence,
 * ignore_merges, ...): the patch from variants.json applied here, ids from HF on the same patch. */
static void
test_variants(void **state)
{
    (void)state;
    char path[4096], *json, *small;
    size_t n;
    fx_path(path, sizeof path, "variants.json");
    assert_int_equal(grpo__read_file(path, 0, &json, &n), GRPO_OK);
    fx_path(path, sizeof path, "small/tokenizer.json");
    assert_int_equal(grpo__read_file(path, 0, &small, &n), GRPO_OK);
    cJSON *vars = cJSON_Parse(json);
    assert_non_null(vars);
    size_t count = 0, bad = 0;
    cJSON *v;
    cJSON_ArrayForEach(v, vars)
    {
        cJSON *root = cJSON_Parse(small), *kv;
        cJSON_ArrayForEach(kv, cJSON_GetObjectItem(v, "patch"))
        {
            cJSON *val = cJSON_Duplicate(kv, 1);
            if (strncmp(kv->string, "model.", 6) == 0) {
                cJSON *model = cJSON_GetObjectItem(root, "model");
                cJSON_DeleteItemFromObject(model, kv->string + 6);
                cJSON_AddItemToObject(model, kv->string + 6, val);
            } else {
                cJSON_DeleteItemFromObject(root, kv->string);
                cJSON_AddItemToObject(root, kv->string, val);
            }
        }
        char *text = cJSON_PrintUnformatted(root);
        const char *name = cJSON_GetObjectItem(v, "name")->valuestring;
        grpo_tokenizer *t = NULL;
        if (grpo_tokenizer_load_json(&t, text, strlen(text), name, NULL) != GRPO_OK)
            fprintf(stderr, "%s: %s\n", name, grpo_error_last());
        assert_non_null(t);
        fx_file enc;
        assert_int_equal(fx_load(&enc, cJSON_GetObjectItem(v, "file")->valuestring, 'E'), 0);
        bad += check_encodings(t, &enc, false, GRPO_TOK_PARSE_SPECIAL, name);
        fx_free(&enc);
        grpo_tokenizer_destroy(t);
        free(text);
        cJSON_Delete(root);
        count++;
    }
    assert_true(count >= 6);
    assert_int_equal(bad, 0);
    cJSON_Delete(vars);
    free(json);
    free(small);
}

typedef struct worker {
    size_t begin, end, bad;
    const fx_file *enc;
} worker;

static void *
work(void *p)
{
    worker *w = p;
    for (size_t i = w->begin; i < w->end; i++) {
        const fx_item *want = &w->enc->items[i];
        const fx_item *src = &corpus.items[want->index];
        int32_t *ids;
        size_t n;
        if (grpo_tokenizer_encode(v3, src->text, src->len, GRPO_TOK_PARSE_SPECIAL, &ids, &n) !=
                GRPO_OK ||
            n != want->n || memcmp(ids, want->ids, n * sizeof *ids) != 0)
            w->bad++;
        else
            free(ids);
    }
    return NULL;
}

/* One tokenizer shared by four threads gives the same ids (the cache pool is per call). */
static void
test_threads(void **state)
{
    (void)state;
    fx_file enc;
    assert_int_equal(fx_load(&enc, "encode_v3.bin", 'E'), 0);
    enum { T = 4 };
    pthread_t th[T];
    worker w[T];
    size_t n = enc.n < 8000 ? enc.n : 8000;
    for (int i = 0; i < T; i++) {
        w[i] = (worker){n * i / T, n * (i + 1) / T, 0, &enc};
        assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
    }
    size_t bad = 0;
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        bad += w[i].bad;
    }
    assert_int_equal(bad, 0);
    fx_free(&enc);
}

/* Invalid UTF-8 is encoded as its raw bytes and decodes back exactly. */
static void
test_invalid_utf8(void **state)
{
    (void)state;
    const char s[] = "ok \xff\xfe \xe4\xbd abc \xc0\x80 <\xef\xbd\x9c";
    int32_t *ids;
    size_t n, len;
    char *text;
    assert_int_equal(grpo_tokenizer_encode(v3, s, sizeof s - 1, GRPO_TOK_PARSE_SPECIAL, &ids, &n),
                     GRPO_OK);
    assert_int_equal(grpo_tokenizer_decode(v3, ids, n, 0, &text, &len), GRPO_OK);
    assert_int_equal(len, sizeof s - 1);
    assert_memory_equal(text, s, len);
    free(text);
    assert_int_equal(grpo_tokenizer_decode(v3, ids, n, GRPO_TOK_LOSSY, &text, &len), GRPO_OK);
    assert_true(grpo__utf8_valid(text, len));
    assert_non_null(strstr(text, "\xef\xbf\xbd"));
    free(text);
    free(ids);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_corpus_v3),
        cmocka_unit_test(test_corpus_v3_special_as_text),
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_bos_and_ids),
        cmocka_unit_test(test_r1),
        cmocka_unit_test(test_decode_lossy_and_stream),
        cmocka_unit_test(test_small_bytelevel),
        cmocka_unit_test(test_variants),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_invalid_utf8),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
