/* grpo/model.h: DeepSeek-V3/R1 model loading (config.json + safetensors), the paged latent KV
 * cache, and one batched forward over sequences at different positions (prefill chunks and decode
 * steps mixed), on the CPU backend or, when built, the CUDA backend.
 *
 * Contract owned by the inference-core issue; the rollout engine builds on exactly this. */
#ifndef GRPO_MODEL_H
#define GRPO_MODEL_H

#include "grpo/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every config.json field that changes the computation. Unknown or unsupported values are refused
 * at load time with a message naming the field. */
typedef struct grpo_model_config {
    int32_t vocab_size, hidden_size, intermediate_size, moe_intermediate_size;
    int32_t num_hidden_layers, num_attention_heads;
    int32_t q_lora_rank; /* 0: plain q_proj (no LoRA), as in V2-Lite */
    int32_t kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
    int32_t n_routed_experts, n_shared_experts, num_experts_per_tok;
    int32_t n_group, topk_group, first_k_dense_replace, moe_layer_freq;
    float routed_scaling_factor;
    int32_t norm_topk_prob; /* bool */
    float rms_norm_eps;
    double rope_theta;
    int32_t rope_yarn; /* bool: rope_scaling.type == "yarn" */
    double yarn_factor, yarn_beta_fast, yarn_beta_slow, yarn_mscale, yarn_mscale_all_dim;
    int32_t yarn_original_max_position;
    int32_t max_position_embeddings;
    int32_t tie_word_embeddings; /* bool */
    int32_t num_nextn_predict_layers;
    int32_t fp8;          /* bool: quantization_config fp8 e4m3 with block scales */
    int32_t fp8_block[2]; /* weight_block_size, e.g. {128, 128} */
    int32_t bos_token_id, eos_token_id;
    /* Added by the inference core: */
    int32_t rope_interleave; /* bool: adjacent-pair rotation (transformers' default for V3) */
    float softmax_scale;     /* qk_head_dim^-0.5 * mscale(factor, mscale_all_dim)^2 if nonzero */
    float rope_attn_factor;  /* transformers' YaRN attention_factor multiplying cos and sin */
    int32_t n_moe_layers;    /* layers with a routed MoE (the rest are dense MLP) */
    /* The family (model_type) and, for the dense GQA families, their attention: */
    int32_t arch;                /* grpo_model_arch */
    int32_t num_key_value_heads; /* GQA: query heads per KV head = heads / this */
    int32_t head_dim;            /* GQA: per-head width of q, k and v */
    int32_t qkv_bias;            /* bool: q/k/v projections carry biases (qwen2, attention_bias) */
    int32_t o_bias;              /* bool: o_proj carries a bias (attention_bias of llama/qwen3) */
    int32_t qk_norm;             /* bool: per-head RMSNorm of q and k before rope (qwen3) */
    int32_t rope_llama3;         /* bool: rope_scaling type "llama3" */
    double llama3_factor, llama3_low_freq_factor, llama3_high_freq_factor;
    int32_t llama3_original_max_position;
} grpo_model_config;

/* model_type values grpo computes. */
typedef enum grpo_model_arch {
    GRPO_ARCH_DEEPSEEK_V3 = 0, /* MLA + MoE (DeepSeek-V3/R1, Moonlight, Kimi-K2) */
    GRPO_ARCH_QWEN2 = 1,       /* Qwen2/Qwen2.5, R1-Distill-Qwen: GQA with q/k/v biases */
    GRPO_ARCH_LLAMA = 2,       /* Llama 3.x, R1-Distill-Llama: GQA, llama3 rope scaling */
    GRPO_ARCH_QWEN3 = 3,       /* Qwen3 dense: GQA with per-head q/k RMSNorm */
    GRPO_ARCH_QWEN3_MOE = 4,   /* Qwen3 MoE: qwen3 attention, softmax top-k router, no shared */
    GRPO_ARCH_DEEPSEEK_V2 = 5  /* MLA + MoE with a softmax, greedy or group-limited router */
} grpo_model_arch;

/* The config's model_type as config.json spells it ("deepseek_v3", "qwen2", ...); static. */
const char *grpo_model_type_name(const grpo_model_config *cfg);

/* Floats the KV cache keeps per token per layer: kv_lora_rank + qk_rope_head_dim for MLA (the
 * latent and the rope key), 2 x num_key_value_heads x head_dim for GQA (keys then values). */
size_t grpo_model_kv_row(const grpo_model_config *cfg);

typedef struct grpo_model grpo_model;

/* Numerics of the forward. EXACT: fp32 activations, weights dequantized exactly (matches
 * transformers). Q8 (CPU backend only): FP8 projection and expert weights and the lm_head (any
 * dtype) requantized at load to int8 per 32 columns (llama.cpp's Q8_0 weights), activations
 * quantized per row and 32 columns to int16 at each of those GEMMs, exact integer block dot
 * products; about 1.8x the exact path's multiply-adds on AVX2 CPUs, not the exact path.
 * FP8 (DeepSeek-V3's FP8 inference; the CUDA backend's fast GEMMs): each GEMM over an FP8 weight
 * in 128x128 blocks takes its activations quantized to E4M3 per token and 128 columns (scale
 * amax / 448), each GEMM over a BF16 weight its activations rounded to BF16; attention, norms and
 * other weights stay fp32. On CUDA through cuBLASLt (block-scaled FP8, BF16); on the CPU the same
 * roundings before the exact kernels: the GPU numerics' twin, for checking them and measuring
 * them, not a faster CPU path. On CUDA, FP8 runs the GEMMs on our own tensor-core kernel, whose
 * outputs do not depend on the batch (the deterministic mode, the default for RL); FP8_NONDET
 * ("fp8-nondet", --deterministic off) has the same roundings through cuBLASLt, which picks its
 * algorithm from the batch size, so a sample's tokens can depend on what shares its batch (on the
 * CPU it is FP8). docs/model.md gives the measured accuracy of each. All but FP8_NONDET on CUDA
 * keep outputs independent of batch and threads. */
typedef enum grpo_numerics {
    GRPO_NUMERICS_EXACT = 0,
    GRPO_NUMERICS_Q8 = 1,
    GRPO_NUMERICS_FP8 = 2,
    GRPO_NUMERICS_FP8_NONDET = 3
} grpo_numerics;

/* The dtype of the KV cache rows. F32: today's cache, the exact path. BF16: every value rounded
 * to BF16 (nearest even) as it is written. FP8 (vLLM/SGLang's fp8_e4m3, FlashMLA's FP8 layout):
 * the MLA latent in E4M3 with one fp32 scale (amax / 448) per 128 values and the rope key in BF16;
 * GQA keys and values in E4M3 with one scale per head row. The attention reads the rows in that
 * dtype and converts them as it reads; outputs stay independent of batch and threads in each
 * (docs/model.md gives the measured accuracy). The CPU backend and the device-resident CUDA
 * model (backend 2) take all three; the staged CUDA table (backend 1) F32 only. */
typedef enum grpo_kv_dtype { GRPO_KV_F32 = 0, GRPO_KV_BF16 = 1, GRPO_KV_FP8 = 2 } grpo_kv_dtype;

typedef struct grpo_model_opts {
    int n_threads; /* CPU threads for the forward; <= 0: all CPUs */
    /* 0 = CPU; 1 = CUDA (when built), staged: each op copies its operands to the device and back;
     * 2 = CUDA device-resident: weights uploaded once at load, activations, scratch and the KV
     * pool (grpo_kv_create_for) in device memory, nothing copied per op but the positions and
     * tokens in and the logits out (what --gpu N selects; docs/cuda.md). */
    int backend;
    int load_mtp;  /* keep the MTP module (layer num_hidden_layers) when present */
    int numerics;  /* grpo_numerics (0 = exact) */
    int kv_dtype;  /* grpo_kv_dtype of the KV pools the forward takes (0 = f32) */
} grpo_model_opts;

/* "exact", "q8", "fp8" or "fp8-nondet" into *out; GRPO_EINVAL naming the accepted values
 * otherwise. */
grpo_err grpo_numerics_parse(const char *s, int *out);
const char *grpo_numerics_name(int numerics);
/* "f32", "bf16" or "fp8" into *out (grpo_kv_dtype); GRPO_EINVAL naming them otherwise. */
grpo_err grpo_kv_dtype_parse(const char *s, int *out);
const char *grpo_kv_dtype_name(int kv_dtype);

/* GRPO_OK when grpo_model_load() can use `backend` here: 0 always; 1 or 2 when this build has the
 * CUDA backend, its module loads and a device is visible (else the reason, as grpo_model_load
 * would give it). For failing fast, before a long set-up. */
grpo_err grpo_model_backend_check(int backend);
/* Loads dir/config.json and its safetensors (single file or sharded with an index), memory-mapped.
 * On success the caller owns *out and frees it with grpo_model_destroy(). */
grpo_err grpo_model_load(grpo_model **out, const char *dir, const grpo_model_opts *opts);
void grpo_model_destroy(grpo_model *m);
const grpo_model_config *grpo_model_get_config(const grpo_model *m);
/* sha256 over the weight files in name order (provenance). Computed on the first call (it reads
 * every weight byte); NULL if a file cannot be read (grpo_error_last() says why). */
const char *grpo_model_weights_sha256(const grpo_model *m);
/* Parses a config.json text (no weights) into *cfg; `where` names it in messages. */
grpo_err grpo_model_config_parse(grpo_model_config *cfg, const char *json, size_t len,
                                 const char *where);
/* True when the checkpoint's MTP module (layer num_hidden_layers) was found and loaded. */
int grpo_model_has_mtp(const grpo_model *m);
/* The numerics the model was loaded with (grpo_numerics). */
int grpo_model_numerics(const grpo_model *m);
/* The KV dtype the model was loaded with (grpo_kv_dtype): its forward takes pools of it only. */
int grpo_model_kv_dtype(const grpo_model *m);
/* Bytes of weights the forward reads per token at batch 1 (dense layers + attention + the
 * top-k routed and shared experts + lm_head), for bandwidth estimates. */
double grpo_model_bytes_per_token(const grpo_model *m);
/* Where a CPU forward's time goes: wall seconds and calls per op of the kernel table (GEMMs,
 * norms, attention forms, router, the whole-expert parallel section), and the time the calling
 * thread waited at the thread pool's barriers. set_profile(on) resets and starts the counters
 * (two clock reads per op), set_profile(0) stops them; GRPO_EINVAL on a GPU model. */
#define GRPO_MODEL_PROFILE_OPS 16
typedef struct grpo_model_profile {
    int n_ops;
    const char *op[GRPO_MODEL_PROFILE_OPS]; /* static strings */
    double seconds[GRPO_MODEL_PROFILE_OPS];
    uint64_t calls[GRPO_MODEL_PROFILE_OPS];
    uint64_t pool_calls;
    double pool_wait_s;
} grpo_model_profile;
grpo_err grpo_model_set_profile(grpo_model *m, int on);
void grpo_model_get_profile(const grpo_model *m, grpo_model_profile *out);

/* Paged KV pool: pages of GRPO_KV_PAGE tokens x layers x grpo_model_kv_row(cfg) values (the MLA
 * latent rows, or per-KV-head key and value rows) in one grpo_kv_dtype, refcounted; a page shared
 * by several sequences is copied on write. The budget counts bytes: a pool holds
 * budget / grpo_kv_page_bytes() pages, so a smaller row holds more tokens. */
#define GRPO_KV_PAGE 64
typedef struct grpo_kv grpo_kv;
/* An F32 pool (grpo_kv_create_dtype with GRPO_KV_F32). */
grpo_err grpo_kv_create(grpo_kv **out, const grpo_model_config *cfg, size_t budget_bytes);
/* A pool of kv_dtype rows; pass grpo_model_kv_dtype(m) for model m's forward. On success the
 * caller owns *out (grpo_kv_destroy). */
grpo_err grpo_kv_create_dtype(grpo_kv **out, const grpo_model_config *cfg, int kv_dtype,
                              size_t budget_bytes);
/* Model m's pool: its kv dtype, the pages in the memory its backend's ops work on (device memory
 * for a device-resident backend; host memory on the CPU, where it is grpo_kv_create_dtype). */
grpo_err grpo_kv_create_for(grpo_kv **out, const grpo_model *m, size_t budget_bytes);
int grpo_kv_get_dtype(const grpo_kv *kv);
void grpo_kv_destroy(grpo_kv *kv);
grpo_err grpo_kv_seq_new(grpo_kv *kv, int32_t *seq_out);
/* A new sequence sharing all of parent's pages read-only (the last partial page is copied when
 * either side writes into it). */
grpo_err grpo_kv_seq_fork(grpo_kv *kv, int32_t parent, int32_t *child_out);
void grpo_kv_seq_free(grpo_kv *kv, int32_t seq);
/* Drops positions len.. of a sequence (speculative decoding's rejected drafts): pages wholly past
 * len are released (a shared one only loses this sequence's reference); rows past len in the kept
 * last page are overwritten by the next append. GRPO_EINVAL for an unknown sequence or a len
 * outside 0..current length. */
grpo_err grpo_kv_seq_truncate(grpo_kv *kv, int32_t seq, int32_t len);
int32_t grpo_kv_seq_len(const grpo_kv *kv, int32_t seq);
size_t grpo_kv_pages_total(const grpo_kv *kv);
size_t grpo_kv_pages_used(const grpo_kv *kv);
size_t grpo_kv_page_bytes(const grpo_kv *kv);
/* A row holds [normalized kv_lora latent | rotated rope key] per token per layer for MLA;
 * [rotated keys (kv heads, head_dim) | values (kv heads, head_dim)] for GQA; in F32, BF16 or FP8
 * (grpo_kv_dtype; bytes per row: grpo_kv_row_bytes). */

/* One forward over a ragged batch: item i appends n tokens to sequence seq at positions
 * pos0..pos0+n-1 (a prefill chunk or a single decode token; pos0 must equal the sequence's current
 * length) and gets the logits of its last token. Per-row results do not depend on the batch or the
 * thread count (they do depend on how a sequence's own tokens were split into items: a single-token
 * item takes the absorbed attention path, a chunk the naive one; equal to ~1e-6, not bit for bit).
 * Items must extend distinct sequences. A batch needing more KV pages than are free fails with
 * GRPO_EFULL before anything changes. One forward at a time per model. */
typedef struct grpo_fwd_item {
    int32_t seq, pos0, n;
    const int32_t *tokens;
} grpo_fwd_item;
grpo_err grpo_model_forward(grpo_model *m, grpo_kv *kv, const grpo_fwd_item *items, int n_items,
                            float *logits /* (n_items, vocab) */);
/* Teacher-forced scoring: logits for every position of every item (sum of n rows, vocab). */
grpo_err grpo_model_forward_all(grpo_model *m, grpo_kv *kv, const grpo_fwd_item *items, int n_items,
                                float *logits);
/* Routing record. A token's routes: per MoE layer (in layer order) the router's top-k expert ids
 * in its choice order, grpo_model_route_bytes() each (uint8 when n_routed_experts <= 256, else
 * int16 in host order); grpo_model_route_row_bytes() in all (0 without routed experts). */
int grpo_model_route_bytes(const grpo_model_config *c);
size_t grpo_model_route_row_bytes(const grpo_model_config *c);
/* grpo_model_forward that also writes item i's routes into routes[i] (NULL: not wanted; else
 * room for items[i].n tokens). The logits are the same bits as without. */
grpo_err grpo_model_forward_routes(grpo_model *m, grpo_kv *kv, const grpo_fwd_item *items,
                                   int n_items, float *logits, void *const *routes);
/* grpo_model_forward (all = 0) or grpo_model_forward_all (all = 1) that also writes into hidden
 * (sum of n rows, hidden_size) every token's final hidden state after the final RMSNorm
 * (model.norm: the input of lm_head, and the input the MTP module takes). NULL hidden: not wanted.
 * The logits are the same bits as without. */
grpo_err grpo_model_forward_hidden(grpo_model *m, grpo_kv *kv, const grpo_fwd_item *items,
                                   int n_items, int all, float *logits, float *hidden);

/* Multi-token prediction: the checkpoint's MTP module (DeepSeek-V3/R1's layer num_hidden_layers,
 * num_nextn_predict_layers 1; load it with grpo_model_opts.load_mtp). For position t it takes the
 * main model's final-normed hidden state h_t (grpo_model_forward_hidden) and the token at t + 1:
 * x = eh_proj [enorm(embed(token t+1)); hnorm(h_t)] (embedding first), one decoder layer (MLA +
 * MoE or MLP) at rope position t attending to the MTP cache of positions 0..t, then
 * shared_head.norm and shared_head.head: logits for the token at t + 2. CPU backend only.
 * docs/model.md (MTP) says what this was checked against. */
/* A pool of one layer for the MTP decoder layer, in the model's kv dtype (same paging, forking
 * and accounting as grpo_kv_create_dtype); GRPO_EINVAL when the model has no MTP module loaded.
 * The caller owns *out (grpo_kv_destroy). */
grpo_err grpo_kv_create_mtp(grpo_kv **out, const grpo_model *m, size_t budget_bytes);
/* One MTP forward over a ragged batch, as grpo_model_forward over an MTP pool: item i appends n
 * positions pos0..pos0+n-1 to MTP sequence seq (pos0 must equal its length); tokens[j] is the
 * token at position pos0 + j + 1 (the one after the position) and hidden (sum of n rows,
 * hidden_size; item i's rows after item i-1's) the main model's final-normed hidden state at
 * position pos0 + j. logits: the last position's row per item (all = 0: n_items rows) or every
 * position's (all = 1: sum of n rows), vocab wide. Per-row results do not depend on the batch or
 * the thread count; a single-position item takes the absorbed attention form, a chunk the naive
 * one (equal to ~1e-6). GRPO_EINVAL on a model without MTP, a GPU model or a pool not made by
 * grpo_kv_create_mtp; GRPO_EFULL as grpo_model_forward, before anything changes. */
grpo_err grpo_model_mtp_forward(grpo_model *m, grpo_kv *mtp_kv, const grpo_fwd_item *items,
                                int n_items, const float *hidden, int all, float *logits);

#ifdef __cplusplus
}
#endif
/* ---- capacity planning (`grpo plan`; rollout/model/plan.c) ---- */
/* Bytes of one token's cache row in one layer, as the pool stores it: f32 4 x (kv_lora_rank +
 * rope dim); BF16 half that; FP8 (the FlashMLA / vLLM fp8_e4m3 layout) the latent in E4M3 with one
 * fp32 scale per 128 values and the rope key in BF16 (656 B for DeepSeek-V3); GQA rows 4, 2 or
 * 1 byte per key/value plus, in FP8, 4 bytes per head row. */
double grpo_kv_row_bytes(const grpo_model_config *c, int kv_dtype);

typedef struct grpo_plan_opts {
    int32_t gpus;         /* routed experts split over them; the rest replicated (default 8) */
    double gpu_mem_bytes; /* per GPU (default an H200: 143,771 MiB) */
    double mem_fraction;  /* of it for weights + KV cache; the rest for activations (0.90) */
    int32_t kv_dtype;     /* grpo_kv_dtype (default BF16) */
    int32_t group;        /* samples per prompt G (default 64) */
    int64_t ctx;          /* tokens per sample, prompt included (default 32768) */
    int64_t prompt;       /* tokens of it shared by the group's samples (default 0) */
    int32_t mtp;          /* count the checkpoint's MTP modules on every GPU */
} grpo_plan_opts;

typedef struct grpo_plan {
    double params_total, params_mtp;      /* parameters (MTP modules apart) */
    double weights_total, weights_mtp;    /* bytes in the checkpoint's dtypes */
    double weights_replicated;            /* attention, dense layers, shared experts, vocab */
    double weights_experts;               /* all routed experts */
    double weights_per_gpu;               /* replicated + this GPU's experts (+ MTP if asked) */
    int32_t experts_per_gpu, fits;        /* fits: weights leave room for a KV cache */
    double kv_bytes_per_token;            /* every layer's latent row */
    double kv_bytes_per_gpu;              /* memory left for the cache on each GPU */
    int64_t tokens_per_gpu, tokens_total; /* cache capacity in whole pages */
    int64_t tokens_per_group;             /* one group at ctx: shared prompt pages + G samples */
    int64_t groups_per_gpu, groups_total; /* groups at ctx that fit at once */
    int64_t max_ctx_at_group;             /* longest ctx per sample with one group per GPU */
} grpo_plan;

void grpo_plan_opts_default(grpo_plan_opts *o);
grpo_err grpo_plan_compute(const grpo_model_config *c, const grpo_plan_opts *o, grpo_plan *p);

#endif
