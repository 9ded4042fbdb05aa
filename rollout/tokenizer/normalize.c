/* The NFC normalizer of Qwen's tokenizer.json files, through ICU. HF normalizes Python strings,
 * which are always valid Unicode; here only the valid UTF-8 runs of the input are normalized and
 * any invalid byte passes through unchanged (it is then encoded as its raw byte). */
#include "rollout/tokenizer/tok_int.h"

#include <stdlib.h>
#include <string.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

static grpo_err
icu_fail(UErrorCode e)
{
    return grpo__fail(GRPO_EINTERNAL, "tokenizer: NFC normalization failed: %s", u_errorName(e));
}

/* HF's NFC tables (unicode-normalization-alignments in tokenizers 0.22) predate Unicode 13 and lack
 * one canonical composition that ICU 72 (Unicode 15) makes: U+11935 U+11930 -> U+11938 (Dives
 * Akuru). Checked over the canonical decomposition of every code point (corpus_family.bin holds
 * them all): this is the only difference. U+11930 has combining class 0, so normalizing the text
 * before it and from it apart is exact. */
static bool
hf_no_compose(uint32_t prev, uint32_t cp)
{
    return prev == 0x11935 && cp == 0x11930;
}

/* ICU's preflighting: a call with no room says how much is needed (U_BUFFER_OVERFLOW_ERROR). */
static bool
preflight_ok(UErrorCode e)
{
    return e == U_BUFFER_OVERFLOW_ERROR || e == U_STRING_NOT_TERMINATED_WARNING || U_SUCCESS(e);
}

/* Appends the NFC form of the valid UTF-8 run s[0..n) to out: UTF-8 -> UTF-16 -> NFC -> UTF-8. */
static grpo_err
nfc_run(const UNormalizer2 *nf, const unsigned char *s, size_t n, grpo_buf *out)
{
    UChar *a = NULL, *b = NULL;
    int32_t alen = 0, blen = 0, need = 0;
    UErrorCode e = U_ZERO_ERROR;
    grpo_err err = GRPO_OK;
    u_strFromUTF8(NULL, 0, &alen, (const char *)s, (int32_t)n, &e);
    if (!preflight_ok(e))
        return icu_fail(e);
    if ((a = malloc(((size_t)alen + 1) * sizeof *a)) == NULL)
        return grpo__fail(GRPO_ENOMEM, "tokenizer: out of memory");
    e = U_ZERO_ERROR;
    u_strFromUTF8(a, alen + 1, NULL, (const char *)s, (int32_t)n, &e);
    if (U_SUCCESS(e)) {
        e = U_ZERO_ERROR;
        blen = unorm2_normalize(nf, a, alen, NULL, 0, &e);
    }
    if (preflight_ok(e) && (b = malloc(((size_t)blen + 1) * sizeof *b)) == NULL)
        err = grpo__fail(GRPO_ENOMEM, "tokenizer: out of memory");
    else if (preflight_ok(e)) {
        e = U_ZERO_ERROR;
        unorm2_normalize(nf, a, alen, b, blen + 1, &e);
    }
    if (err == GRPO_OK && U_SUCCESS(e))
        u_strToUTF8(NULL, 0, &need, b, blen, &e), e = preflight_ok(e) ? U_ZERO_ERROR : e;
    if (err == GRPO_OK && U_SUCCESS(e) &&
        (err = grpo__buf_reserve(out, (size_t)need + 1)) == GRPO_OK) {
        u_strToUTF8(out->data + out->len, need + 1, NULL, b, blen, &e);
        if (U_SUCCESS(e))
            out->len += (size_t)need;
    }
    if (err == GRPO_OK && U_FAILURE(e))
        err = icu_fail(e);
    free(a);
    free(b);
    return err;
}

grpo_err
grpo_tok__nfc(const unsigned char *s, size_t n, grpo_buf *out)
{
    UErrorCode e = U_ZERO_ERROR;
    const UNormalizer2 *nf = unorm2_getNFCInstance(&e);
    if (U_FAILURE(e))
        return icu_fail(e);
    out->len = 0;
    grpo_err err = GRPO_OK;
    size_t i = 0;
    while (i < n && err == GRPO_OK) {
        size_t j = i;
        bool ascii = true;
        uint32_t cp = 0, prev = 0;
        while (j < n) { /* the longest valid run from i (split where HF does not compose) */
            size_t k = grpo_tok__utf8_next(s, n, j, &cp);
            if (cp == UINT32_MAX || (j > i && hf_no_compose(prev, cp)))
                break;
            ascii = ascii && cp < 0x80;
            prev = cp;
            j += k;
        }
        if (j > i)
            err = ascii ? grpo__buf_append(out, s + i, j - i) : nfc_run(nf, s + i, j - i, out);
        if (err == GRPO_OK && j < n && cp == UINT32_MAX) /* one invalid byte, kept as it is */
            err = grpo__buf_append(out, s + j, 1), j++;
        i = j;
    }
    return err;
}
