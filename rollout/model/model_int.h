/* Private declarations of the model module: safetensors files, the weight layout, the paged KV
 * pool internals the forward reads. */
#ifndef GRPO_MODEL_INT_H
#define GRPO_MODEL_INT_H

#include "common/common_int.h"
#include "grpo/model.h"
#include "kernels/kernels.h"

#include <cjson/cJSON.h>

/* ---- safetensors ---- */
#define GRPO_ST_MAX_HEADER (100u << 20) /* 100 MiB of JSON header at most */
#define GRPO_ST_MAX_DIMS 8

typedef struct grpo_st_tensor {
    char *name;
    int dtype; /* grpo_dtype, or -1 for a valid safetensors dtype we do not compute in */
    char dtype_name[12];
    int ndim;
    int64_t shape[GRPO_ST_MAX_DIMS];
    uint64_t begin, end; /* byte offsets in the data section */
    int file;            /* index into the model's file list */
    const void *data;    /* inside the mapping */
    int used;
} grpo_st_tensor;

typedef struct grpo_st_header {
    grpo_st_tensor *t;
    int n;
    uint64_t data_off; /* 8 + header length */
} grpo_st_header;

/* Parses and validates the header of a safetensors image buf[0..len) (the whole file): header
 * length bounded, JSON, known dtypes, shapes, byte sizes, offsets inside the data, no overlaps,
 * unique names (the shared parser, common/safetensors.h, with the model's options).
 * `where` (the file path) prefixes messages. Sets every tensor's data pointer into buf. */
grpo_err grpo_model__st_parse(const uint8_t *buf, size_t len, const char *where,
                              grpo_st_header *out);
void grpo_model__st_header_fini(grpo_st_header *h);

typedef struct grpo_st_file {
    char *path;
    void *map;
    size_t size;
    grpo_st_header h;
} grpo_st_file;

/* Maps path read-only and parses its header (messages name the path and the tensor). */
grpo_err grpo_model__st_open(grpo_st_file *f, const char *path);
void grpo_model__st_close(grpo_st_file *f);

/* ---- config ---- */
/* The DeepSeek families (deepseek_v3, deepseek_v2): MLA attention over the latent cache. */
static inline int
grpo_model__is_mla(const grpo_model_config *c)
{
    return c->arch == GRPO_ARCH_DEEPSEEK_V3 || c->arch == GRPO_ARCH_DEEPSEEK_V2;
}
grpo_err grpo_model__config_from_json(grpo_model_config *c, const cJSON *j, const char *where);
/* The dense GQA families (qwen2, llama, qwen3) of model_type mt (config_gqa.c); refuses any
 * other model_type by name. */
grpo_err grpo_model__config_gqa(grpo_model_config *c, const cJSON *j, const char *where,
                                const char *mt);
/* config.json fields shared by every family (config.c): an int32 in [lo, 2^31) (req: must be
 * there; else *out keeps its default when absent), a bool, and a debug line per key not in
 * known (n entries, or up to a NULL). */
grpo_err grpo_model__cfg_int(const cJSON *j, const char *key, const char *w, int64_t lo, int req,
                             int32_t *out);
grpo_err grpo_model__cfg_bool(const cJSON *j, const char *key, const char *w, int32_t *out);
void grpo_model__log_unknown(const cJSON *j, const char *w, const char *const *known, size_t n);
/* quantization_config (fp8 e4m3 with block scales only), shared by every family. */
grpo_err grpo_model__config_quant(grpo_model_config *c, const cJSON *q, const char *where);
/* A token id, or the first of a list of them; absent or null leaves *out. */
grpo_err grpo_model__config_token_id(const cJSON *j, const char *key, const char *where,
                                     int32_t *out);

/* ---- weights ---- */
typedef struct grpo_mlp_w {
    grpo_kw gate, up, down;
} grpo_mlp_w;

typedef struct grpo_layer_w {
    float *attn_norm, *mlp_norm, *q_a_norm, *kv_a_norm;
    grpo_kw q_proj, q_a, q_b, kv_a, kv_b, o;
    int moe;
    grpo_mlp_w mlp; /* dense layers */
    grpo_kw router;
    float *bias; /* e_score_correction_bias, NULL when absent */
    grpo_mlp_w *experts, shared;
    /* GQA (q_proj and o above): */
    grpo_kw k_proj, v_proj;
    float *q_bias, *k_bias, *v_bias, *o_bias; /* NULL when the family has none */
    float *q_norm, *k_norm;                   /* qwen3: per-head RMSNorm weights (head_dim) */
} grpo_layer_w;

typedef struct grpo_mtp_w {
    grpo_layer_w layer;
    float *enorm, *hnorm, *head_norm;
    grpo_kw eh_proj, head, embed;
} grpo_mtp_w;

/* A decode step recorded as a CUDA graph (forward.c), for steps of T tokens over tables of maxp
 * pages per query making nd draws (grpo_model__forward_sample; 0 = none), while the backend's
 * scratch (epoch) and the forward's (arena) stay where they were; g NULL: the step could not be
 * recorded (it runs without). */
#define GRPO_MODEL_GRAPHS 16
typedef struct grpo_model_graph {
    int T, maxp, nd;
    uint64_t epoch;
    const void *arena;
    size_t arena_size;
    void *g;
} grpo_model_graph;

struct grpo_model {
    grpo_model_config cfg;
    char *dir;
    grpo_st_file *files;
    int n_files;
    grpo_st_tensor **by_name; /* every tensor of every file, sorted by name */
    int n_tensors;
    void **owned; /* heap copies (fp32 vectors, realigned tensors) and huge-page regions */
    int n_owned, cap_owned;
    char *region_at; /* the free part of the last huge-page region (grpo_model__own) */
    size_t region_left;
    grpo_kw embed, lm_head;
    float *final_norm;
    grpo_layer_w *layers;
    grpo_mtp_w *mtp;
    float *inv_freq; /* qk_rope_head_dim / 2 */
    grpo_kernels *k;
    int k_cuda; /* k is the CUDA table of libgrpo_cuda.so (destroyed by it) */
    char sha[65];
    int sha_done;
    /* Debugging/tests: called with the residual stream (T, hidden) after the embedding (stage 0)
     * and after each layer i (stage i + 1), and with the final-normed rows that get logits
     * (stage num_hidden_layers + 1). */
    void (*debug_hidden)(void *ctx, int stage, int rows, int hidden, const float *h);
    void *debug_ctx;
    void *scratch;    /* the forward's grow-only scratch blocks (forward.c): host memory, */
    void *scratch_op; /* and the backend's op memory (kernels.h) */
    size_t scratch_op_size;
    void **op_owned; /* weights uploaded into op memory (upload.c), freed with m->k */
    int n_op_owned, cap_op_owned;
    grpo_kernels *k_own; /* tests: the table the model opened, when m->k is a caller's */
    int numerics;        /* grpo_numerics */
    int kv_dtype;        /* grpo_kv_dtype of the pools the forward accepts */
    int naive_heads;     /* tests: heads per naive-attention group (0 = default) */
    size_t scratch_size;
    grpo_model_graph graphs[GRPO_MODEL_GRAPHS]; /* decode steps recorded (forward.c) */
    int n_graphs, next_graph;
    int graphs_off; /* GRPO_CUDA_GRAPHS=0, or tests: every step without */
    long graph_launches; /* recorded steps replayed (tests, bench_model) */
};
/* Releases the recorded decode steps (before the table goes, or when it changes). */
void grpo_model__graphs_free(grpo_model *m);

grpo_err grpo_model__bind_weights(grpo_model *m, int load_mtp);
/* Every weight into the backend's op memory, once (nothing where that is host memory). */
grpo_err grpo_model__weights_to_op_memory(grpo_model *m);
void grpo_model__op_memory_free(grpo_model *m);
/* Tests: runs m on the caller's table k from now on (k outlives m): its weights are uploaded into
 * k's op memory, the scratch starts afresh; the table the model opened is destroyed with it. */
grpo_err grpo_model__use_backend(grpo_model *m, grpo_kernels *k);
/* fn over every matrix of layer l (q_proj, q_a, q_b, kv_a, kv_b, o, router, k_proj, v_proj, then
 * the dense MLP's or the routed and shared experts' gate, up and down; absent ones have no data),
 * stopping at the first error (upload.c). */
typedef grpo_err (*grpo_model_kw_fn)(grpo_model *m, grpo_kw *w, void *ctx);
grpo_err grpo_model__each_layer_kw(grpo_model *m, grpo_layer_w *l, grpo_model_kw_fn fn, void *ctx);
/* The Q8 numerics option: FP8 GEMM weights requantized into owned buffers (requant.c). */
grpo_err grpo_model__requant_q8(grpo_model *m);
void *grpo_model__own(grpo_model *m, size_t bytes);
/* The softmax routers on fp32 logits (M, E), overwritten with the probabilities: Qwen3-MoE's
 * (Qwen3MoeSparseMoeBlock: n_group 1, scale 1) and DeepSeek-V2's (DeepseekV2MoEGate: "greedy" is
 * n_group 1; "group_limited_greedy" keeps the topk_group of n_group groups with the largest
 * maximum probability). The top_k largest (ties to the lower expert id), divided by their sum when
 * norm, times scale. idx (M, top_k) in ascending expert order, wts (M, top_k). Row by row, fixed
 * order. */
void grpo_model__route_softmax(int M, float *logits, int E, int n_group, int topk_group, int top_k,
                               int norm, float scale, int32_t *idx, float *wts);
/* A matrix (rows, cols) in F32/BF16/F16 (F8_E4M3 + NAME_scale_inv when config.json declares fp8);
 * a vector of n values as an owned fp32 copy. Shapes and dtypes checked, messages name the file. */
grpo_err grpo_model__bind_mat(grpo_model *m, const char *name, int rows, int cols, grpo_kw *out);
grpo_err grpo_model__bind_vec(grpo_model *m, const char *name, int n, float **out);
/* GQA attention weights of one layer (weights_gqa.c), names as transformers writes them. */
grpo_err grpo_model__bind_attn_gqa(grpo_model *m, const char *pre, grpo_layer_w *l);
/* A decode step's cache tables in op memory (forward.c stage_tabs: row t of the step is its own
 * query): each row's cache row and pages at layer 0, maxp pages each, and its length. */
typedef struct grpo_model_tabs {
    void *const *rows;
    const void *const *ptab;
    const int32_t *len;
    int maxp;
} grpo_model_tabs;
/* The forward's GQA attention over every item of the batch (forward_gqa.c): x (T, hidden) normed
 * inputs at positions pos (T); appends each token's keys/values to the cache and adds o_proj of
 * the attention output to h (T, hidden). q, kv, ao: scratch of T x heads x head_dim, T x
 * grpo_model_kv_row() and T x heads x head_dim floats; t0_of[i]: item i's first row. tabs: the
 * step's tables (the cache written and read through kv_write_tab and gqa_attn_tab, so that the
 * step needs nothing from the host), or NULL (the items' tables built here). */
grpo_err grpo_model__attn_gqa(grpo_model *m, grpo_kv *kv, const grpo_layer_w *l, int layer,
                              const grpo_fwd_item *items, int n_items, const int32_t *t0_of, int T,
                              const grpo_model_tabs *tabs, const int32_t *pos, const float *x,
                              float *q, float *kvr, float *ao, float *tmp, float *h);

/* ---- KV pool ---- */
typedef struct grpo_kv_seq {
    int32_t used, len, n_pages, cap_pages;
    int32_t *pages;
} grpo_kv_seq;

struct grpo_kv {
    int32_t n_layers, row; /* row = grpo_model_kv_row(cfg) values */
    int32_t dtype;         /* grpo_kv_dtype */
    grpo_kv_fmt fmt;       /* one row in that dtype (kernels.h) */
    size_t page_bytes;     /* n_layers * GRPO_KV_PAGE * fmt.bytes */
    size_t n_pages;
    uint8_t *mem;
    struct grpo_kernels *k; /* the backend whose op memory holds mem, or NULL: host (calloc) */
    int32_t *refcnt;
    int32_t *free_list;
    size_t n_free;
    grpo_kv_seq *seqs;
    int32_t n_seqs, cap_seqs;
};

/* The pool's pages are where m's backend's ops can reach them (grpo_kv_create_for). */
int grpo_kv__usable_by(const grpo_kv *kv, const grpo_model *m);
/* Makes positions [pos0, pos0+n) of seq writable (allocating pages, copying a shared last page).
 * Fails with GRPO_EFULL leaving the sequence unchanged when the pool is out of pages. */
grpo_err grpo_kv__reserve(grpo_kv *kv, int32_t seq, int32_t pos0, int32_t n);
/* Pages needed to make [pos0, pos0+n) of seq writable. */
size_t grpo_kv__pages_needed(const grpo_kv *kv, int32_t seq, int32_t pos0, int32_t n);
/* Where layer `layer`'s rows start in a page. */
static inline size_t
grpo_kv__layer_off(const grpo_kv *kv, int32_t layer)
{
    return (size_t)layer * GRPO_KV_PAGE * (size_t)kv->fmt.bytes;
}
/* Layer `layer` of a page: GRPO_KV_PAGE rows of kv->fmt.bytes. */
static inline uint8_t *
grpo_kv__page(const grpo_kv *kv, int32_t page, int32_t layer)
{
    return kv->mem + (size_t)page * kv->page_bytes + grpo_kv__layer_off(kv, layer);
}
/* The row format of the cache of cfg in kv_dtype (MLA: E4M3 latent in blocks of 128, BF16 rope
 * key; GQA: E4M3 keys and values with a scale per head row). */
grpo_kv_fmt grpo_model__kv_fmt(const grpo_model_config *cfg, int kv_dtype);
/* Appends the fp32 row x (kv->row values) of position pos of seq's layer `layer`, converted to
 * the pool's dtype (the position's page already made writable by grpo_kv__reserve). */
void grpo_kv__put(grpo_kv *kv, int32_t seq, int32_t layer, int32_t pos, const float *x);
/* Where grpo_kv__put would write that row (kv->fmt.bytes), for the backend's kv_write. */
void *grpo_kv__row(grpo_kv *kv, int32_t seq, int32_t layer, int32_t pos);

/* GRPO_OK, or the first error the backend's ops hit (the CUDA table keeps it and reports it on
 * every later call; the CPU table has none). Called at the end of every forward. */
grpo_err grpo_model__backend_status(grpo_model *m);
/* Speculative decoding's verify forward: item i gets the logits of its last tail[i] positions
 * (rows in item order; NULL: the last one), routes as grpo_model_forward_routes (NULL: none) and
 * hidden as grpo_model_forward_hidden (NULL: none). An item of at most `absorb` tokens takes the
 * absorbed attention form token by token (each its own query over the positions up to it), so
 * its rows are the bits single-token decode gives; longer items take the naive form. */
grpo_err grpo_model__forward_spec(grpo_model *m, grpo_kv *kv, const grpo_fwd_item *items,
                                  int n_items, const int32_t *tail, int absorb, float *logits,
                                  void *const *routes, float *hidden);
/* Draws made by the backend where the logits are (its kernels' sample entry), so the logits never
 * leave its memory: draw i from logits row rows[i] of the forward (rows as grpo_model_forward's,
 * one per item) with keys[i], its token (-1: the row held NaN or +inf) and logprobs into the host
 * arrays tok, lp_raw, lp_proc (n each; n 0: a forward whose logits are not wanted). */
typedef struct grpo_model_draws {
    int n;
    const int32_t *rows;
    const grpo_sample_key *keys;
    int32_t *tok;
    float *lp_raw, *lp_proc;
} grpo_model_draws;
/* grpo_model_forward_routes (routes NULL: none) with the draws d instead of logits;
 * GRPO_EUNSUPPORTED when the backend has no sampler (grpo_model__can_sample). */
grpo_err grpo_model__forward_sample(grpo_model *m, grpo_kv *kv, const grpo_fwd_item *items,
                                    int n_items, void *const *routes, const grpo_model_draws *d);
int grpo_model__can_sample(const grpo_model *m);

/* grpo_model_mtp_forward that also writes each logits row's MTP output state (after
 * shared_head.norm; rows as logits, hidden_size each) into hidden_out (NULL: not wanted), the h a
 * chained draft step feeds back; absorb as grpo_model__forward_spec. */
grpo_err grpo_model__mtp_forward_ex(grpo_model *m, grpo_kv *kv, const grpo_fwd_item *items,
                                    int n_items, const float *hidden, int all, int absorb,
                                    float *logits, float *hidden_out);

/* Copies MoE layer moe_layer's router choices ri (T, top-k; rows in item order, item i from row
 * t0_of[i]) into routes[i] for every item that has a buffer (routes.c). */
void grpo_model__routes_put(const grpo_model *m, const grpo_fwd_item *items, int n_items,
                            const int32_t *t0_of, int moe_layer, const int32_t *ri,
                            void *const *routes);

#endif
