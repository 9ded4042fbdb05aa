/* Bump allocator in linked blocks: cheap per-request scratch memory freed all at once. */
#include "common/common_int.h"

#include <stdlib.h>
#include <string.h>

typedef struct block {
    struct block *next;
    size_t cap, used;
    _Alignas(16) unsigned char data[];
} block;

struct grpo_arena {
    block *head;
    size_t block_bytes, total_used;
};

static block *
block_new(size_t cap)
{
    block *b = malloc(sizeof *b + cap);
    if (b == NULL)
        return NULL;
    b->next = NULL;
    b->cap = cap;
    b->used = 0;
    return b;
}

grpo_err
grpo_arena_create(grpo_arena **out, size_t block_bytes)
{
    *out = NULL;
    grpo_arena *a = calloc(1, sizeof *a);
    if (a == NULL)
        return grpo__fail(GRPO_ENOMEM, "arena: out of memory");
    a->block_bytes = block_bytes ? block_bytes : 64 * 1024;
    a->head = block_new(a->block_bytes);
    if (a->head == NULL) {
        free(a);
        return grpo__fail(GRPO_ENOMEM, "arena: out of memory");
    }
    *out = a;
    return GRPO_OK;
}

void
grpo_arena_destroy(grpo_arena *a)
{
    if (a == NULL)
        return;
    for (block *b = a->head, *n; b != NULL; b = n) {
        n = b->next;
        free(b);
    }
    free(a);
}

void *
grpo_arena_alloc(grpo_arena *a, size_t n)
{
    size_t need = (n + 15) & ~(size_t)15;
    if (need < n) {
        grpo__fail(GRPO_ENOMEM, "arena: allocation of %zu bytes overflows", n);
        return NULL;
    }
    block *b = a->head;
    if (b->cap - b->used < need) {
        size_t cap = need > a->block_bytes ? need : a->block_bytes;
        block *nb = block_new(cap);
        if (nb == NULL) {
            grpo__fail(GRPO_ENOMEM, "arena: out of memory allocating %zu bytes", n);
            return NULL;
        }
        nb->next = b;
        a->head = b = nb;
    }
    void *p = b->data + b->used;
    b->used += need;
    a->total_used += need;
    memset(p, 0, n);
    return p;
}

char *
grpo_arena_strdup(grpo_arena *a, const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = grpo_arena_alloc(a, n);
    if (p != NULL)
        memcpy(p, s, n);
    return p;
}

void
grpo_arena_reset(grpo_arena *a)
{
    block *b = a->head;
    while (b->next != NULL) {
        block *n = b->next;
        free(b);
        b = n;
    }
    /* keep the oldest block: it has the configured size */
    a->head = b;
    b->used = 0;
    a->total_used = 0;
}

size_t
grpo_arena_used(const grpo_arena *a)
{
    return a->total_used;
}
