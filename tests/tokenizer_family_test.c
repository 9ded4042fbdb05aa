/* rollout/tokenizer: the Qwen2 (Qwen2.5, Qwen3, R1-Distill-Qwen) and Llama 3 (3.0, 3.1,
 * R1-Distill-Llama) tokenizers of data/family-tokenizers/ against HF `tokenizers`: the count and
 * hash of the ids of every string of corpus.bin and corpus_family.bin (NFC cases, added tokens in
 * text, contractions, CR/LF runs), written by tools/make_family_fixtures.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tokenizer_fixtures.h"

static fx_file corpus, extra;

static int
setup(void **state)
{
    (void)state;
    if (fx_load(&corpus, "corpus.bin", 'C') != 0 || fx_load(&extra, "corpus_family.bin", 'C'))
        return -1;
    return 0;
}

static int
teardown(void **state)
{
    (void)state;
    fx_free(&corpus);
    fx_free(&extra);
    return 0;
}

static grpo_tokenizer *
load(const char *variant)
{
    grpo_tokenizer *tok = NULL;
    if (grpo_tokenizer_load(&tok, fx_family_dir(variant), NULL) != GRPO_OK)
        fprintf(stderr, "FATAL: %s (cmake unpacks data/family-tokenizers/tokenizers.tar.xz)\n",
                grpo_error_last());
    assert_non_null(tok);
    return tok;
}

static const fx_item *
text_of(size_t i)
{
    return i < corpus.n ? &corpus.items[i] : &extra.items[i - corpus.n];
}

/* Encodes every string and compares count and hash with HF's; returns the mismatches. */
static size_t
check_variant(const char *variant, const char *file, unsigned flags)
{
    grpo_tokenizer *tok = load(variant);
    fx_file h;
    assert_int_equal(fx_load(&h, file, 'H'), 0);
    assert_int_equal(h.n, corpus.n + extra.n);
    size_t bad = 0;
    for (size_t i = 0; i < h.n; i++) {
        const fx_item *src = text_of(i);
        int32_t *ids = NULL;
        size_t n = 0;
        assert_int_equal(grpo_tokenizer_encode(tok, src->text, src->len, flags, &ids, &n), GRPO_OK);
        if (n != h.items[i].n || fx_ids_hash(ids, n) != h.items[i].hash) {
            if (bad < 8)
                fx_show_diff(file, i, src->text, src->len, NULL, 0, ids, n);
            bad++;
        }
        free(ids);
    }
    if (bad)
        fprintf(stderr, "%s: %zu of %zu differ\n", file, bad, h.n);
    fx_free(&h);
    grpo_tokenizer_destroy(tok);
    return bad;
}

#define VARIANT_TEST(fn, variant, file, flags)                                                     \
    static void fn(void **state)                                                                   \
    {                                                                                              \
        (void)state;                                                                               \
        assert_int_equal(check_variant(variant, file, flags), 0);                                  \
    }
VARIANT_TEST(test_qwen25, "qwen2.5", "hash_qwen2.5.bin", GRPO_TOK_PARSE_SPECIAL)
VARIANT_TEST(test_qwen3, "qwen3", "hash_qwen3.bin", GRPO_TOK_PARSE_SPECIAL)
VARIANT_TEST(test_qwen3_plain, "qwen3", "hash_qwen3_plain.bin", 0)
VARIANT_TEST(test_r1_distill_qwen, "r1-distill-qwen", "hash_r1-distill-qwen.bin",
             GRPO_TOK_PARSE_SPECIAL)
VARIANT_TEST(test_llama3, "llama3", "hash_llama3.bin", GRPO_TOK_PARSE_SPECIAL)
VARIANT_TEST(test_llama31, "llama3.1", "hash_llama3.1.bin", GRPO_TOK_PARSE_SPECIAL)
VARIANT_TEST(test_llama31_plain, "llama3.1", "hash_llama3.1_plain.bin", 0)
VARIANT_TEST(test_r1_distill_llama, "r1-distill-llama", "hash_r1-distill-llama.bin",
             GRPO_TOK_PARSE_SPECIAL)

static void
encode_str(const grpo_tokenizer *tok, const char *s, int32_t **ids, size_t *n)
{
    assert_int_equal(grpo_tokenizer_encode(tok, s, strlen(s), GRPO_TOK_PARSE_SPECIAL, ids, n),
                     GRPO_OK);
}

/* Qwen's normalizer is NFC: a decomposed é encodes as the composed one (Llama 3 has none). An
 * invalid byte (which HF cannot be given) stays a raw byte and does not stop the normalization
 * around it. */
static void
test_nfc(void **state)
{
    (void)state;
    grpo_tokenizer *q = load("qwen2.5"), *l = load("llama3.1");
    int32_t *a, *b, *c, *d;
    size_t na, nb, nc, nd;
    encode_str(q, "caf\xc3\xa9 r\xc3\xa9sum\xc3\xa9", &a, &na);
    encode_str(q, "cafe\xcc\x81 re\xcc\x81sume\xcc\x81", &b, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na * sizeof *a);
    free(b);
    encode_str(l, "cafe\xcc\x81 re\xcc\x81sume\xcc\x81", &b, &nb);
    encode_str(l, "caf\xc3\xa9 r\xc3\xa9sum\xc3\xa9", &c, &nc);
    assert_true(nb != nc || memcmp(b, c, nb * sizeof *b) != 0);
    free(b), free(c);
    encode_str(q,
               "\xff"
               "cafe\xcc\x81",
               &c, &nc);
    encode_str(q, "caf\xc3\xa9", &d, &nd);
    size_t nff;
    int32_t *ff;
    encode_str(q, "\xff", &ff, &nff);
    assert_int_equal(nff, 1);
    assert_int_equal(nc, 1 + nd);
    assert_int_equal(c[0], ff[0]);
    assert_memory_equal(c + 1, d, nd * sizeof *d);
    free(a), free(c), free(d), free(ff);
    grpo_tokenizer_destroy(q);
    grpo_tokenizer_destroy(l);
}

/* BOS/EOS from each tokenizer_config.json, and Llama's lossless round trip. */
static void
test_specials(void **state)
{
    (void)state;
    static const struct {
        const char *v;
        int32_t bos, eos;
    } want[] = {{"qwen2.5", -1, 151645},
                {"qwen3", -1, 151645},
                {"r1-distill-qwen", 151646, 151643},
                {"llama3", 128000, 128009},
                {"llama3.1", 128000, 128009},
                {"r1-distill-llama", 128000, 128001}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        grpo_tokenizer *t = load(want[i].v);
        assert_int_equal(grpo_tokenizer_bos_id(t), want[i].bos);
        assert_int_equal(grpo_tokenizer_eos_id(t), want[i].eos);
        grpo_tokenizer_destroy(t);
    }
    grpo_tokenizer *l = load("llama3.1");
    for (size_t i = 0; i < corpus.n; i += 7) {
        int32_t *ids;
        size_t n, len;
        char *text;
        assert_int_equal(
            grpo_tokenizer_encode(l, corpus.items[i].text, corpus.items[i].len, 0, &ids, &n),
            GRPO_OK);
        assert_int_equal(grpo_tokenizer_decode(l, ids, n, 0, &text, &len), GRPO_OK);
        assert_int_equal(len, corpus.items[i].len);
        assert_memory_equal(text, corpus.items[i].text, len);
        free(ids), free(text);
    }
    grpo_tokenizer_destroy(l);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen25),        cmocka_unit_test(test_qwen3),
        cmocka_unit_test(test_qwen3_plain),   cmocka_unit_test(test_r1_distill_qwen),
        cmocka_unit_test(test_llama3),        cmocka_unit_test(test_llama31),
        cmocka_unit_test(test_llama31_plain), cmocka_unit_test(test_r1_distill_llama),
        cmocka_unit_test(test_nfc),           cmocka_unit_test(test_specials),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
