/* Encoding, in HF tokenizers' order: split out added tokens (non-normalized ones on the whole
 * text, then normalized ones on what is left; leftmost-longest, lstrip/rstrip), run each
 * pre-tokenizer stage over each remaining piece (PCRE2 regex splits, then ByteLevel), then BPE. */
#include "rollout/tokenizer/tok_int.h"

#include <stdlib.h>
#include <string.h>

typedef struct enc {
    const grpo_tokenizer *tok;
    tok_scratch *s;
    const unsigned char *text;
    bool parse_special;
    tok_ivec *out;
} enc;

static grpo_err pretok(enc *e, int k, const unsigned char *p, size_t n);

static grpo_err
regex_fail(int rc)
{
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof msg);
    return grpo__fail(GRPO_EINTERNAL, "tokenizer: pre-tokenizer regex failed: %s", (char *)msg);
}

/* Feeds each piece of p[0..n) split by stage st's regex to stage k + 1. */
static grpo_err
split_regex(enc *e, const tok_stage *st, int k, const unsigned char *p, size_t n)
{
    tok_scratch *s = e->s;
    size_t off = 0, last = 0;
    grpo_err err = GRPO_OK;
    bool keep_gaps = st->behavior == SPLIT_ISOLATED || !st->invert;
    bool keep_matches = st->behavior == SPLIT_ISOLATED || st->invert;
    while (off <= n) {
        int rc = st->jit ? pcre2_jit_match(st->re, p, n, off, 0, s->md, s->mctx)
                         : pcre2_match(st->re, p, n, off, 0, s->md, s->mctx);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0)
            return regex_fail(rc);
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
        size_t ms = ov[0], me = ov[1];
        if (ms > last && keep_gaps && (err = pretok(e, k + 1, p + last, ms - last)) != GRPO_OK)
            return err;
        if (me > ms && keep_matches && (err = pretok(e, k + 1, p + ms, me - ms)) != GRPO_OK)
            return err;
        last = me;
        if (me == ms) { /* empty match: step over one character, as Oniguruma's find_iter */
            if (me >= n)
                break;
            uint32_t cp;
            off = me + grpo_tok__utf8_next(p, n, me, &cp);
        } else {
            off = me;
        }
    }
    if (n > last && keep_gaps)
        err = pretok(e, k + 1, p + last, n - last);
    return err;
}

static grpo_err
bytelevel(enc *e, const tok_stage *st, int k, const unsigned char *p, size_t n)
{
    tok_scratch *s = e->s;
    if (st->prefix_space && p[0] != ' ') {
        if (n + 1 > s->tmp_cap) {
            size_t cap = (n + 1) * 2;
            char *t = realloc(s->tmp, cap);
            if (t == NULL)
                return grpo__fail(GRPO_ENOMEM, "tokenizer: out of memory");
            s->tmp = t;
            s->tmp_cap = cap;
        }
        s->tmp[0] = ' ';
        memcpy(s->tmp + 1, p, n);
        p = (const unsigned char *)s->tmp;
        n++;
    }
    if (st->re == NULL)
        return pretok(e, k + 1, p, n);
    return split_regex(e, st, k, p, n);
}

static grpo_err
pretok(enc *e, int k, const unsigned char *p, size_t n)
{
    if (n == 0)
        return GRPO_OK;
    if (k == e->tok->n_stages)
        return grpo_tok__bpe(e->tok, e->s, p, n, e->out);
    const tok_stage *st = &e->tok->stages[k];
    if (st->kind == STAGE_BYTELEVEL)
        return bytelevel(e, st, k, p, n);
    return split_regex(e, st, k, p, n);
}

/* ---- added tokens ---- */

/* Longest token of trie t starting at text[i], not past end: returns its index or -1. */
static int32_t
trie_longest(const tok_trie *t, const unsigned char *text, size_t i, size_t end, size_t *mend)
{
    int32_t cur = t->root_child[text[i]], best = -1;
    size_t j = i + 1;
    while (cur >= 0) {
        if (t->nodes[cur].token >= 0) {
            best = t->nodes[cur].token;
            *mend = j;
        }
        if (j >= end)
            break;
        int32_t c = t->nodes[cur].child;
        while (c >= 0 && t->nodes[c].byte != text[j])
            c = t->nodes[c].sibling;
        cur = c;
        j++;
    }
    return best;
}

/* Start of the whitespace run that ends at text[j] (not before lo), by whole characters. */
static size_t
strip_left(const unsigned char *text, size_t lo, size_t j)
{
    while (j > lo) {
        size_t b = j - 1;
        while (b > lo && j - b < 4 && (text[b] & 0xC0) == 0x80)
            b--;
        uint32_t cp;
        if (grpo_tok__utf8_next(text, j, b, &cp) != j - b || !grpo_tok__is_whitespace(cp))
            break;
        j = b;
    }
    return j;
}

static size_t
strip_right(const unsigned char *text, size_t j, size_t hi)
{
    while (j < hi) {
        uint32_t cp;
        size_t k = grpo_tok__utf8_next(text, hi, j, &cp);
        if (!grpo_tok__is_whitespace(cp))
            break;
        j += k;
    }
    return j;
}

static grpo_err split_added(enc *e, int level, size_t start, size_t end);

/* A piece between non-normalized added tokens is normalized (NFC for Qwen) before the normalized
 * added tokens are looked for in it, as in HF. */
static grpo_err
normalized_piece(enc *e, size_t a, size_t b)
{
    grpo_buf nb = {0};
    grpo_err err = grpo_tok__nfc(e->text + a, b - a, &nb);
    if (err == GRPO_OK && nb.len > 0) {
        enc sub = *e;
        sub.text = (const unsigned char *)nb.data;
        err = split_added(&sub, 1, 0, nb.len);
    }
    grpo__buf_fini(&nb);
    return err;
}

static grpo_err
gap(enc *e, int level, size_t a, size_t b)
{
    if (level == 0)
        return e->tok->nfc ? normalized_piece(e, a, b) : split_added(e, 1, a, b);
    return pretok(e, 0, e->text + a, b - a);
}

/* Level 0 extracts the non-normalized added tokens from [start, end), level 1 the normalized
 * ones from each remaining piece (after the normalizer, when there is one). */
static grpo_err
split_added(enc *e, int level, size_t start, size_t end)
{
    const tok_trie *t = level == 0 ? &e->tok->trie_raw : &e->tok->trie_norm;
    if (t->nodes == NULL || t->empty)
        return gap(e, level, start, end);
    const unsigned char *text = e->text;
    size_t off = start, i = start;
    grpo_err err;
    while (i < end) {
        if (t->root_child[text[i]] < 0) {
            i++;
            continue;
        }
        size_t me = 0;
        int32_t ti = trie_longest(t, text, i, end, &me);
        if (ti < 0) {
            i++;
            continue;
        }
        size_t ms = i;
        i = me; /* the next search starts after this match, even when it is skipped */
        const tok_added *a = &e->tok->added[ti];
        if (a->special && !e->parse_special)
            continue;
        if (a->lstrip) {
            ms = strip_left(text, start, ms);
            if (ms < off)
                ms = off;
        }
        if (a->rstrip)
            me = strip_right(text, me, end);
        if (ms > off && (err = gap(e, level, off, ms)) != GRPO_OK)
            return err;
        if ((err = grpo_tok__ivec_push(e->out, a->id)) != GRPO_OK)
            return err;
        off = me;
        if (i < off)
            i = off;
    }
    return off < end ? gap(e, level, off, end) : GRPO_OK;
}

static grpo_err
encode_into(const grpo_tokenizer *tok, const char *text, size_t len, unsigned flags, tok_ivec *out)
{
    tok_scratch *s = NULL;
    int slot = -1;
    grpo_err err = grpo_tok__scratch_get(tok, &s, &slot);
    if (err != GRPO_OK)
        return err;
    enc e = {tok, s, (const unsigned char *)text, (flags & GRPO_TOK_PARSE_SPECIAL) != 0, out};
    if ((flags & GRPO_TOK_ADD_BOS) && tok->bos >= 0)
        err = grpo_tok__ivec_push(out, tok->bos);
    if (err == GRPO_OK && len > 0)
        err = split_added(&e, 0, 0, len);
    grpo_tok__scratch_put(tok, s, slot);
    return err;
}

grpo_err
grpo_tokenizer_encode(const grpo_tokenizer *tok, const char *text, size_t len, unsigned flags,
                      int32_t **ids, size_t *n)
{
    tok_ivec out = {0};
    *ids = NULL;
    *n = 0;
    if (text == NULL && len > 0)
        return grpo__fail(GRPO_EINVAL, "tokenizer: encode: text is NULL");
    grpo_err err = grpo_tok__ivec_reserve(&out, len / 3 + 8);
    if (err == GRPO_OK)
        err = encode_into(tok, text, len, flags, &out);
    if (err != GRPO_OK) {
        free(out.v);
        return err;
    }
    *ids = out.v;
    *n = out.n;
    return GRPO_OK;
}
