/* The paged KV pool: pages of GRPO_KV_PAGE tokens x layers x one row of grpo_model_kv_row()
 * values (MLA latent rows or GQA key/value rows) in the pool's dtype (F32, BF16 or FP8; the row
 * formats are kernels.h's grpo_kv_fmt), refcounted. A fork shares every page of its parent; a
 * page with more than one owner is copied before it is written (only ever the last, partial page,
 * because sequences only append). */
#include "rollout/model/model_int.h"

#include <stdlib.h>
#include <string.h>

size_t
grpo_model_kv_row(const grpo_model_config *cfg)
{
    if (grpo_model__is_mla(cfg))
        return (size_t)cfg->kv_lora_rank + (size_t)cfg->qk_rope_head_dim;
    return 2 * (size_t)cfg->num_key_value_heads * (size_t)cfg->head_dim;
}

grpo_kv_fmt
grpo_model__kv_fmt(const grpo_model_config *cfg, int kv_dtype)
{
    static const grpo_dtype dt[] = {GRPO_DT_F32, GRPO_DT_BF16, GRPO_DT_F8E4M3};
    int32_t n = (int32_t)grpo_model_kv_row(cfg);
    grpo_dtype d = kv_dtype >= 0 && kv_dtype <= GRPO_KV_FP8 ? dt[kv_dtype] : GRPO_DT_F32;
    if (cfg->arch == GRPO_ARCH_DEEPSEEK_V3)
        return grpo_kv_fmt_make(d, n, cfg->kv_lora_rank, 128);
    return grpo_kv_fmt_make(d, n, n, cfg->head_dim);
}

grpo_err
grpo_kv_dtype_parse(const char *s, int *out)
{
    static const char *const names[] = {"f32", "bf16", "fp8"};
    for (int i = 0; s != NULL && i < 3; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = i;
            return GRPO_OK;
        }
    return grpo__fail(GRPO_EINVAL, "kv dtype \"%s\": expected \"f32\", \"bf16\" or \"fp8\"",
                      s ? s : "");
}

const char *
grpo_kv_dtype_name(int kv_dtype)
{
    return kv_dtype == GRPO_KV_BF16 ? "bf16" : kv_dtype == GRPO_KV_FP8 ? "fp8" : "f32";
}

grpo_err
grpo_kv_create(grpo_kv **out, const grpo_model_config *cfg, size_t budget_bytes)
{
    return grpo_kv_create_dtype(out, cfg, GRPO_KV_F32, budget_bytes);
}

static grpo_err kv_create(grpo_kv **out, const grpo_model_config *cfg, int32_t n_layers,
                          int kv_dtype, size_t budget_bytes, grpo_kernels *k);

grpo_err
grpo_kv_create_dtype(grpo_kv **out, const grpo_model_config *cfg, int kv_dtype, size_t budget_bytes)
{
    return kv_create(out, cfg, cfg->num_hidden_layers, kv_dtype, budget_bytes, NULL);
}

/* The backend whose op memory a pool of m must be in, or NULL where that is host memory. */
static grpo_kernels *
op_memory(const grpo_model *m)
{
    return m->k != NULL && m->k->mem_alloc != NULL ? m->k : NULL;
}

grpo_err
grpo_kv_create_for(grpo_kv **out, const grpo_model *m, size_t budget_bytes)
{
    *out = NULL;
    if (m == NULL)
        return grpo__fail(GRPO_EINVAL, "kv: no model");
    return kv_create(out, &m->cfg, m->cfg.num_hidden_layers, m->kv_dtype, budget_bytes,
                     op_memory(m));
}

int
grpo_kv__usable_by(const grpo_kv *kv, const grpo_model *m)
{
    return kv->k == op_memory(m);
}

grpo_err
grpo_kv_create_mtp(grpo_kv **out, const grpo_model *m, size_t budget_bytes)
{
    *out = NULL;
    if (m == NULL || !grpo_model_has_mtp(m))
        return grpo__fail(GRPO_EINVAL, "kv: the model has no MTP module loaded (load_mtp)");
    return kv_create(out, grpo_model_get_config(m), 1, grpo_model_kv_dtype(m), budget_bytes,
                     op_memory(m));
}

static grpo_err
kv_create(grpo_kv **out, const grpo_model_config *cfg, int32_t n_layers, int kv_dtype,
          size_t budget_bytes, grpo_kernels *k)
{
    *out = NULL;
    if (kv_dtype < GRPO_KV_F32 || kv_dtype > GRPO_KV_FP8)
        return grpo__fail(GRPO_EINVAL, "kv: unknown kv dtype %d", kv_dtype);
    grpo_kv *kv = calloc(1, sizeof *kv);
    if (kv == NULL)
        return grpo__fail(GRPO_ENOMEM, "kv: out of memory");
    kv->n_layers = n_layers;
    kv->row = (int32_t)grpo_model_kv_row(cfg);
    kv->dtype = kv_dtype;
    kv->fmt = grpo_model__kv_fmt(cfg, kv_dtype);
    kv->page_bytes = (size_t)kv->n_layers * GRPO_KV_PAGE * (size_t)kv->fmt.bytes;
    kv->n_pages = budget_bytes / kv->page_bytes;
    size_t pb = kv->page_bytes, n = kv->n_pages;
    if (n == 0 || n > INT32_MAX) {
        free(kv);
        if (n == 0)
            return grpo__fail(GRPO_EINVAL, "kv: a budget of %zu bytes holds no page of %zu bytes",
                              budget_bytes, pb);
        return grpo__fail(GRPO_EINVAL,
                          "kv: a budget of %zu bytes is %zu pages of %zu bytes; a pool holds at "
                          "most %d pages (%zu bytes)",
                          budget_bytes, n, pb, INT32_MAX, (size_t)INT32_MAX * pb);
    }
    /* calloc of a large block is lazily backed: untouched pages cost nothing; a backend's op
     * memory is the backend's (rows are written before they are read) */
    kv->k = k;
    kv->mem = k != NULL ? grpo_kernels_mem_alloc(k, kv->n_pages * kv->page_bytes)
                        : calloc(kv->n_pages, kv->page_bytes);
    kv->refcnt = calloc(kv->n_pages, sizeof *kv->refcnt);
    kv->free_list = malloc(kv->n_pages * sizeof *kv->free_list);
    if (kv->mem == NULL || kv->refcnt == NULL || kv->free_list == NULL) {
        grpo_kv_destroy(kv);
        return grpo__fail(GRPO_ENOMEM, "kv: cannot allocate %zu bytes", budget_bytes);
    }
    for (size_t i = 0; i < kv->n_pages; i++) /* pop from the end: page 0 first */
        kv->free_list[i] = (int32_t)(kv->n_pages - 1 - i);
    kv->n_free = kv->n_pages;
    *out = kv;
    return GRPO_OK;
}

void
grpo_kv_destroy(grpo_kv *kv)
{
    if (kv == NULL)
        return;
    for (int32_t i = 0; i < kv->n_seqs; i++)
        free(kv->seqs[i].pages);
    free(kv->seqs);
    if (kv->k != NULL)
        grpo_kernels_mem_free(kv->k, kv->mem);
    else
        free(kv->mem);
    free(kv->refcnt);
    free(kv->free_list);
    free(kv);
}

static grpo_kv_seq *
seq_get(const grpo_kv *kv, int32_t seq)
{
    if (kv == NULL || seq < 0 || seq >= kv->n_seqs || !kv->seqs[seq].used)
        return NULL;
    return &kv->seqs[seq];
}

grpo_err
grpo_kv_seq_new(grpo_kv *kv, int32_t *seq_out)
{
    int32_t i = 0;
    while (i < kv->n_seqs && kv->seqs[i].used)
        i++;
    if (i == kv->cap_seqs) {
        int32_t cap = kv->cap_seqs ? kv->cap_seqs * 2 : 16;
        grpo_kv_seq *v = realloc(kv->seqs, (size_t)cap * sizeof *v);
        if (v == NULL)
            return grpo__fail(GRPO_ENOMEM, "kv: out of memory");
        memset(v + kv->cap_seqs, 0, (size_t)(cap - kv->cap_seqs) * sizeof *v);
        kv->seqs = v;
        kv->cap_seqs = cap;
    }
    if (i == kv->n_seqs)
        kv->n_seqs++;
    grpo_kv_seq *s = &kv->seqs[i];
    s->used = 1;
    s->len = 0;
    s->n_pages = 0;
    *seq_out = i;
    return GRPO_OK;
}

static grpo_err
seq_grow(grpo_kv_seq *s, int32_t n_pages)
{
    if (n_pages <= s->cap_pages)
        return GRPO_OK;
    int32_t cap = s->cap_pages ? s->cap_pages : 4;
    while (cap < n_pages)
        cap *= 2;
    int32_t *v = realloc(s->pages, (size_t)cap * sizeof *v);
    if (v == NULL)
        return grpo__fail(GRPO_ENOMEM, "kv: out of memory");
    s->pages = v;
    s->cap_pages = cap;
    return GRPO_OK;
}

grpo_err
grpo_kv_seq_fork(grpo_kv *kv, int32_t parent, int32_t *child_out)
{
    if (seq_get(kv, parent) == NULL)
        return grpo__fail(GRPO_EINVAL, "kv: fork of unknown sequence %d", parent);
    int32_t c;
    grpo_err err = grpo_kv_seq_new(kv, &c);
    if (err != GRPO_OK)
        return err;
    grpo_kv_seq *p = &kv->seqs[parent], *s = &kv->seqs[c]; /* after seq_new's realloc */
    if ((err = seq_grow(s, p->n_pages)) != GRPO_OK) {
        grpo_kv_seq_free(kv, c);
        return err;
    }
    memcpy(s->pages, p->pages, (size_t)p->n_pages * sizeof *s->pages);
    for (int32_t i = 0; i < p->n_pages; i++)
        kv->refcnt[p->pages[i]]++;
    s->n_pages = p->n_pages;
    s->len = p->len;
    *child_out = c;
    return GRPO_OK;
}

static void
page_release(grpo_kv *kv, int32_t page)
{
    if (--kv->refcnt[page] == 0)
        kv->free_list[kv->n_free++] = page;
}

void
grpo_kv_seq_free(grpo_kv *kv, int32_t seq)
{
    grpo_kv_seq *s = seq_get(kv, seq);
    if (s == NULL)
        return;
    for (int32_t i = 0; i < s->n_pages; i++)
        page_release(kv, s->pages[i]);
    s->n_pages = 0;
    s->len = 0;
    s->used = 0;
}

grpo_err
grpo_kv_seq_truncate(grpo_kv *kv, int32_t seq, int32_t len)
{
    grpo_kv_seq *s = seq_get(kv, seq);
    if (s == NULL)
        return grpo__fail(GRPO_EINVAL, "kv: truncate of unknown sequence %d", seq);
    if (len < 0 || len > s->len)
        return grpo__fail(GRPO_EINVAL, "kv: truncate of sequence %d (%d positions) to %d", seq,
                          s->len, len);
    int32_t keep = (len + GRPO_KV_PAGE - 1) / GRPO_KV_PAGE;
    for (int32_t i = keep; i < s->n_pages; i++)
        page_release(kv, s->pages[i]);
    if (keep < s->n_pages)
        s->n_pages = keep;
    s->len = len;
    return GRPO_OK;
}

int32_t
grpo_kv_seq_len(const grpo_kv *kv, int32_t seq)
{
    const grpo_kv_seq *s = seq_get(kv, seq);
    return s == NULL ? -1 : s->len;
}

size_t
grpo_kv_pages_total(const grpo_kv *kv)
{
    return kv == NULL ? 0 : kv->n_pages;
}

size_t
grpo_kv_pages_used(const grpo_kv *kv)
{
    return kv == NULL ? 0 : kv->n_pages - kv->n_free;
}

size_t
grpo_kv_page_bytes(const grpo_kv *kv)
{
    return kv == NULL ? 0 : kv->page_bytes;
}

int
grpo_kv_get_dtype(const grpo_kv *kv)
{
    return kv == NULL ? GRPO_KV_F32 : kv->dtype;
}

void
grpo_kv__put(grpo_kv *kv, int32_t seq, int32_t layer, int32_t pos, const float *x)
{
    grpo_kv_row_encode(&kv->fmt, x, grpo_kv__row(kv, seq, layer, pos));
}

void *
grpo_kv__row(grpo_kv *kv, int32_t seq, int32_t layer, int32_t pos)
{
    const grpo_kv_seq *s = &kv->seqs[seq];
    return grpo_kv__page(kv, s->pages[pos / GRPO_KV_PAGE], layer) +
           (size_t)(pos % GRPO_KV_PAGE) * (size_t)kv->fmt.bytes;
}

size_t
grpo_kv__pages_needed(const grpo_kv *kv, int32_t seq, int32_t pos0, int32_t n)
{
    const grpo_kv_seq *s = seq_get(kv, seq);
    if (s == NULL || n <= 0)
        return 0;
    int32_t first = pos0 / GRPO_KV_PAGE, last = (pos0 + n - 1) / GRPO_KV_PAGE;
    size_t need = 0;
    for (int32_t p = first; p <= last; p++)
        if (p >= s->n_pages || kv->refcnt[s->pages[p]] > 1)
            need++;
    return need;
}

grpo_err
grpo_kv__reserve(grpo_kv *kv, int32_t seq, int32_t pos0, int32_t n)
{
    grpo_kv_seq *s = seq_get(kv, seq);
    if (s == NULL)
        return grpo__fail(GRPO_EINVAL, "kv: unknown sequence %d", seq);
    if (n <= 0)
        return GRPO_OK;
    if (grpo_kv__pages_needed(kv, seq, pos0, n) > kv->n_free)
        return grpo__fail(GRPO_EFULL, "kv: out of pages (%zu of %zu in use)",
                          grpo_kv_pages_used(kv), kv->n_pages);
    int32_t first = pos0 / GRPO_KV_PAGE, last = (pos0 + n - 1) / GRPO_KV_PAGE;
    grpo_err err = seq_grow(s, last + 1);
    if (err != GRPO_OK)
        return err;
    for (int32_t p = first; p <= last; p++) {
        if (p < s->n_pages && kv->refcnt[s->pages[p]] == 1)
            continue;
        int32_t np = kv->free_list[--kv->n_free];
        kv->refcnt[np] = 1;
        if (p < s->n_pages) { /* shared: copy on write */
            uint8_t *to = kv->mem + (size_t)np * kv->page_bytes,
                    *from = kv->mem + (size_t)s->pages[p] * kv->page_bytes;
            if (kv->k != NULL)
                grpo_kernels_mem_copy(kv->k, to, from, kv->page_bytes, GRPO_MEM_D2D);
            else
                memcpy(to, from, kv->page_bytes);
            page_release(kv, s->pages[p]);
        } else {
            s->n_pages = p + 1;
        }
        s->pages[p] = np;
    }
    return GRPO_OK;
}
