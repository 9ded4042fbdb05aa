/* Byte-pair merging of one pre-token with merge ranks (a min-heap keyed by (rank, position) over a
 * linked list of symbols, as HF tokenizers does: O(n log n), no rescans), a per-scratch cache of
 * results for repeated pieces, and the pool of scratch spaces that makes encode thread-safe. */
#include "rollout/tokenizer/tok_int.h"

#include <stdlib.h>
#include <string.h>

#define CACHE_MAX_KEY 128
#define CACHE_BYTES_PER_SLOT 24

/* ---- scratch pool ---- */

static grpo_err
scratch_new(const grpo_tokenizer *tok, tok_scratch **out)
{
    tok_scratch *s = calloc(1, sizeof *s);
    if (s == NULL)
        return grpo__fail(GRPO_ENOMEM, "tokenizer: out of memory");
    s->md = pcre2_match_data_create(1, NULL);
    s->mctx = pcre2_match_context_create(NULL);
    s->jstack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
    if (s->md == NULL || s->mctx == NULL || s->jstack == NULL)
        goto oom;
    pcre2_jit_stack_assign(s->mctx, NULL, s->jstack);
    if (tok->cache_slots > 0) {
        size_t slots = 16;
        while (slots < (size_t)tok->cache_slots)
            slots <<= 1;
        s->cslots = calloc(slots, sizeof *s->cslots);
        s->ccap = slots * CACHE_BYTES_PER_SLOT;
        s->cdata = malloc(s->ccap);
        if (s->cslots == NULL || s->cdata == NULL)
            goto oom;
        s->cmask = slots - 1;
    }
    *out = s;
    return GRPO_OK;
oom:
    grpo_tok__scratch_free(s);
    return grpo__fail(GRPO_ENOMEM, "tokenizer: out of memory");
}

void
grpo_tok__scratch_free(tok_scratch *s)
{
    if (s == NULL)
        return;
    pcre2_match_data_free(s->md);
    pcre2_match_context_free(s->mctx);
    pcre2_jit_stack_free(s->jstack);
    free(s->segs);
    free(s->tmp);
    free(s->sym_id);
    free(s->sym_prev);
    free(s->sym_next);
    free(s->heap);
    free(s->cslots);
    free(s->cdata);
    free(s);
}

grpo_err
grpo_tok__scratch_get(const grpo_tokenizer *ctok, tok_scratch **out, int *slot)
{
    grpo_tokenizer *tok = (grpo_tokenizer *)ctok; /* the pool is the only mutable part */
    for (int i = 0; i < TOK_POOL; i++) {
        int expect = 0;
        if (atomic_load_explicit(&tok->busy[i], memory_order_relaxed) != 0 ||
            !atomic_compare_exchange_strong_explicit(&tok->busy[i], &expect, 1,
                                                     memory_order_acquire, memory_order_relaxed))
            continue;
        if (tok->pool[i] == NULL) {
            grpo_err err = scratch_new(tok, &tok->pool[i]);
            if (err != GRPO_OK) {
                atomic_store_explicit(&tok->busy[i], 0, memory_order_release);
                return err;
            }
        }
        *out = tok->pool[i];
        *slot = i;
        return GRPO_OK;
    }
    *slot = -1;
    return scratch_new(tok, out);
}

void
grpo_tok__scratch_put(const grpo_tokenizer *ctok, tok_scratch *s, int slot)
{
    grpo_tokenizer *tok = (grpo_tokenizer *)ctok;
    if (slot < 0) {
        grpo_tok__scratch_free(s);
        return;
    }
    atomic_store_explicit(&tok->busy[slot], 0, memory_order_release);
}

/* ---- cache ---- */

static bool
cache_get(tok_scratch *s, const unsigned char *p, size_t n, uint64_t h, tok_ivec *out,
          grpo_err *err)
{
    for (size_t i = h & s->cmask;; i = (i + 1) & s->cmask) {
        const tok_cache_slot *c = &s->cslots[i];
        if (c->hash == 0)
            return false;
        if (c->hash != h || c->klen != n || memcmp(s->cdata + c->off, p, n) != 0)
            continue;
        if ((*err = grpo_tok__ivec_reserve(out, c->nids)) != GRPO_OK)
            return true;
        memcpy(out->v + out->n, s->cdata + c->off + ((n + 3) & ~(size_t)3),
               c->nids * sizeof(int32_t));
        out->n += c->nids;
        return true;
    }
}

static void
cache_put(tok_scratch *s, const unsigned char *p, size_t n, uint64_t h, const int32_t *ids,
          size_t nids)
{
    size_t need = ((n + 3) & ~(size_t)3) + nids * sizeof(int32_t);
    if (nids > UINT16_MAX || need > s->ccap)
        return;
    if (s->clen + need > s->ccap || (s->ccount + 1) * 4 > (s->cmask + 1) * 3) {
        memset(s->cslots, 0, (s->cmask + 1) * sizeof *s->cslots); /* full: start over */
        s->clen = s->ccount = 0;
    }
    size_t i = h & s->cmask;
    while (s->cslots[i].hash != 0)
        i = (i + 1) & s->cmask;
    tok_cache_slot *c = &s->cslots[i];
    c->hash = h;
    c->off = (uint32_t)s->clen;
    c->klen = (uint16_t)n;
    c->nids = (uint16_t)nids;
    memcpy(s->cdata + s->clen, p, n);
    memcpy(s->cdata + s->clen + ((n + 3) & ~(size_t)3), ids, nids * sizeof(int32_t));
    s->clen += need;
    s->ccount++;
}

/* ---- merging ---- */

static inline const tok_merge *
merge_find(const grpo_tokenizer *tok, int32_t a, int32_t b)
{
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    size_t i = grpo_tok__hash_u64(key) & tok->merges_mask;
    for (;; i = (i + 1) & tok->merges_mask) {
        const tok_merge *m = &tok->merges[i];
        if (m->key == key)
            return m;
        if (m->key == UINT64_MAX)
            return NULL;
    }
}

static void
heap_push(uint64_t *h, size_t *n, uint64_t v)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v)
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static uint64_t
heap_pop(uint64_t *h, size_t *n)
{
    uint64_t top = h[0], v = h[--(*n)];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m)
            break;
        if (c + 1 < m && h[c + 1] < h[c])
            c++;
        if (v <= h[c])
            break;
        h[i] = h[c];
        i = c;
    }
    if (m > 0)
        h[i] = v;
    return top;
}

static grpo_err
reserve_work(tok_scratch *s, size_t n)
{
    if (n > s->sym_cap) {
        size_t cap = s->sym_cap ? s->sym_cap : 64;
        while (cap < n)
            cap *= 2;
        int32_t *a = realloc(s->sym_id, cap * sizeof *a);
        if (a != NULL)
            s->sym_id = a;
        int32_t *b = realloc(s->sym_prev, cap * sizeof *b);
        if (b != NULL)
            s->sym_prev = b;
        int32_t *c = realloc(s->sym_next, cap * sizeof *c);
        if (c != NULL)
            s->sym_next = c;
        uint64_t *h = realloc(s->heap, 3 * cap * sizeof *h);
        if (h != NULL)
            s->heap = h;
        if (a == NULL || b == NULL || c == NULL || h == NULL)
            return grpo__fail(GRPO_ENOMEM, "tokenizer: out of memory");
        s->sym_cap = cap;
    }
    return GRPO_OK;
}

static inline void
push_pair(const grpo_tokenizer *tok, tok_scratch *s, size_t *nh, int32_t pos)
{
    int32_t nx = s->sym_next[pos];
    if (nx < 0)
        return;
    const tok_merge *m = merge_find(tok, s->sym_id[pos], s->sym_id[nx]);
    if (m != NULL)
        heap_push(s->heap, nh, (uint64_t)m->rank << 32 | (uint32_t)pos);
}

/* Words of up to SMALL_WORD bytes: symbols in a plain array, the lowest-rank (then leftmost)
 * pair found by a scan. Same order of merges as the heap, cheaper when n is small. */
#define SMALL_WORD 32

static grpo_err
merge_small(const grpo_tokenizer *tok, const unsigned char *p, size_t n, tok_ivec *out)
{
    int32_t id[SMALL_WORD], nid[SMALL_WORD];
    uint32_t rank[SMALL_WORD];
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (tok->byte_id[p[i]] >= 0)
            id[m++] = tok->byte_id[p[i]];
    for (size_t i = 0; i + 1 < m; i++) {
        const tok_merge *mg = merge_find(tok, id[i], id[i + 1]);
        rank[i] = mg ? mg->rank : UINT32_MAX;
        nid[i] = mg ? mg->id : -1;
    }
    while (m > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < m; i++)
            if (rank[i] < rank[best])
                best = i;
        if (rank[best] == UINT32_MAX)
            break;
        id[best] = nid[best];
        for (size_t i = best + 1; i + 1 < m; i++) {
            id[i] = id[i + 1];
            rank[i] = rank[i + 1];
            nid[i] = nid[i + 1];
        }
        m--;
        for (size_t i = best ? best - 1 : 0; i <= best && i + 1 < m; i++) {
            const tok_merge *mg = merge_find(tok, id[i], id[i + 1]);
            rank[i] = mg ? mg->rank : UINT32_MAX;
            nid[i] = mg ? mg->id : -1;
        }
    }
    grpo_err err = grpo_tok__ivec_reserve(out, m);
    if (err != GRPO_OK)
        return err;
    memcpy(out->v + out->n, id, m * sizeof *id);
    out->n += m;
    return GRPO_OK;
}

static grpo_err
merge_word(const grpo_tokenizer *tok, tok_scratch *s, const unsigned char *p, size_t n,
           tok_ivec *out)
{
    if (n <= SMALL_WORD)
        return merge_small(tok, p, n, out);
    grpo_err err = reserve_work(s, n);
    if (err != GRPO_OK)
        return err;
    int32_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = tok->byte_id[p[i]];
        if (id < 0)
            continue; /* no token for this byte and no unk: HF drops it too */
        s->sym_id[m] = id;
        s->sym_prev[m] = m - 1;
        s->sym_next[m] = m + 1;
        m++;
    }
    if (m == 0)
        return GRPO_OK;
    s->sym_next[m - 1] = -1;
    size_t nh = 0;
    for (int32_t i = 0; i + 1 < m; i++)
        push_pair(tok, s, &nh, i);
    while (nh > 0) {
        uint64_t top = heap_pop(s->heap, &nh);
        int32_t pos = (int32_t)(uint32_t)top, nx;
        if (s->sym_id[pos] < 0 || (nx = s->sym_next[pos]) < 0)
            continue;
        const tok_merge *mg = merge_find(tok, s->sym_id[pos], s->sym_id[nx]);
        if (mg == NULL || mg->rank != (uint32_t)(top >> 32))
            continue; /* stale: a neighbour changed since this pair was queued */
        s->sym_id[pos] = mg->id;
        s->sym_id[nx] = -1;
        s->sym_next[pos] = s->sym_next[nx];
        if (s->sym_next[nx] >= 0)
            s->sym_prev[s->sym_next[nx]] = pos;
        if (s->sym_prev[pos] >= 0)
            push_pair(tok, s, &nh, s->sym_prev[pos]);
        push_pair(tok, s, &nh, pos);
    }
    if ((err = grpo_tok__ivec_reserve(out, (size_t)m)) != GRPO_OK)
        return err;
    for (int32_t i = 0; i >= 0; i = s->sym_next[i])
        out->v[out->n++] = s->sym_id[i];
    return GRPO_OK;
}

grpo_err
grpo_tok__bpe(const grpo_tokenizer *tok, tok_scratch *s, const unsigned char *p, size_t n,
              tok_ivec *out)
{
    if (n == 0)
        return GRPO_OK;
    if (n == 1) {
        int32_t id = tok->byte_id[p[0]];
        return id >= 0 ? grpo_tok__ivec_push(out, id) : GRPO_OK;
    }
    if (tok->ignore_merges) {
        int32_t id = grpo_tok__strmap_get(&tok->by_bytes, (const char *)p, n);
        if (id >= 0)
            return grpo_tok__ivec_push(out, id);
    }
    bool cacheable = s->cslots != NULL && n <= CACHE_MAX_KEY;
    uint64_t h = 0;
    grpo_err err = GRPO_OK;
    if (cacheable) {
        h = grpo_tok__hash(p, n) | 1;
        if (cache_get(s, p, n, h, out, &err))
            return err;
    }
    size_t before = out->n;
    if ((err = merge_word(tok, s, p, n, out)) != GRPO_OK)
        return err;
    if (cacheable)
        cache_put(s, p, n, h, out->v + before, out->n - before);
    return GRPO_OK;
}
