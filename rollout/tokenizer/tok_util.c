/* Small containers the tokenizer is built from: a byte-string hash map, an int vector, the
 * added-token trie, and UTF-8 / Unicode whitespace helpers. */
#include "rollout/tokenizer/tok_int.h"

#include <stdlib.h>
#include <string.h>

static inline uint64_t
mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

uint64_t
grpo_tok__hash(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (n * 0x100000001b3ULL);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ mix(w)) * 0x9ddfea08eb382d69ULL;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ mix(w ^ ((uint64_t)n << 56))) * 0x9ddfea08eb382d69ULL;
    return mix(h);
}

grpo_err
grpo_tok__strmap_init(tok_strmap *m, size_t expected)
{
    size_t cap = 16;
    while (cap < expected * 2)
        cap <<= 1;
    m->slots = calloc(cap, sizeof *m->slots);
    if (m->slots == NULL)
        return grpo__fail(GRPO_ENOMEM, "tokenizer: out of memory");
    m->mask = cap - 1;
    m->count = 0;
    return GRPO_OK;
}

void
grpo_tok__strmap_fini(tok_strmap *m)
{
    free(m->slots);
    m->slots = NULL;
    m->mask = m->count = 0;
}

static grpo_err
strmap_grow(tok_strmap *m)
{
    tok_strmap big;
    grpo_err err = grpo_tok__strmap_init(&big, (m->mask + 1));
    if (err != GRPO_OK)
        return err;
    for (size_t i = 0; i <= m->mask; i++)
        if (m->slots[i].key != NULL)
            grpo_tok__strmap_put(&big, m->slots[i].key, m->slots[i].len, m->slots[i].val);
    free(m->slots);
    *m = big;
    return GRPO_OK;
}

grpo_err
grpo_tok__strmap_put(tok_strmap *m, const char *key, size_t len, int32_t val)
{
    if ((m->count + 1) * 2 > m->mask + 1) {
        grpo_err err = strmap_grow(m);
        if (err != GRPO_OK)
            return err;
    }
    size_t i = grpo_tok__hash(key, len) & m->mask;
    for (;; i = (i + 1) & m->mask) {
        struct tok_strslot *s = &m->slots[i];
        if (s->key == NULL) {
            s->key = key;
            s->len = (uint32_t)len;
            s->val = val;
            m->count++;
            return GRPO_OK;
        }
        if (s->len == len && memcmp(s->key, key, len) == 0) {
            s->val = val;
            return GRPO_OK;
        }
    }
}

int32_t
grpo_tok__strmap_get(const tok_strmap *m, const char *key, size_t len)
{
    if (m->slots == NULL)
        return -1;
    size_t i = grpo_tok__hash(key, len) & m->mask;
    for (;; i = (i + 1) & m->mask) {
        const struct tok_strslot *s = &m->slots[i];
        if (s->key == NULL)
            return -1;
        if (s->len == len && memcmp(s->key, key, len) == 0)
            return s->val;
    }
}

grpo_err
grpo_tok__ivec_reserve(tok_ivec *v, size_t extra)
{
    if (v->n + extra <= v->cap)
        return GRPO_OK;
    size_t cap = v->cap ? v->cap : 64;
    while (cap < v->n + extra)
        cap *= 2;
    int32_t *p = realloc(v->v, cap * sizeof *p);
    if (p == NULL)
        return grpo__fail(GRPO_ENOMEM, "tokenizer: out of memory");
    v->v = p;
    v->cap = cap;
    return GRPO_OK;
}

grpo_err
grpo_tok__ivec_push(tok_ivec *v, int32_t x)
{
    if (v->n == v->cap) {
        grpo_err err = grpo_tok__ivec_reserve(v, 1);
        if (err != GRPO_OK)
            return err;
    }
    v->v[v->n++] = x;
    return GRPO_OK;
}

/* ---- trie ---- */

static int32_t
trie_new_node(tok_trie *t, uint8_t byte)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        tok_trie_node *p = realloc(t->nodes, cap * sizeof *p);
        if (p == NULL)
            return -1;
        t->nodes = p;
        t->cap = cap;
    }
    tok_trie_node *nd = &t->nodes[t->n];
    nd->child = nd->sibling = nd->token = -1;
    nd->byte = byte;
    return (int32_t)t->n++;
}

grpo_err
grpo_tok__trie_add(tok_trie *t, const char *s, size_t n, int32_t token)
{
    if (t->nodes == NULL) {
        for (int b = 0; b < 256; b++)
            t->root_child[b] = -1;
        if (trie_new_node(t, 0) != 0)
            return grpo__fail(GRPO_ENOMEM, "tokenizer: out of memory");
        t->empty = true;
    }
    if (n == 0)
        return GRPO_OK;
    const unsigned char *u = (const unsigned char *)s;
    int32_t cur = t->root_child[u[0]];
    if (cur < 0) {
        if ((cur = trie_new_node(t, u[0])) < 0)
            return grpo__fail(GRPO_ENOMEM, "tokenizer: out of memory");
        t->root_child[u[0]] = cur;
    }
    for (size_t i = 1; i < n; i++) {
        int32_t c = t->nodes[cur].child;
        while (c >= 0 && t->nodes[c].byte != u[i])
            c = t->nodes[c].sibling;
        if (c < 0) {
            if ((c = trie_new_node(t, u[i])) < 0)
                return grpo__fail(GRPO_ENOMEM, "tokenizer: out of memory");
            t->nodes[c].sibling = t->nodes[cur].child;
            t->nodes[cur].child = c;
        }
        cur = c;
    }
    t->nodes[cur].token = token;
    t->empty = false;
    return GRPO_OK;
}

void
grpo_tok__trie_fini(tok_trie *t)
{
    free(t->nodes);
    t->nodes = NULL;
    t->n = t->cap = 0;
}

/* ---- UTF-8 ---- */

size_t
grpo_tok__utf8_next(const unsigned char *s, size_t n, size_t i, uint32_t *cp)
{
    unsigned c = s[i];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t k;
    uint32_t v, min;
    if ((c & 0xE0) == 0xC0)
        k = 1, v = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0)
        k = 2, v = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0)
        k = 3, v = c & 0x07, min = 0x10000;
    else
        goto bad;
    if (n - i <= k)
        goto bad;
    for (size_t j = 1; j <= k; j++) {
        if ((s[i + j] & 0xC0) != 0x80)
            goto bad;
        v = (v << 6) | (s[i + j] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        goto bad;
    *cp = v;
    return k + 1;
bad:
    *cp = UINT32_MAX;
    return 1;
}

bool
grpo_tok__is_whitespace(uint32_t c)
{
    if (c < 0x80)
        return c == ' ' || (c >= 0x09 && c <= 0x0D);
    switch (c) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
        return true;
    default:
        return c >= 0x2000 && c <= 0x200A;
    }
}
