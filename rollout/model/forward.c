/* The forward over a ragged batch: embedding, per layer RMSNorm + attention (DeepSeek's MLA:
 * naive form for prefill chunks, absorbed form for single decode tokens, both over the paged latent
 * cache; or the GQA families' attention, forward_gqa.c) + dense MLP or MoE, then the final norm and
 * lm_head. fp32 activations; every op goes through the kernel table, and the activations live in
 * the backend's op memory (kernels.h), which this file reaches only through the table: the arrays
 * it computes on the host (positions, tokens, the MoE slots, row indices) are built in a host
 * block and copied in, the router's choices copied out. Each row's result depends only on its own
 * item (tokens, positions, cache), never on the other items of the batch nor on the thread count.
 */
#include "rollout/model/model_int.h"

#include <stdlib.h>
#include <string.h>

/* q_a_layernorm and kv_a_layernorm use RMSNorm's default eps, not config.rms_norm_eps, in both
 * DeepSeek's reference and transformers. */
#define MLA_NORM_EPS 1e-6f

typedef struct {
    int T, B; /* tokens in the batch; absorbed-form queries (decode tokens) */
    /* a decode step run as a CUDA graph (step_graphed): T and B padded to a bucket (graph_rows)
     * past the n_real tokens of the items with rows of token 0 at position 0 whose cache row is
     * pad_page's (pad_bytes: a page of the pool); their logits are made and not copied out */
    int graph, n_real;
    void *pad_page;
    size_t pad_bytes;
    /* host block: what the forward computes on the host, then copies into op memory (pos_h,
     * tok_h, the MoE slots, the row indices) or out of it (ri_h, rw_h) */
    int32_t *pos_h, *tok_h, *ri_h, *slot_tok_h, *dec_t_h, *lm_idx_h;
    float *rw_h, *slot_w_h, *rl_h; /* rl_h: the router logits of the softmax-gate families */
    void **row_ptrs;               /* max(T, max_len) cache row pointers (kv_write, kv_read) */
    /* op memory */
    int32_t *pos, *tok, *dec_t, *lm_idx; /* dec_t[b]: absorbed query b's token row */
    int32_t *dec, *decj; /* absorbed query b: token decj[b] of item dec[b], in item order */
    int absorb;          /* items of n <= absorb take the absorbed form per token (else n == 1) */
    float *h, *x, *q, *qa, *kva, *ao, *tmp, *acc;
    float *g, *u;                  /* (T, max intermediate) */
    float *rl, *rw;                /* router logits (T, E), weights (T, k) */
    int32_t *ri;                   /* router expert ids (T, k) */
    float *qd, *ql, *qr, *ol, *od; /* decode batch */
    const void ***pages_of;
    const void **page_ptrs; /* B * max pages */
    int32_t *lens;
    int max_pages, max_len; /* max_len: longest prefill item's pos0 + n */
    /* naive attention: lat (max_len, dc + dr) the chunk's cache rows as F32, kvb (max_len, H,
     * dn + dv) the expanded keys/values, chunk_pages the pages (then lat's pages of rows) */
    float *lat, *kvb;
    const void **chunk_pages;
    /* MoE: the T x k assignments sorted by (expert, token) */
    int32_t *ecnt, *eoff, *slot_tok, *esplit;
    float *slot_w;
    float *xs, *ys;      /* (T*k, H) inputs and outputs per assignment (T <= MOE_PAR_MAX_T) */
    float *wg, *wu;      /* per worker (MOE_PAR_MAX_T, moe_intermediate_size) */
    float *sg, *su;      /* (T*k, moe_intermediate_size) per assignment (T <= MOE_PAR_MAX_T) */
    grpo_gemm_job *jobs; /* one batch of GEMMs: 2 per active expert + 2 shared */
    int n_workers;
    /* MoE sorted in op memory (the backend's moe_sort and moe_gemm): every T (xs, ys, sg, su
     * sized for all of them), the offsets in op memory, the experts' weights of one kind */
    int moe_op;
    int32_t *eoff_op;
    const grpo_kw **ew;
    /* a decode step's cache tables in op memory, made once for every layer (the backend's
     * kv_write_tab, mla_absorbed_tab or gqa_attn_tab; every token a query): each token's cache row
     * and each query's pages at layer 0, and its length; tab_maxp the pages per query, max_pages
     * rounded up to a power of two (a CUDA graph of the step serves every length up to it) */
    int tabs, tab_maxp;
    void **tab_rows, **tab_rows_h;
    const void **tab_ptab, **tab_ptab_h;
    int32_t *tab_len, *tab_len_h;
    /* naive attention of one head group: (n, hg, dn + dr) queries, (n, hg, dv) outputs */
    float *qg, *og;
    int hg; /* heads per group */
    /* outputs in op memory, copied to the caller's buffers, when that is not host memory (else
     * empty: the head writes straight into them): logits (T, vocab), normed hidden rows (T, H) */
    int out_host;
    float *lo, *hid;
    /* draws made where the logits are (the backend's sample entry), their tokens and logprobs
     * copied out instead of the logits: nd of them (a recorded step's count padded like its rows,
     * the pad draws repeating the first), rows and keys staged from the host block */
    const grpo_model_draws *dr;
    int nd;
    int32_t *drow, *drow_h, *dtok;
    grpo_sample_key *dkey, *dkey_h;
    float *dlr, *dlp;
    /* an MTP forward: its input [enorm(embed) | hnorm(hidden)] (T, 2H), and the caller's hidden
     * rows copied in (T, H) where op memory is not host memory */
    int mtp;
    float *cat, *hin;
} scratch;

/* Heads whose keys/values the naive form expands at once (memory: (pos0 + n) x this x 256 floats
 * for V3, 32 MB at 2048 positions instead of 268 MB for all 128 heads). */
#define NAIVE_HG 16

static int
naive_hg(const grpo_model *m)
{
    return m->naive_heads > 0 ? m->naive_heads : NAIVE_HG;
}

/* Up to this many tokens, a MoE layer with many active experts runs whole experts in parallel
 * (one per worker) instead of threading each small expert GEMM: far fewer pool wake-ups. */
#define MOE_PAR_MAX_T 256

/* Scratch lives in two grow-only blocks kept by the model, one in host memory and one in op
 * memory: a forward allocates nothing once they have grown to the largest batch seen (large
 * per-call allocations were mmap'd and page-faulted afresh on every decode step). */
typedef struct {
    char *base;
    size_t off, size;
} carver;

static void *
carve(carver *cv, size_t bytes)
{
    size_t at = (cv->off + 63) & ~(size_t)63;
    cv->off = at + (bytes > 0 ? bytes : 1);
    return cv->base != NULL && cv->off <= cv->size ? cv->base + at : NULL;
}

/* The host block's arrays. */
static void
layout_host(scratch *s, const grpo_model_config *c, carver *cv)
{
    size_t T = (size_t)s->T, B = (size_t)s->B, L = (size_t)s->max_len;
    size_t E = (size_t)(c->n_routed_experts > 0 ? c->n_routed_experts : 1);
    size_t K = (size_t)(c->num_experts_per_tok > 0 ? c->num_experts_per_tok : 1);
    size_t i4 = sizeof(int32_t), pp = sizeof(void *);
    s->pos_h = carve(cv, T * i4);
    s->tok_h = carve(cv, T * i4);
    s->dec = carve(cv, (B + 1) * i4);
    s->decj = carve(cv, (B + 1) * i4);
    s->dec_t_h = carve(cv, (B + 1) * i4);
    s->lm_idx_h = carve(cv, T * i4);
    s->ri_h = carve(cv, T * K * i4);
    s->rw_h = carve(cv, T * K * sizeof(float));
    s->rl_h = carve(cv, T * E * sizeof(float));
    s->slot_tok_h = carve(cv, T * K * i4);
    s->slot_w_h = carve(cv, T * K * sizeof(float));
    s->row_ptrs = carve(cv, (T > L ? T : L) * pp);
    s->pages_of = carve(cv, (B + 1) * pp);
    s->page_ptrs = carve(cv, ((B > 0 ? B : 1) * (size_t)s->max_pages + 1) * pp);
    s->lens = carve(cv, (B + 1) * i4);
    s->ecnt = carve(cv, E * i4);
    s->eoff = carve(cv, (E + 1) * i4);
    s->esplit = carve(cv, ((size_t)s->n_workers + 1) * i4);
    s->jobs = carve(cv, (2 * E + 2) * sizeof(grpo_gemm_job));
    s->ew = carve(cv, E * pp);
    s->chunk_pages = carve(cv, (L / GRPO_KV_PAGE + 2) * pp);
    size_t tb = s->tabs ? B : 0;
    s->tab_rows_h = carve(cv, tb * pp);
    s->tab_ptab_h = carve(cv, tb * (size_t)s->tab_maxp * pp);
    s->tab_len_h = carve(cv, tb * i4);
    s->drow_h = carve(cv, (size_t)s->nd * i4);
    s->dkey_h = carve(cv, (size_t)s->nd * sizeof *s->dkey_h);
}

/* The op-memory block's arrays; with cv->base NULL it only measures. */
static void
layout(scratch *s, const grpo_model_config *c, carver *cv)
{
    size_t T = (size_t)s->T, B = (size_t)s->B, L = (size_t)s->max_len;
    size_t H = (size_t)c->hidden_size, nh = (size_t)c->num_attention_heads;
    size_t qk = (size_t)(c->qk_nope_head_dim + c->qk_rope_head_dim), dc = (size_t)c->kv_lora_rank;
    size_t dr = (size_t)c->qk_rope_head_dim, dv = (size_t)c->v_head_dim;
    size_t dn = (size_t)c->qk_nope_head_dim, I = (size_t)c->intermediate_size;
    /* GQA: q and ao are (T, heads, head_dim), kva (T, row); the MLA-only buffers are empty */
    size_t Bm = B, Lm = L;
    if (!grpo_model__is_mla(c)) {
        qk = dv = (size_t)c->head_dim;
        dc = grpo_model_kv_row(c);
        dr = dn = 0;
        Bm = Lm = 0;
    }
    size_t mi = (size_t)c->moe_intermediate_size *
                (size_t)(c->n_shared_experts > 1 ? c->n_shared_experts : 1);
    I = mi > I ? mi : I;
    size_t E = (size_t)(c->n_routed_experts > 0 ? c->n_routed_experts : 1);
    size_t K = (size_t)(c->num_experts_per_tok > 0 ? c->num_experts_per_tok : 1);
    size_t f = sizeof(float), i4 = sizeof(int32_t);
    s->pos = carve(cv, T * i4);
    s->tok = carve(cv, T * i4);
    s->dec_t = carve(cv, (B + 1) * i4);
    s->lm_idx = carve(cv, T * i4);
    s->h = carve(cv, T * H * f);
    s->x = carve(cv, T * H * f);
    s->q = carve(cv, T * nh * qk * f);
    s->qa = carve(cv, T * (size_t)(c->q_lora_rank > 0 ? c->q_lora_rank : 1) * f);
    s->kva = carve(cv, T * (dc + dr) * f);
    s->ao = carve(cv, T * nh * dv * f);
    s->tmp = carve(cv, T * H * f);
    s->acc = carve(cv, T * H * f);
    s->g = carve(cv, T * I * f);
    s->u = carve(cv, T * I * f);
    s->rl = carve(cv, T * E * f);
    s->rw = carve(cv, T * K * f);
    s->ri = carve(cv, T * K * i4);
    s->qd = carve(cv, Bm * nh * qk * f);
    s->ql = carve(cv, Bm * nh * dc * f);
    s->qr = carve(cv, Bm * nh * dr * f);
    s->ol = carve(cv, Bm * nh * dc * f);
    s->od = carve(cv, Bm * nh * dv * f);
    size_t Tp = T <= MOE_PAR_MAX_T || s->moe_op ? T : 0, Im = (size_t)c->moe_intermediate_size;
    s->eoff_op = carve(cv, (s->moe_op ? E + 1 : 0) * i4);
    s->slot_tok = carve(cv, T * K * i4);
    s->slot_w = carve(cv, T * K * f);
    s->xs = carve(cv, Tp * K * H * f);
    s->ys = carve(cv, Tp * K * H * f);
    size_t Tw = Tp && !s->moe_op ? MOE_PAR_MAX_T : 0;
    s->wg = carve(cv, (size_t)s->n_workers * Tw * Im * f);
    s->wu = carve(cv, (size_t)s->n_workers * Tw * Im * f);
    s->sg = carve(cv, Tp * K * Im * f);
    s->su = carve(cv, Tp * K * Im * f);
    s->lat = carve(cv, Lm * (dc + dr) * f);
    size_t hg = (size_t)s->hg;
    s->kvb = carve(cv, Lm * hg * (dn + dv) * f);
    s->qg = carve(cv, (Lm > 0 ? T : 0) * hg * qk * f);
    s->og = carve(cv, (Lm > 0 ? T : 0) * hg * dv * f);
    s->lo = carve(cv, (s->out_host ? 0 : T * (size_t)c->vocab_size) * f);
    s->hid = carve(cv, (s->out_host ? 0 : T * H) * f);
    s->cat = carve(cv, (s->mtp ? T * 2 * H : 0) * f);
    s->hin = carve(cv, (s->mtp && !s->out_host ? T * H : 0) * f);
    size_t nd = (size_t)s->nd;
    s->drow = carve(cv, nd * i4);
    s->dkey = carve(cv, nd * sizeof *s->dkey);
    s->dtok = carve(cv, nd * i4);
    s->dlr = carve(cv, nd * f);
    s->dlp = carve(cv, nd * f);
    size_t tb = s->tabs ? B : 0; /* last: the layout before does not depend on tab_maxp */
    s->tab_rows = carve(cv, tb * sizeof(void *));
    s->tab_ptab = carve(cv, tb * (size_t)s->tab_maxp * sizeof(void *));
    s->tab_len = carve(cv, tb * i4);
    s->pad_page = carve(cv, s->graph ? s->pad_bytes : 0);
}

static int
absorbed(const scratch *s, const grpo_fwd_item *it)
{
    return it->n == 1 || it->n <= s->absorb;
}

/* The absorbed queries' list (s->dec, s->decj) and their token rows (s->dec_t_h), given each
 * item's first token row t0_of. */
static void
dec_list(scratch *s, const grpo_fwd_item *items, int n_items, const int32_t *t0_of)
{
    for (int i = 0, b = 0; i < n_items; i++)
        for (int j = 0; absorbed(s, &items[i]) && j < items[i].n; j++, b++)
            s->dec[b] = i, s->decj[b] = j, s->dec_t_h[b] = t0_of[i] + j;
}

/* Op memory is host memory: outputs go straight into the caller's buffers. */
static int
op_memory_is_host(const grpo_kernels *k)
{
    return k->mem_alloc == NULL;
}

/* The rows of a recorded decode step of T tokens: powers of two up to 32, then multiples of 32
 * (a few recordings serve every batch size; the pad rows cost little in a step that streams the
 * weights). */
static int
graph_rows(int T)
{
    int r = 1;
    while (r < T && r < 32)
        r *= 2;
    return T <= 32 ? r : (T + 31) / 32 * 32;
}

/* graph: the caller's outputs allow a recorded step (step_graphed); kv: the pool; dr: the draws
 * the backend makes (NULL: the logits are copied out); mtp: an MTP forward. */
static grpo_err
scratch_init(scratch *s, grpo_model *m, const grpo_kv *kv, const grpo_fwd_item *items, int n_items,
             int absorb, int graph, const grpo_model_draws *dr, int mtp)
{
    memset(s, 0, sizeof *s);
    s->absorb = absorb;
    s->mtp = mtp;
    s->dr = dr;
    s->nd = dr != NULL ? dr->n : 0;
    size_t T = 0;
    for (int i = 0; i < n_items; i++) {
        T += (size_t)items[i].n;
        if (absorbed(s, &items[i]))
            s->B += items[i].n;
        else if (items[i].pos0 + items[i].n > s->max_len)
            s->max_len = items[i].pos0 + items[i].n;
        int32_t np = (items[i].pos0 + items[i].n + GRPO_KV_PAGE - 1) / GRPO_KV_PAGE;
        s->max_pages = np > s->max_pages ? np : s->max_pages;
    }
    s->T = (int)T;
    s->n_workers = m->k->n_threads > 0 ? m->k->n_threads : 1;
    s->hg = m->cfg.num_attention_heads < naive_hg(m) ? m->cfg.num_attention_heads : naive_hg(m);
    s->out_host = op_memory_is_host(m->k) && dr == NULL;
    s->moe_op = m->k->moe_sort != NULL && m->k->moe_gemm != NULL;
    s->tabs =
        s->B == s->T && s->T > 0 && m->k->kv_write_tab != NULL &&
        (grpo_model__is_mla(&m->cfg) ? m->k->mla_absorbed_tab != NULL : m->k->gqa_attn_tab != NULL);
    for (s->tab_maxp = 1; s->tabs && s->tab_maxp < s->max_pages; s->tab_maxp *= 2) {
    }
    s->n_real = s->T;
    s->graph = graph && s->tabs && s->moe_op;
    if (s->graph) {
        s->T = s->B = graph_rows(s->T);
        s->nd = s->nd > 0 ? graph_rows(s->nd) : 0;
        s->pad_bytes = kv->page_bytes;
    }
    carver hv = {NULL, 0, 0}, cv = {NULL, 0, 0};
    layout_host(s, &m->cfg, &hv);
    layout(s, &m->cfg, &cv);
    if (hv.off > m->scratch_size) {
        size_t want = hv.off + hv.off / 4;
        free(m->scratch);
        m->scratch_size = 0;
        if ((m->scratch = malloc(want)) == NULL)
            return grpo__fail(GRPO_ENOMEM, "model: out of memory for a batch of %zu tokens", T);
        m->scratch_size = want;
    }
    if (cv.off > m->scratch_op_size) {
        size_t want = cv.off + cv.off / 4;
        grpo_kernels_mem_free(m->k, m->scratch_op);
        m->scratch_op_size = 0;
        if ((m->scratch_op = grpo_kernels_mem_alloc(m->k, want)) == NULL)
            return grpo__fail(GRPO_ENOMEM, "model: out of %s memory for a batch of %zu tokens",
                              m->k->name, T);
        m->scratch_op_size = want;
    }
    hv = (carver){m->scratch, 0, m->scratch_size};
    cv = (carver){m->scratch_op, 0, m->scratch_op_size};
    layout_host(s, &m->cfg, &hv);
    layout(s, &m->cfg, &cv);
    return GRPO_OK;
}

/* n_layers: the layers the pool must have (num_hidden_layers; 1 for the MTP pool). */
static grpo_err
check_items(const grpo_model *m, grpo_kv *kv, int n_layers, const grpo_fwd_item *items, int n_items)
{
    const grpo_model_config *c = &m->cfg;
    if (kv->n_layers != n_layers || (size_t)kv->row != grpo_model_kv_row(c))
        return grpo__fail(GRPO_EINVAL, "model: the KV pool was made for another model config");
    if (!grpo_kv__usable_by(kv, m))
        return grpo__fail(GRPO_EINVAL,
                          "model: the KV pool's pages are not in the %s backend's "
                          "op memory (make the pool with grpo_kv_create_for)",
                          m->k->name);
    if (kv->dtype != m->kv_dtype)
        return grpo__fail(GRPO_EINVAL,
                          "model: the KV pool holds %s rows; the model was loaded "
                          "with kv dtype %s",
                          grpo_kv_dtype_name(kv->dtype), grpo_kv_dtype_name(m->kv_dtype));
    size_t need = 0;
    for (int i = 0; i < n_items; i++) {
        const grpo_fwd_item *it = &items[i];
        int32_t len = grpo_kv_seq_len(kv, it->seq);
        if (len < 0)
            return grpo__fail(GRPO_EINVAL, "model: item %d: unknown sequence %d", i, it->seq);
        if (it->n < 1 || it->tokens == NULL)
            return grpo__fail(GRPO_EINVAL, "model: item %d: needs n >= 1 tokens", i);
        if (it->pos0 != len)
            return grpo__fail(GRPO_EINVAL,
                              "model: item %d: pos0 %d but sequence %d holds %d "
                              "tokens",
                              i, it->pos0, it->seq, len);
        if ((int64_t)it->pos0 + it->n > INT32_MAX / 2)
            return grpo__fail(GRPO_EINVAL, "model: item %d: position overflow", i);
        for (int j = 0; j < i; j++)
            if (items[j].seq == it->seq)
                return grpo__fail(GRPO_EINVAL, "model: items %d and %d both extend sequence %d", j,
                                  i, it->seq);
        for (int32_t t = 0; t < it->n; t++)
            if (it->tokens[t] < 0 || it->tokens[t] >= c->vocab_size)
                return grpo__fail(GRPO_EINVAL, "model: item %d: token %d is %d; vocab is %d", i, t,
                                  it->tokens[t], c->vocab_size);
        need += grpo_kv__pages_needed(kv, it->seq, it->pos0, it->n);
    }
    if (need > kv->n_free)
        return grpo__fail(GRPO_EFULL, "kv: the batch needs %zu pages; %zu of %zu are free", need,
                          kv->n_free, kv->n_pages);
    return GRPO_OK;
}

/* Per-sequence page pointers for one layer. */
static void
seq_pages(const grpo_kv *kv, int32_t seq, int layer, const void **out)
{
    const grpo_kv_seq *s = &kv->seqs[seq];
    for (int32_t p = 0; p < s->n_pages; p++)
        out[p] = grpo_kv__page(kv, s->pages[p], layer);
}

/* Naive MLA for one prefill chunk: expands the cached latents to per-head keys and values. The
 * chunk's cache rows (its own included, as written) are read once into lat as F32, and the kernel
 * reads the rope keys there. */
static grpo_err
attn_naive(grpo_model *m, grpo_kv *kv, const grpo_layer_w *l, int layer, const grpo_fwd_item *it,
           int t0, scratch *s)
{
    const grpo_model_config *c = &m->cfg;
    int nh = c->num_attention_heads, dn = c->qk_nope_head_dim, dr = c->qk_rope_head_dim;
    int dv = c->v_head_dim, dc = c->kv_lora_rank, qk = dn + dr, L = it->pos0 + it->n;
    int n = it->n, hg = s->hg;
    float *lat = s->lat, *kvb = s->kvb;
    const void **pp = s->chunk_pages;
    int rw = dc + dr;
    seq_pages(kv, it->seq, layer, pp);
    for (int j = 0; j < L; j++)
        s->row_ptrs[j] = (uint8_t *)(uintptr_t)pp[j / GRPO_KV_PAGE] +
                         (size_t)(j % GRPO_KV_PAGE) * (size_t)kv->fmt.bytes;
    grpo_kernels_kv_read(m->k, &kv->fmt, L, (const void *const *)s->row_ptrs, lat, rw);
    const float **lp = (const float **)pp; /* now pages of lat */
    for (int p = 0; p * GRPO_KV_PAGE < L; p++)
        lp[p] = lat + (size_t)p * GRPO_KV_PAGE * rw;
    const float *q = s->q + (size_t)t0 * nh * qk;
    float *out = s->ao + (size_t)t0 * nh * dv;
    /* keys/values are expanded for hg heads at a time: (L, hg, dn + dv) instead of all heads */
    for (int h0 = 0; h0 < nh; h0 += hg) {
        int g = nh - h0 < hg ? nh - h0 : hg;
        grpo_kw wg = grpo_kw_rows(&l->kv_b, h0 * (dn + dv), g * (dn + dv));
        m->k->gemm(m->k, L, lat, rw, &wg, kvb, g * (dn + dv));
        const float *qg = q;
        float *og = out;
        if (g != nh) { /* gather this group's queries; scatter its outputs below */
            grpo_kernels_copy_rows(m->k, n, g * qk, NULL, q + (size_t)h0 * qk, nh * qk, NULL, s->qg,
                                   g * qk);
            qg = s->qg;
            og = s->og;
        }
        m->k->mla_naive(m->k, n, it->pos0, g, dn, dr, dv, qg, kvb, (const float *const *)lp,
                        GRPO_KV_PAGE, rw, dc, c->softmax_scale, og);
        if (g != nh)
            grpo_kernels_copy_rows(m->k, n, g * dv, NULL, s->og, g * dv, NULL,
                                   out + (size_t)h0 * dv, nh * dv);
    }
    return GRPO_OK;
}

/* Absorbed MLA for every single-token item at once: W_UK folded into the query, W_UV applied to
 * the latent-space output. */
static grpo_err
attn_absorbed(grpo_model *m, grpo_kv *kv, const grpo_layer_w *l, int layer,
              const grpo_fwd_item *items, const int32_t *t0_of, scratch *s)
{
    const grpo_model_config *c = &m->cfg;
    int nh = c->num_attention_heads, dn = c->qk_nope_head_dim, dr = c->qk_rope_head_dim;
    int dv = c->v_head_dim, dc = c->kv_lora_rank, qk = dn + dr, B = s->B;
    (void)t0_of; /* the token rows are s->dec_t */
    grpo_kernels *k = m->k;
    grpo_kernels_copy_rows(k, B, nh * qk, s->dec_t, s->q, nh * qk, NULL, s->qd, nh * qk);
    grpo_kernels_copy_rows(k, B * nh, dr, NULL, s->qd + dn, qk, NULL, s->qr, dr);
    for (int b = 0; b < B && !s->tabs; b++) {
        const grpo_fwd_item *it = &items[s->dec[b]];
        const void **pp = s->page_ptrs + (size_t)b * s->max_pages;
        seq_pages(kv, it->seq, layer, pp);
        s->pages_of[b] = pp;
        s->lens[b] = it->pos0 + s->decj[b] + 1; /* causal within the item */
    }
    m->k->gemm_t_heads(m->k, B, nh, s->qd, nh * qk, qk, &l->kv_b, dn + dv, dn, s->ql, nh * dc, dc);
    if (s->tabs) {
        size_t loff = grpo_kv__layer_off(kv, layer);
        grpo_err err = grpo_kernels_mla_absorbed_tab(
            m->k, B, nh, dc, dr, s->ql, s->qr, s->tab_ptab, s->tab_maxp, s->tab_len,
            s->tab_maxp * GRPO_KV_PAGE, GRPO_KV_PAGE, loff, &kv->fmt, c->softmax_scale, s->ol);
        if (err != GRPO_OK)
            return err;
    } else {
        m->k->mla_absorbed(m->k, B, nh, dc, dr, s->ql, s->qr,
                           (const void *const *const *)s->pages_of, s->lens, GRPO_KV_PAGE, &kv->fmt,
                           c->softmax_scale, s->ol);
    }
    grpo_kw wuv = grpo_kw_rows(&l->kv_b, dn, l->kv_b.rows - dn);
    m->k->gemm_heads(m->k, B, nh, s->ol, nh * dc, dc, &wuv, dn + dv, dv, s->od, nh * dv, dv);
    grpo_kernels_copy_rows(k, B, nh * dv, NULL, s->od, nh * dv, s->dec_t, s->ao, nh * dv);
    return GRPO_OK;
}

static grpo_err
attention(grpo_model *m, grpo_kv *kv, const grpo_layer_w *l, int layer, const grpo_fwd_item *items,
          int n_items, const int32_t *t0_of, scratch *s)
{
    const grpo_model_config *c = &m->cfg;
    grpo_kernels *k = m->k;
    int T = s->T, H = c->hidden_size, nh = c->num_attention_heads;
    int dn = c->qk_nope_head_dim, dr = c->qk_rope_head_dim, dc = c->kv_lora_rank;
    int qk = dn + dr, row = dc + dr;
    k->rmsnorm(k, T, s->h, H, l->attn_norm, H, c->rms_norm_eps, s->x, H);
    if (!grpo_model__is_mla(c)) {
        grpo_model_tabs tb = {s->tab_rows, s->tab_ptab, s->tab_len, s->tab_maxp};
        return grpo_model__attn_gqa(m, kv, l, layer, items, n_items, t0_of, T, s->tabs ? &tb : NULL,
                                    s->pos, s->x, s->q, s->kva, s->ao, s->tmp, s->h);
    }
    /* the projections of x (q_a or q, and kv_a) in one GEMM batch */
    grpo_gemm_job proj[2] = {{T, s->x, H, c->q_lora_rank > 0 ? &l->q_a : &l->q_proj,
                              c->q_lora_rank > 0 ? s->qa : s->q,
                              c->q_lora_rank > 0 ? c->q_lora_rank : nh * qk},
                             {T, s->x, H, &l->kv_a, s->kva, row}};
    grpo_kernels_gemm_batch(k, 2, proj);
    if (c->q_lora_rank > 0) {
        k->rmsnorm(k, T, s->qa, c->q_lora_rank, l->q_a_norm, c->q_lora_rank, MLA_NORM_EPS, s->qa,
                   c->q_lora_rank);
        k->gemm(k, T, s->qa, c->q_lora_rank, &l->q_b, s->q, nh * qk);
    }
    k->rmsnorm(k, T, s->kva, row, l->kv_a_norm, dc, MLA_NORM_EPS, s->kva, row);
    k->rope(k, T, s->kva + dc, row, 1, 0, dr, s->pos, m->inv_freq, c->rope_attn_factor,
            c->rope_interleave);
    k->rope(k, T, s->q + dn, nh * qk, nh, qk, dr, s->pos, m->inv_freq, c->rope_attn_factor,
            c->rope_interleave);
    if (s->tabs) { /* append [latent | rope key] in the cache's dtype */
        grpo_kernels_kv_write_tab(k, &kv->fmt, T, s->kva, row, s->tab_rows,
                                  grpo_kv__layer_off(kv, layer));
    } else {
        for (int i = 0; i < n_items; i++)
            for (int j = 0; j < items[i].n; j++)
                s->row_ptrs[t0_of[i] + j] =
                    grpo_kv__row(kv, items[i].seq, layer, items[i].pos0 + j);
        grpo_kernels_kv_write(k, &kv->fmt, T, s->kva, row, s->row_ptrs);
    }
    for (int i = 0; i < n_items; i++) {
        if (absorbed(s, &items[i]))
            continue;
        grpo_err err = attn_naive(m, kv, l, layer, &items[i], t0_of[i], s);
        if (err != GRPO_OK)
            return err;
    }
    if (s->B > 0) {
        grpo_err err = attn_absorbed(m, kv, l, layer, items, t0_of, s);
        if (err != GRPO_OK)
            return err;
    }
    k->gemm(k, T, s->ao, nh * c->v_head_dim, &l->o, s->tmp, H);
    grpo_kernels_add_rows(m->k, T, H, s->h, H, s->tmp, H);
    return GRPO_OK;
}

/* The gate and up projections of an MLP as two jobs of a GEMM batch. */
static grpo_gemm_job *
gate_up_jobs(grpo_gemm_job *j, const grpo_mlp_w *w, int M, const float *x, int ldx, float *g,
             float *u)
{
    int I = w->gate.rows;
    j[0] = (grpo_gemm_job){M, x, ldx, &w->gate, g, I};
    j[1] = (grpo_gemm_job){M, x, ldx, &w->up, u, I};
    return j + 2;
}

/* out(M, H) = down(silu(gate x) * up x); gate and up in one GEMM batch. */
static void
mlp(grpo_model *m, const grpo_mlp_w *w, int M, const float *x, float *out, scratch *s)
{
    grpo_kernels *k = m->k;
    int H = m->cfg.hidden_size, I = w->gate.rows;
    grpo_gemm_job jobs[2];
    gate_up_jobs(jobs, w, M, x, H, s->g, s->u);
    grpo_kernels_gemm_batch(k, 2, jobs);
    k->silu_mul(k, M, I, s->g, I, s->u, I, s->g, I);
    k->gemm(k, M, s->g, I, &w->down, out, H);
}

/* Sorts the T x k assignments by (expert, token) on the host: the router's choices are copied out
 * of op memory (ri_h, rw_h), the counts stay on the host (ecnt, eoff: they shape the expert
 * GEMMs), the slots (slot_tok, slot_w) go back in. */
static void
route_sort(grpo_kernels *k, const grpo_model_config *c, scratch *s, int on_host)
{
    int T = s->T, E = c->n_routed_experts, K = c->num_experts_per_tok;
    size_t n = (size_t)T * (size_t)K;
    if (!on_host) { /* else the host router wrote ri_h, rw_h */
        grpo_kernels_mem_copy(k, s->ri_h, s->ri, n * sizeof *s->ri_h, GRPO_MEM_D2H);
        grpo_kernels_mem_copy(k, s->rw_h, s->rw, n * sizeof *s->rw_h, GRPO_MEM_D2H);
    }
    memset(s->ecnt, 0, (size_t)E * sizeof *s->ecnt);
    for (int i = 0; i < T * K; i++)
        s->ecnt[s->ri_h[i]]++;
    s->eoff[0] = 0;
    for (int e = 0; e < E; e++)
        s->eoff[e + 1] = s->eoff[e] + s->ecnt[e];
    memset(s->ecnt, 0, (size_t)E * sizeof *s->ecnt);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < K; j++) {
            int e = s->ri_h[(size_t)t * K + j], at = s->eoff[e] + s->ecnt[e]++;
            s->slot_tok_h[at] = t;
            s->slot_w_h[at] = s->rw_h[(size_t)t * K + j];
        }
    grpo_kernels_mem_copy(k, s->slot_tok, s->slot_tok_h, n * sizeof *s->slot_tok, GRPO_MEM_H2D);
    grpo_kernels_mem_copy(k, s->slot_w, s->slot_w_h, n * sizeof *s->slot_w, GRPO_MEM_H2D);
}

typedef struct {
    grpo_model *m;
    const grpo_layer_w *l;
    scratch *s;
    grpo_kernels serial;  /* the backend's ops without its pool: runs on the calling worker */
    const int32_t *split; /* worker w runs experts [split[w], split[w + 1]) */
} moe_par_ctx;

static void
moe_par_range(void *vctx, size_t b, size_t e, int worker)
{
    moe_par_ctx *c = vctx;
    scratch *s = c->s;
    int H = c->m->cfg.hidden_size, I = c->m->cfg.moe_intermediate_size;
    float *g = s->wg + (size_t)worker * MOE_PAR_MAX_T * I,
          *u = s->wu + (size_t)worker * MOE_PAR_MAX_T * I;
    grpo_kernels *k = &c->serial;
    for (int x = c->split[b]; x < c->split[e]; x++) {
        int n = s->eoff[x + 1] - s->eoff[x];
        if (n == 0)
            continue;
        const grpo_mlp_w *w = &c->l->experts[x];
        const float *in = s->xs + (size_t)s->eoff[x] * H;
        float *out = s->ys + (size_t)s->eoff[x] * H;
        k->gemm(k, n, in, H, &w->gate, g, I);
        k->gemm(k, n, in, H, &w->up, u, I);
        k->silu_mul(k, n, I, g, I, u, I, g, I);
        k->gemm(k, n, g, I, &w->down, out, H);
    }
}

/* Cuts the experts into n_workers contiguous runs of about equal work (an active expert costs its
 * tokens plus a fixed part for reading its weights), so no worker waits long for another. Which
 * worker runs an expert never changes its results. */
static void
moe_par_split(scratch *s, int E)
{
    int W = s->n_workers;
    double total = 0, run = 0;
    for (int e = 0; e < E; e++) {
        int n = s->eoff[e + 1] - s->eoff[e];
        total += n > 0 ? n + 4 : 0;
    }
    s->esplit[0] = 0;
    int w = 1;
    for (int e = 0; e < E && w < W; e++) {
        int n = s->eoff[e + 1] - s->eoff[e];
        run += n > 0 ? n + 4 : 0;
        while (w < W && run >= total * w / W)
            s->esplit[w++] = e + 1;
    }
    while (w <= W)
        s->esplit[w++] = E;
}

/* The routed experts of a small batch and the shared experts as two GEMM batches: the gate and up
 * projections of every active expert (and the shared ones) at once, SiLU, then every down
 * projection at once: two pool wake-ups per layer instead of three per expert. Each expert's rows
 * get the GEMMs they get alone; the shared output lands in s->tmp. */
static void
moe_grouped(grpo_model *m, const grpo_layer_w *l, scratch *s)
{
    const grpo_model_config *c = &m->cfg;
    grpo_kernels *k = m->k;
    int T = s->T, H = c->hidden_size, E = c->n_routed_experts, I = c->moe_intermediate_size;
    int shared = c->n_shared_experts > 0, Is = shared ? l->shared.gate.rows : 0;
    grpo_gemm_job *j = s->jobs;
    for (int e = 0; e < E; e++) {
        int n = s->eoff[e + 1] - s->eoff[e];
        if (n > 0)
            j = gate_up_jobs(j, &l->experts[e], n, s->xs + (size_t)s->eoff[e] * H, H,
                             s->sg + (size_t)s->eoff[e] * I, s->su + (size_t)s->eoff[e] * I);
    }
    if (shared)
        j = gate_up_jobs(j, &l->shared, T, s->x, H, s->g, s->u);
    grpo_kernels_gemm_batch(k, (int)(j - s->jobs), s->jobs);
    int rows = s->eoff[E];
    k->silu_mul(k, rows, I, s->sg, I, s->su, I, s->sg, I);
    if (shared)
        k->silu_mul(k, T, Is, s->g, Is, s->u, Is, s->g, Is);
    j = s->jobs;
    for (int e = 0; e < E; e++) {
        int n = s->eoff[e + 1] - s->eoff[e];
        if (n > 0)
            *j++ = (grpo_gemm_job){n,
                                   s->sg + (size_t)s->eoff[e] * I,
                                   I,
                                   &l->experts[e].down,
                                   s->ys + (size_t)s->eoff[e] * H,
                                   H};
    }
    if (shared)
        *j++ = (grpo_gemm_job){T, s->g, Is, &l->shared.down, s->tmp, H};
    grpo_kernels_gemm_batch(k, (int)(j - s->jobs), s->jobs);
}

/* The routed experts with the routing sorted in op memory (moe_sort; no host round trip): the
 * slots' rows gathered, each projection of every expert in one moe_gemm, SiLU over every slot,
 * the combine in slot order. The same bits as the host-sorted paths: each expert's rows get the
 * GEMMs they get alone, and slot order is ascending expert order. */
/* Projection p (0 gate, 1 up, 2 down) of every routed expert over the slots' rows. */
static void
experts_gemm(grpo_model *m, const grpo_layer_w *l, scratch *s, int p, const float *x, int ldx,
             float *y, int ldy)
{
    const grpo_model_config *c = &m->cfg;
    int E = c->n_routed_experts;
    for (int e = 0; e < E; e++) {
        const grpo_mlp_w *w = &l->experts[e];
        s->ew[e] = p == 0 ? &w->gate : p == 1 ? &w->up : &w->down;
    }
    grpo_kernels_moe_gemm(m->k, E, s->T * c->num_experts_per_tok, s->eoff_op, x, ldx, s->ew, y,
                          ldy);
}

static void
moe_in_op_memory(grpo_model *m, const grpo_layer_w *l, scratch *s)
{
    const grpo_model_config *c = &m->cfg;
    grpo_kernels *k = m->k;
    int T = s->T, H = c->hidden_size, E = c->n_routed_experts, K = c->num_experts_per_tok;
    int I = c->moe_intermediate_size, R = T * K;
    grpo_kernels_moe_sort(k, T, K, E, s->ri, s->rw, s->eoff_op, s->slot_tok, s->slot_w);
    grpo_kernels_copy_rows(k, R, H, s->slot_tok, s->x, H, NULL, s->xs, H);
    experts_gemm(m, l, s, 0, s->xs, H, s->sg, I);
    experts_gemm(m, l, s, 1, s->xs, H, s->su, I);
    k->silu_mul(k, R, I, s->sg, I, s->su, I, s->sg, I);
    experts_gemm(m, l, s, 2, s->sg, I, s->ys, H);
    grpo_kernels_combine_rows(k, R, H, s->slot_tok, s->slot_w, s->ys, H, s->acc, H);
}

/* The routed experts sorted on the host (moe): 1 when moe_grouped ran, which computed the shared
 * experts' output too. */
static int
moe_host_sorted(grpo_model *m, const grpo_layer_w *l, scratch *s, int soft)
{
    const grpo_model_config *c = &m->cfg;
    grpo_kernels *k = m->k;
    int T = s->T, H = c->hidden_size, E = c->n_routed_experts, K = c->num_experts_per_tok;
    int active = 0, grouped = 0;
    route_sort(k, c, s, soft);
    for (int e = 0; e < E; e++)
        active += s->eoff[e + 1] > s->eoff[e];
    if (T <= MOE_PAR_MAX_T) {
        grpo_kernels_copy_rows(k, T * K, H, s->slot_tok, s->x, H, NULL, s->xs, H);
        if (active >= 4 * s->n_workers && s->n_workers > 1) {
            moe_par_split(s, E);
            moe_par_ctx pc = {m, l, s, *k, s->esplit};
            pc.serial.impl = NULL;
            grpo_kernels_parallel_for(k, (size_t)s->n_workers, moe_par_range, &pc);
        } else {
            moe_grouped(m, l, s);
            grouped = 1;
        }
        grpo_kernels_combine_rows(k, T * K, H, s->slot_tok, s->slot_w, s->ys, H, s->acc, H);
    } else {
        float *xe = s->tmp; /* (count, H) gathered inputs; reused as the output below */
        for (int e = 0; e < E; e++) {
            int n = s->eoff[e + 1] - s->eoff[e];
            if (n == 0)
                continue;
            const int32_t *tok = s->slot_tok + s->eoff[e];
            grpo_kernels_copy_rows(k, n, H, tok, s->x, H, NULL, xe, H);
            mlp(m, &l->experts[e], n, xe, xe, s); /* down writes after gate/up consumed xe */
            grpo_kernels_combine_rows(k, n, H, tok, s->slot_w + s->eoff[e], xe, H, s->acc, H);
        }
    }
    return grouped;
}

/* The families whose routers are softmax gates (grpo_model__route_softmax, or the backend's
 * router_softmax); the others' is deepseek_v3's sigmoid router (the op table's router). */
static int
softmax_gates(const grpo_model_config *c)
{
    return c->arch == GRPO_ARCH_QWEN3_MOE || c->arch == GRPO_ARCH_DEEPSEEK_V2;
}

/* Routed experts: sorted in op memory where the backend can (moe_in_op_memory); else on the host,
 * then whole experts in parallel when the batch is small and many are active; grouped GEMM
 * batches when it is small and few are (moe_grouped); else one expert at a time with threaded
 * GEMMs. Each way each expert's rows get the same (row- and thread-invariant) GEMMs and every
 * token adds its experts' outputs in ascending expert order, then the shared experts' output.
 * routes: the router's choices are wanted on the host (ri_h). */
static void
moe(grpo_model *m, const grpo_layer_w *l, scratch *s, int routes)
{
    const grpo_model_config *c = &m->cfg;
    grpo_kernels *k = m->k;
    int T = s->T, H = c->hidden_size, E = c->n_routed_experts, K = c->num_experts_per_tok;
    k->gemm(k, T, s->x, H, &l->router, s->rl, E);
    int soft = softmax_gates(c);
    if (soft && s->moe_op && k->router_softmax != NULL) { /* softmax gates where the logits are */
        k->router_softmax(k, T, s->rl, E, c->n_group, c->topk_group, K, c->norm_topk_prob,
                          c->routed_scaling_factor, s->ri, s->rw);
        soft = 0;      /* from here on as the backend's router */
    } else if (soft) { /* softmax gates: chosen on the host */
        grpo_kernels_mem_copy(k, s->rl_h, s->rl, (size_t)T * E * sizeof(float), GRPO_MEM_D2H);
        grpo_model__route_softmax(T, s->rl_h, E, c->n_group, c->topk_group, K, c->norm_topk_prob,
                                  c->routed_scaling_factor, s->ri_h, s->rw_h);
        grpo_kernels_mem_copy(k, s->ri, s->ri_h, (size_t)T * K * sizeof(int32_t), GRPO_MEM_H2D);
        grpo_kernels_mem_copy(k, s->rw, s->rw_h, (size_t)T * K * sizeof(float), GRPO_MEM_H2D);
    } else {
        k->router(k, T, s->rl, E, l->bias, c->n_group, c->topk_group, K, c->norm_topk_prob,
                  c->routed_scaling_factor, s->ri, s->rw);
    }
    grpo_kernels_mem_zero(k, s->acc, (size_t)T * H * sizeof(float));
    int grouped = 0;
    if (s->moe_op) {
        moe_in_op_memory(m, l, s);
        if (routes && !soft)
            grpo_kernels_mem_copy(k, s->ri_h, s->ri, (size_t)T * K * sizeof *s->ri_h, GRPO_MEM_D2H);
    } else {
        grouped = moe_host_sorted(m, l, s, soft);
    }
    if (c->n_shared_experts > 0) {
        if (!grouped) /* moe_grouped computed it with the routed experts */
            mlp(m, &l->shared, T, s->x, s->tmp, s);
        grpo_kernels_add_rows(m->k, T, H, s->acc, H, s->tmp, H);
    }
    grpo_kernels_add_rows(m->k, T, H, s->h, H, s->acc, H);
}

/* A decode step's cache tables (every token an absorbed query: b == its token row) into op
 * memory: the row each token's cache entry goes to and each query's pages, at layer 0, and its
 * length. */
static void
stage_tabs(grpo_model *m, grpo_kv *kv, const grpo_fwd_item *items, scratch *s)
{
    int B = s->B, P = s->tab_maxp;
    for (int b = s->n_real; b < B; b++) { /* pad rows: a page of their own, one position */
        s->tab_rows_h[b] = s->pad_page;
        for (int p = 0; p < P; p++)
            s->tab_ptab_h[(size_t)b * P + p] = p == 0 ? s->pad_page : NULL;
        s->tab_len_h[b] = 1;
    }
    for (int b = 0; b < s->n_real; b++) {
        const grpo_fwd_item *it = &items[s->dec[b]];
        const grpo_kv_seq *q = &kv->seqs[it->seq];
        int pos = it->pos0 + s->decj[b];
        s->tab_rows_h[b] = grpo_kv__row(kv, it->seq, 0, pos);
        for (int p = 0; p < P; p++)
            s->tab_ptab_h[(size_t)b * P + p] =
                p < q->n_pages ? grpo_kv__page(kv, q->pages[p], 0) : NULL;
        s->tab_len_h[b] = pos + 1; /* causal within the item */
    }
    grpo_kernels_mem_copy(m->k, s->tab_rows, s->tab_rows_h, (size_t)B * sizeof(void *),
                          GRPO_MEM_H2D);
    grpo_kernels_mem_copy(m->k, s->tab_ptab, s->tab_ptab_h, (size_t)B * P * sizeof(void *),
                          GRPO_MEM_H2D);
    grpo_kernels_mem_copy(m->k, s->tab_len, s->tab_len_h, (size_t)B * sizeof(int32_t),
                          GRPO_MEM_H2D);
}

/* Reserves the items' pages, numbers their token rows (t0_of: item i's first) and copies the
 * positions, tokens and absorbed queries' rows into op memory. */
static grpo_err
stage_items(grpo_model *m, grpo_kv *kv, const grpo_fwd_item *items, int n_items, int32_t *t0_of,
            scratch *s)
{
    for (int i = 0, t = 0; i < n_items; i++) {
        grpo_err err = grpo_kv__reserve(kv, items[i].seq, items[i].pos0, items[i].n);
        if (err != GRPO_OK)
            return err; /* cannot happen after check_items; kept for safety */
        t0_of[i] = t;
        for (int j = 0; j < items[i].n; j++, t++) {
            s->pos_h[t] = items[i].pos0 + j;
            s->tok_h[t] = items[i].tokens[j];
        }
    }
    for (int t = s->n_real; t < s->T; t++) { /* a recorded step's pad rows */
        s->pos_h[t] = 0, s->tok_h[t] = 0;
        s->dec_t_h[t] = t;
    }
    dec_list(s, items, n_items, t0_of);
    if (s->tabs)
        stage_tabs(m, kv, items, s);
    size_t T = (size_t)s->T;
    grpo_kernels_mem_copy(m->k, s->pos, s->pos_h, T * sizeof *s->pos, GRPO_MEM_H2D);
    grpo_kernels_mem_copy(m->k, s->tok, s->tok_h, T * sizeof *s->tok, GRPO_MEM_H2D);
    grpo_kernels_mem_copy(m->k, s->dec_t, s->dec_t_h, (size_t)s->B * sizeof *s->dec_t,
                          GRPO_MEM_H2D);
    return GRPO_OK;
}

/* The rows that get logits (every position with all, the last tail[i] of each item, or the
 * last) into op memory (lm_idx); returns their count. */
static int
head_rows(grpo_model *m, const grpo_fwd_item *items, int n_items, const int32_t *t0_of, int all,
          const int32_t *tail, scratch *s)
{
    int R = 0;
    for (int i = 0; i < n_items; i++) {
        int nr = all ? items[i].n : tail != NULL ? tail[i] : 1;
        for (int j = items[i].n - nr; j < items[i].n; j++)
            s->lm_idx_h[R++] = t0_of[i] + j;
    }
    for (int t = s->n_real; t < s->T; t++) /* a recorded step's pad rows: made, not copied out */
        s->lm_idx_h[R++] = t;
    grpo_kernels_mem_copy(m->k, s->lm_idx, s->lm_idx_h, (size_t)R * sizeof *s->lm_idx,
                          GRPO_MEM_H2D);
    return R;
}

/* The final norm and lm_head of the R rows lm_idx names, into the caller's logits (out_host) or
 * the scratch's; hidden (every row, normed) when asked for. */
static void
head(grpo_model *m, int R, float *logits, float *hidden, scratch *s)
{
    const grpo_model_config *c = &m->cfg;
    grpo_kernels *k = m->k;
    int H = c->hidden_size, T = s->T, host = s->out_host;
    float *hid = host ? hidden : s->hid, *lo = host ? logits : s->lo;
    if (hidden != NULL) /* row-wise: the logits rows below get these same bits */
        k->rmsnorm(k, T, s->h, H, m->final_norm, H, c->rms_norm_eps, hid, H);
    grpo_kernels_copy_rows(k, R, H, s->lm_idx, s->h, H, NULL, s->x, H);
    k->rmsnorm(k, R, s->x, H, m->final_norm, H, c->rms_norm_eps, s->x, H);
    if (m->debug_hidden != NULL) /* the hook reads op memory: CPU backend */
        m->debug_hidden(m->debug_ctx, c->num_hidden_layers + 1, R, H, s->x);
    k->gemm(k, R, s->x, H, &m->lm_head, lo, c->vocab_size);
}

/* The draws' rows and keys into op memory, before the step (a recorded one reads them there);
 * a recorded step's pad draws repeat the first. */
static void
stage_draws(grpo_model *m, scratch *s)
{
    if (s->nd == 0)
        return;
    for (int i = 0; i < s->nd; i++) {
        int from = i < s->dr->n ? i : 0;
        s->drow_h[i] = s->dr->rows[from];
        s->dkey_h[i] = s->dr->keys[from];
    }
    grpo_kernels_mem_copy(m->k, s->drow, s->drow_h, (size_t)s->nd * sizeof *s->drow, GRPO_MEM_H2D);
    grpo_kernels_mem_copy(m->k, s->dkey, s->dkey_h, (size_t)s->nd * sizeof *s->dkey, GRPO_MEM_H2D);
}

/* Where op memory is not host memory, the logits (and hidden rows) made in the scratch out to the
 * caller's buffers. */
static void
head_out(grpo_model *m, int R, float *logits, float *hidden, scratch *s)
{
    if (s->dr != NULL) { /* the draws' results, not the logits */
        size_t n = (size_t)s->dr->n;
        grpo_kernels_mem_copy(m->k, s->dr->tok, s->dtok, n * sizeof *s->dtok, GRPO_MEM_D2H);
        grpo_kernels_mem_copy(m->k, s->dr->lp_raw, s->dlr, n * sizeof *s->dlr, GRPO_MEM_D2H);
        grpo_kernels_mem_copy(m->k, s->dr->lp_proc, s->dlp, n * sizeof *s->dlp, GRPO_MEM_D2H);
        return;
    }
    if (s->out_host)
        return;
    grpo_kernels_mem_copy(m->k, logits, s->lo,
                          (size_t)R * (size_t)m->cfg.vocab_size * sizeof(float), GRPO_MEM_D2H);
    if (hidden != NULL)
        grpo_kernels_mem_copy(m->k, hidden, s->hid,
                              (size_t)s->T * m->cfg.hidden_size * sizeof(float), GRPO_MEM_D2H);
}

/* Everything between the staged inputs and the outputs: the embedding, every layer, the head. */
static grpo_err
body(grpo_model *m, grpo_kv *kv, const grpo_fwd_item *items, int n_items, const int32_t *t0_of,
     void *const *routes, int R, float *logits, float *hidden, scratch *s)
{
    const grpo_model_config *c = &m->cfg;
    int H = c->hidden_size, T = s->T;
    m->k->embed(m->k, T, s->tok, &m->embed, s->h, H);
    if (m->debug_hidden != NULL)
        m->debug_hidden(m->debug_ctx, 0, T, H, s->h);
    for (int li = 0, moe_li = 0; li < c->num_hidden_layers; li++) {
        const grpo_layer_w *l = &m->layers[li];
        grpo_err err = attention(m, kv, l, li, items, n_items, t0_of, s);
        if (err != GRPO_OK)
            return err;
        m->k->rmsnorm(m->k, T, s->h, H, l->mlp_norm, H, c->rms_norm_eps, s->x, H);
        if (l->moe) {
            moe(m, l, s, routes != NULL);
            if (routes != NULL)
                grpo_model__routes_put(m, items, n_items, t0_of, moe_li++, s->ri_h, routes);
        } else {
            mlp(m, &l->mlp, T, s->x, s->tmp, s);
            grpo_kernels_add_rows(m->k, T, H, s->h, H, s->tmp, H);
        }
        if (m->debug_hidden != NULL)
            m->debug_hidden(m->debug_ctx, li + 1, T, H, s->h);
    }
    head(m, R, logits, hidden, s);
    if (s->nd > 0)
        m->k->sample(m->k, s->nd, c->vocab_size, s->lo, s->drow, s->dkey, s->dtok, s->dlr, s->dlp);
    return GRPO_OK;
}

/* ---- a decode step as a CUDA graph ----
 * A step whose ops need nothing from the host (every token a query over the tables in op memory,
 * MLA's absorbed form or GQA's, the MoE routing chosen and sorted there, no routes or hidden rows
 * wanted, no debug hook) is recorded the first time a shape (tokens, pages per query) is seen,
 * right after running it, and replayed for the later steps of that shape: the tables, tokens and
 * positions are uploaded before, the logits copied out after. A recording is dropped when the
 * backend's scratch or the forward's moved. The replay runs the recorded kernels with their
 * recorded arguments over the same memory, so its results are the step's without the recording
 * (cuda_model_test). */

/* The outputs asked for allow a recorded step (scratch_init then checks the step itself). */
static int
graph_args_ok(const grpo_model *m, int all, const int32_t *tail, void *const *routes,
              const float *hidden)
{
    return !m->graphs_off && m->k->graph_begin != NULL && !all && tail == NULL && routes == NULL &&
           hidden == NULL && m->debug_hidden == NULL &&
           /* a router on the backend, or none (without router_softmax the softmax gates run
            * on the host) */
           (!softmax_gates(&m->cfg) || m->cfg.n_routed_experts == 0 ||
            m->k->router_softmax != NULL);
}

void
grpo_model__graphs_free(grpo_model *m)
{
    for (int i = 0; i < m->n_graphs; i++)
        if (m->graphs[i].g != NULL)
            m->k->graph_free(m->k, m->graphs[i].g);
    m->n_graphs = m->next_graph = 0;
}

/* The recording of this step's shape (NULL: none yet); stale ones are released on the way. */
static grpo_model_graph *
graph_find(grpo_model *m, const scratch *s, uint64_t epoch)
{
    grpo_model_graph *hit = NULL;
    for (int i = 0; i < m->n_graphs; i++) {
        grpo_model_graph *g = &m->graphs[i];
        if (g->epoch != epoch || g->arena != m->scratch_op || g->arena_size != m->scratch_op_size) {
            if (g->g != NULL) /* its memory moved: never valid again */
                m->k->graph_free(m->k, g->g);
            g->g = NULL, g->T = -1;
        } else if (g->T == s->T && g->maxp == s->tab_maxp && g->nd == s->nd) {
            hit = g;
        }
    }
    return hit;
}

static grpo_err
step_graphed(grpo_model *m, grpo_kv *kv, const grpo_fwd_item *items, int n_items,
             const int32_t *t0_of, int R, float *logits, scratch *s)
{
    grpo_kernels *k = m->k;
    grpo_model_graph *g = graph_find(m, s, k->graph_epoch(k));
    if (g != NULL && g->g != NULL) {
        m->graph_launches++;
        return k->graph_launch(k, g->g);
    }
    grpo_err err = body(m, kv, items, n_items, t0_of, NULL, R, logits, NULL, s);
    if (err != GRPO_OK || g != NULL) /* g without a recording: this shape cannot be recorded */
        return err;
    uint64_t epoch = k->graph_epoch(k); /* after the step: its scratch has grown as it needs */
    if (k->graph_begin(k) != GRPO_OK)
        return GRPO_OK;
    grpo_err rec = body(m, kv, items, n_items, t0_of, NULL, R, logits, NULL, s); /* recorded */
    void *x = k->graph_end(k);
    if (rec != GRPO_OK && x != NULL) {
        k->graph_free(k, x);
        x = NULL;
    }
    int at = -1; /* a released slot, a new one, or the oldest */
    for (int i = 0; i < m->n_graphs && at < 0; i++)
        at = m->graphs[i].T < 0 ? i : -1;
    if (at < 0 && m->n_graphs < GRPO_MODEL_GRAPHS)
        at = m->n_graphs++;
    if (at < 0) {
        at = m->next_graph;
        m->next_graph = (at + 1) % GRPO_MODEL_GRAPHS;
        if (m->graphs[at].g != NULL)
            k->graph_free(k, m->graphs[at].g);
    }
    m->graphs[at] =
        (grpo_model_graph){s->T, s->tab_maxp, s->nd, epoch, m->scratch_op, m->scratch_op_size, x};
    return GRPO_OK;
}

/* What a forward is asked for: logits rows (every position with all, the last tail[i] of item i,
 * or each item's last), routes and hidden rows when wanted, or draws in place of the logits. */
typedef struct {
    float *logits;
    int all;
    const int32_t *tail;
    int absorb;
    void *const *routes;
    float *hidden;
    const grpo_model_draws *draws;
} fwd_req;

static grpo_err
forward(grpo_model *m, grpo_kv *kv, const grpo_fwd_item *items, int n_items, const fwd_req *q)
{
    if (m == NULL || kv == NULL || items == NULL || (q->logits == NULL && q->draws == NULL) ||
        n_items <= 0)
        return grpo__fail(GRPO_EINVAL, "model: forward needs a model, a KV pool and items");
    grpo_err err = check_items(m, kv, m->cfg.num_hidden_layers, items, n_items);
    if (err != GRPO_OK)
        return err;
    scratch s;
    int graph = graph_args_ok(m, q->all, q->tail, q->routes, q->hidden);
    if ((err = scratch_init(&s, m, kv, items, n_items, q->absorb, graph, q->draws, 0)) != GRPO_OK)
        return err;
    int32_t *t0_of = malloc((size_t)n_items * sizeof *t0_of);
    if (t0_of == NULL)
        return grpo__fail(GRPO_ENOMEM, "model: out of memory");
    if ((err = stage_items(m, kv, items, n_items, t0_of, &s)) != GRPO_OK)
        goto done;
    int R = head_rows(m, items, n_items, t0_of, q->all, q->tail, &s);
    stage_draws(m, &s);
    if (s.graph)
        err = step_graphed(m, kv, items, n_items, t0_of, R, q->logits, &s);
    else
        err = body(m, kv, items, n_items, t0_of, q->routes, R, q->logits, q->hidden, &s);
    if (err != GRPO_OK)
        goto done;
    head_out(m, s.graph ? n_items : R, q->logits, q->hidden, &s); /* not the pad rows' */
    for (int i = 0; i < n_items; i++)
        kv->seqs[items[i].seq].len = items[i].pos0 + items[i].n;
    err = grpo_model__backend_status(m);
done:
    free(t0_of);
    return err;
}

grpo_err
grpo_model_forward(grpo_model *m, grpo_kv *kv, const grpo_fwd_item *items, int n_items,
                   float *logits)
{
    fwd_req q = {.logits = logits};
    return forward(m, kv, items, n_items, &q);
}

grpo_err
grpo_model_forward_all(grpo_model *m, grpo_kv *kv, const grpo_fwd_item *items, int n_items,
                       float *logits)
{
    fwd_req q = {.logits = logits, .all = 1};
    return forward(m, kv, items, n_items, &q);
}

grpo_err
grpo_model_forward_routes(grpo_model *m, grpo_kv *kv, const grpo_fwd_item *items, int n_items,
                          float *logits, void *const *routes)
{
    fwd_req q = {.logits = logits, .routes = routes};
    return forward(m, kv, items, n_items, &q);
}

grpo_err
grpo_model_forward_hidden(grpo_model *m, grpo_kv *kv, const grpo_fwd_item *items, int n_items,
                          int all, float *logits, float *hidden)
{
    fwd_req q = {.logits = logits, .all = all != 0, .hidden = hidden};
    return forward(m, kv, items, n_items, &q);
}

grpo_err
grpo_model__forward_spec(grpo_model *m, grpo_kv *kv, const grpo_fwd_item *items, int n_items,
                         const int32_t *tail, int absorb, float *logits, void *const *routes,
                         float *hidden)
{
    for (int i = 0; tail != NULL && i < n_items; i++)
        if (tail[i] < 1 || tail[i] > items[i].n)
            return grpo__fail(GRPO_EINVAL, "model: item %d wants %d logits rows of %d", i, tail[i],
                              items[i].n);
    fwd_req q = {logits, 0, tail, absorb, routes, hidden, NULL};
    return forward(m, kv, items, n_items, &q);
}

int
grpo_model__can_sample(const grpo_model *m)
{
    return m != NULL && m->k->sample != NULL;
}

grpo_err
grpo_model__forward_sample(grpo_model *m, grpo_kv *kv, const grpo_fwd_item *items, int n_items,
                           void *const *routes, const grpo_model_draws *d)
{
    if (!grpo_model__can_sample(m))
        return grpo__fail(GRPO_EUNSUPPORTED, "model: the %s backend has no sampler of its own",
                          m != NULL ? m->k->name : "(none)");
    if (d == NULL || d->n < 0 ||
        (d->n > 0 && (d->rows == NULL || d->keys == NULL || d->tok == NULL || d->lp_raw == NULL ||
                      d->lp_proc == NULL)))
        return grpo__fail(GRPO_EINVAL, "model: draws need rows, keys and outputs");
    for (int i = 0; i < d->n; i++)
        if (d->rows[i] < 0 || d->rows[i] >= n_items)
            return grpo__fail(GRPO_EINVAL, "model: draw %d is from row %d of %d", i, d->rows[i],
                              n_items);
    fwd_req q = {.routes = routes, .draws = d};
    return forward(m, kv, items, n_items, &q);
}

/* ---- multi-token prediction (the MTP module at layer num_hidden_layers) ---- */

/* cat (T, 2H) = [enorm(embed(tok)) | hnorm(hidden)], then s->h = eh_proj cat: the MTP's input;
 * hidden: the caller's rows (host memory), copied into op memory where that is not host memory. */
static void
mtp_input(grpo_model *m, const float *hidden, scratch *s)
{
    const grpo_model_config *c = &m->cfg;
    const grpo_mtp_w *t = m->mtp;
    grpo_kernels *k = m->k;
    int T = s->T, H = c->hidden_size;
    float *cat = s->cat;
    if (!s->out_host) {
        grpo_kernels_mem_copy(k, s->hin, hidden, (size_t)T * H * sizeof(float), GRPO_MEM_H2D);
        hidden = s->hin;
    }
    k->embed(k, T, s->tok, &t->embed, s->h, H);
    k->rmsnorm(k, T, s->h, H, t->enorm, H, c->rms_norm_eps, cat, 2 * H);
    k->rmsnorm(k, T, hidden, H, t->hnorm, H, c->rms_norm_eps, cat + H, 2 * H);
    k->gemm(k, T, cat, 2 * H, &t->eh_proj, s->h, H);
}

/* The MTP decoder layer over its one-layer pool, then shared_head.norm and shared_head.head. */
static grpo_err
mtp_layer_head(grpo_model *m, grpo_kv *kv, const grpo_fwd_item *items, int n_items,
               const int32_t *t0_of, int all, float *logits, float *hidden_out, scratch *s)
{
    const grpo_model_config *c = &m->cfg;
    const grpo_layer_w *l = &m->mtp->layer;
    int H = c->hidden_size, T = s->T;
    grpo_err err = attention(m, kv, l, 0, items, n_items, t0_of, s);
    if (err != GRPO_OK)
        return err;
    m->k->rmsnorm(m->k, T, s->h, H, l->mlp_norm, H, c->rms_norm_eps, s->x, H);
    if (l->moe) {
        moe(m, l, s, 0);
    } else {
        mlp(m, &l->mlp, T, s->x, s->tmp, s);
        grpo_kernels_add_rows(m->k, T, H, s->h, H, s->tmp, H);
    }
    int R = all ? T : n_items;
    for (int i = 0; i < R; i++)
        s->lm_idx_h[i] = all ? i : t0_of[i] + items[i].n - 1;
    grpo_kernels_mem_copy(m->k, s->lm_idx, s->lm_idx_h, (size_t)R * sizeof *s->lm_idx,
                          GRPO_MEM_H2D);
    grpo_kernels_copy_rows(m->k, R, H, s->lm_idx, s->h, H, NULL, s->x, H);
    m->k->rmsnorm(m->k, R, s->x, H, m->mtp->head_norm, H, c->rms_norm_eps, s->x, H);
    if (hidden_out != NULL) /* the chained draft's h: shared_head.norm's output, as SGLang */
        grpo_kernels_mem_copy(m->k, hidden_out, s->x, (size_t)R * H * sizeof(float), GRPO_MEM_D2H);
    m->k->gemm(m->k, R, s->x, H, &m->mtp->head, s->out_host ? logits : s->lo, c->vocab_size);
    head_out(m, R, logits, NULL, s);
    return GRPO_OK;
}

grpo_err
grpo_model_mtp_forward(grpo_model *m, grpo_kv *kv, const grpo_fwd_item *items, int n_items,
                       const float *hidden, int all, float *logits)
{
    return grpo_model__mtp_forward_ex(m, kv, items, n_items, hidden, all, 0, logits, NULL);
}

grpo_err
grpo_model__mtp_forward_ex(grpo_model *m, grpo_kv *kv, const grpo_fwd_item *items, int n_items,
                           const float *hidden, int all, int absorb, float *logits,
                           float *hidden_out)
{
    if (m == NULL || kv == NULL || items == NULL || hidden == NULL || logits == NULL ||
        n_items <= 0)
        return grpo__fail(GRPO_EINVAL,
                          "model: the MTP forward needs a model, an MTP pool, items, hidden "
                          "states and logits");
    if (m->mtp == NULL)
        return grpo__fail(GRPO_EINVAL, "model: no MTP module loaded (the checkpoint has none at "
                                       "layer num_hidden_layers, or load_mtp was off)");
    grpo_err err = check_items(m, kv, 1, items, n_items);
    if (err != GRPO_OK)
        return err;
    scratch s;
    if ((err = scratch_init(&s, m, kv, items, n_items, absorb, 0, NULL, 1)) != GRPO_OK)
        return err;
    int32_t *t0_of = malloc((size_t)n_items * sizeof *t0_of);
    if (t0_of == NULL)
        return grpo__fail(GRPO_ENOMEM, "model: out of memory");
    if ((err = stage_items(m, kv, items, n_items, t0_of, &s)) != GRPO_OK)
        goto done;
    mtp_input(m, hidden, &s);
    if ((err = mtp_layer_head(m, kv, items, n_items, t0_of, all, logits, hidden_out, &s)) !=
        GRPO_OK)
        goto done;
    for (int i = 0; i < n_items; i++)
        kv->seqs[items[i].seq].len = items[i].pos0 + items[i].n;
    err = grpo_model__backend_status(m);
done:
    free(t0_of);
    return err;
}
