/* Decoding ids back to bytes (the ByteLevel decoder), optionally lossy like HF, and the
 * incremental decoder that only ever yields whole UTF-8 characters. */
#include "rollout/tokenizer/tok_int.h"

#include <stdlib.h>
#include <string.h>

static const char REPL[3] = {(char)0xEF, (char)0xBF, (char)0xBD}; /* U+FFFD */

static grpo_err
bad_id(int32_t id)
{
    return grpo__fail(GRPO_EINVAL, "tokenizer: id %d is negative", id);
}

/* Ids the tokenizer does not know (the model's embedding may be larger) decode to nothing, as in
 * HF decode; unused ids inside the range have length 0 already. */
static inline bool
skipped(const grpo_tokenizer *tok, int32_t id, unsigned flags)
{
    return id >= tok->n_ids ||
           ((flags & GRPO_TOK_SKIP_SPECIAL) && (tok->idflags[id] & IDF_SPECIAL) != 0);
}

/* Length of the valid UTF-8 character at s[0..n): > 0 complete, 0 incomplete but could still be
 * completed by more bytes, -1 invalid. */
static int
utf8_status(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t need;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        need = 2;
    else if (c >= 0xE0 && c <= 0xEF)
        need = 3;
    else if (c >= 0xF0 && c <= 0xF4)
        need = 4;
    else
        return -1;
    for (size_t i = 1; i < need; i++) {
        if (i >= n)
            return 0;
        unsigned lo = 0x80, hi = 0xBF;
        if (i == 1) { /* the second byte's range excludes overlongs and surrogates */
            if (c == 0xE0)
                lo = 0xA0;
            else if (c == 0xED)
                hi = 0x9F;
            else if (c == 0xF0)
                lo = 0x90;
            else if (c == 0xF4)
                hi = 0x8F;
        }
        if (s[i] < lo || s[i] > hi)
            return -1;
    }
    return (int)need;
}

/* Appends s[0..n) to b replacing every maximal invalid subpart by U+FFFD (the WHATWG/Rust
 * from_utf8_lossy rule). When hold is non-NULL, an incomplete tail is not emitted but its
 * length stored there. */
static grpo_err
append_lossy(grpo_buf *b, const unsigned char *s, size_t n, size_t *hold)
{
    size_t i = 0, run = 0;
    grpo_err err = GRPO_OK;
    while (i < n) {
        int k = utf8_status(s + i, n - i);
        if (k > 0) {
            i += (size_t)k;
            continue;
        }
        if (k == 0 && hold != NULL)
            break;
        if ((err = grpo__buf_append(b, s + run, i - run)) != GRPO_OK)
            return err;
        if ((err = grpo__buf_append(b, REPL, 3)) != GRPO_OK)
            return err;
        /* skip the maximal prefix of a valid sequence (at least one byte) */
        size_t skip = 1;
        while (i + skip < n && skip < 4 && utf8_status(s + i, skip + 1) == 0)
            skip++;
        if (k == 0) /* truncated at the very end */
            skip = n - i;
        i += skip;
        run = i;
    }
    if (hold != NULL)
        *hold = n - i;
    return grpo__buf_append(b, s + run, i - run);
}

static grpo_err
decode_raw(const grpo_tokenizer *tok, const int32_t *ids, size_t n, unsigned flags, grpo_buf *b)
{
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0)
            return bad_id(id);
        if (skipped(tok, id, flags))
            continue;
        grpo_err err = grpo__buf_append(b, tok->blob + tok->bytes_off[id], tok->bytes_len[id]);
        if (err != GRPO_OK)
            return err;
    }
    return GRPO_OK;
}

grpo_err
grpo_tokenizer_decode(const grpo_tokenizer *tok, const int32_t *ids, size_t n, unsigned flags,
                      char **text, size_t *len)
{
    grpo_buf raw = {0}, out = {0};
    *text = NULL;
    *len = 0;
    grpo_err err = grpo__buf_reserve(&raw, n * 4 + 1);
    if (err == GRPO_OK)
        err = decode_raw(tok, ids, n, flags, &raw);
    if (err == GRPO_OK && (flags & GRPO_TOK_LOSSY)) {
        if ((err = grpo__buf_reserve(&out, raw.len + 1)) == GRPO_OK)
            err = append_lossy(&out, (const unsigned char *)raw.data, raw.len, NULL);
        grpo__buf_fini(&raw);
        raw = out;
        out = (grpo_buf){0};
    }
    if (err == GRPO_OK)
        err = grpo__buf_append(&raw, "", 1); /* NUL, not counted */
    if (err != GRPO_OK) {
        grpo__buf_fini(&raw);
        grpo__buf_fini(&out);
        return err;
    }
    *text = raw.data;
    *len = raw.len - 1;
    return GRPO_OK;
}

/* ---- streaming ---- */

void
grpo_detok_init(grpo_detok *d, const grpo_tokenizer *tok, unsigned flags)
{
    memset(d, 0, sizeof *d);
    d->tok = tok;
    d->flags = flags;
}

grpo_err
grpo_detok_feed(grpo_detok *d, int32_t id, const char **text, size_t *len)
{
    const grpo_tokenizer *tok = d->tok;
    *text = "";
    *len = 0;
    if (id < 0)
        return bad_id(id);
    if (skipped(tok, id, d->flags))
        return GRPO_OK;
    size_t tl = tok->bytes_len[id], n = d->npend + tl;
    unsigned char stackbuf[256];
    unsigned char *in = n <= sizeof stackbuf ? stackbuf : malloc(n);
    if (in == NULL)
        return grpo__fail(GRPO_ENOMEM, "tokenizer: out of memory");
    memcpy(in, d->pend, d->npend);
    memcpy(in + d->npend, tok->blob + tok->bytes_off[id], tl);
    grpo_buf o = {d->buf, 0, d->cap};
    size_t hold = 0;
    grpo_err err = append_lossy(&o, in, n, &hold);
    d->buf = o.data;
    d->cap = o.cap;
    if (err == GRPO_OK) {
        memmove(d->pend, in + n - hold, hold);
        d->npend = hold;
        *text = d->buf != NULL ? d->buf : "";
        *len = o.len;
    }
    if (in != stackbuf)
        free(in);
    return err;
}

void
grpo_detok_fini(grpo_detok *d, const char **text, size_t *len)
{
    static const char repl_z[4] = {(char)0xEF, (char)0xBF, (char)0xBD, 0};
    if (text != NULL)
        *text = "";
    if (len != NULL)
        *len = 0;
    if (d == NULL)
        return;
    if (d->npend > 0 && text != NULL && len != NULL) {
        *text = repl_z; /* an incomplete tail is one maximal invalid subpart: one U+FFFD */
        *len = 3;
    }
    free(d->buf);
    memset(d, 0, sizeof *d);
}
