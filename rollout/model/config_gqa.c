/* config.json of the GQA families: qwen2 (Qwen2/Qwen2.5, R1-Distill-Qwen), llama (Llama 3.x,
 * R1-Distill-Llama), qwen3 and qwen3_moe. Every field that changes the computation is read as
 * transformers' classes of the same names read it; what we do not implement (sliding windows, rope
 * types other than default and llama3, partial rotary, MLP biases, ...) is refused by name. */
#include "rollout/model/model_int.h"
#include "common/json.h"

#include <math.h>
#include <string.h>

#define I32MAX 2147483647LL

typedef struct {
    const char *name;
    grpo_model_arch arch;
} family;

static const family families[] = {
    {"qwen2", GRPO_ARCH_QWEN2},
    {"llama", GRPO_ARCH_LLAMA},
    {"qwen3", GRPO_ARCH_QWEN3},
    {"qwen3_moe", GRPO_ARCH_QWEN3_MOE},
};

/* Keys these families' configs carry that are read here, inert at inference (dropout, aux
 * losses, window sizes while windows are off) or generation defaults; any other key is logged at
 * debug level, so that a new field is noticed rather than silently ignored. */
static const char *const known_keys[] = {"architectures",
                                         "model_type",
                                         "torch_dtype",
                                         "dtype",
                                         "transformers_version",
                                         "_name_or_path",
                                         "vocab_size",
                                         "hidden_size",
                                         "intermediate_size",
                                         "num_hidden_layers",
                                         "num_attention_heads",
                                         "num_key_value_heads",
                                         "head_dim",
                                         "hidden_act",
                                         "rms_norm_eps",
                                         "rope_theta",
                                         "rope_scaling",
                                         "rope_parameters",
                                         "max_position_embeddings",
                                         "tie_word_embeddings",
                                         "attention_bias",
                                         "attention_dropout",
                                         "mlp_bias",
                                         "pretraining_tp",
                                         "use_sliding_window",
                                         "sliding_window",
                                         "max_window_layers",
                                         "layer_types",
                                         "use_mrope",
                                         "quantization_config",
                                         "bos_token_id",
                                         "eos_token_id",
                                         "pad_token_id",
                                         "initializer_range",
                                         "use_cache",
                                         "num_experts",
                                         "num_experts_per_tok",
                                         "moe_intermediate_size",
                                         "norm_topk_prob",
                                         "decoder_sparse_step",
                                         "mlp_only_layers",
                                         "output_router_logits",
                                         "router_aux_loss_coef",
                                         "partial_rotary_factor",
                                         "id2label",
                                         "label2id",
                                         "return_dict",
                                         "output_hidden_states",
                                         "output_attentions",
                                         "torchscript",
                                         "is_decoder",
                                         "is_encoder_decoder",
                                         "use_bfloat16",
                                         "tokenizer_class",
                                         "problem_type",
                                         "temperature",
                                         "top_k",
                                         "top_p",
                                         "do_sample",
                                         "max_length",
                                         "min_length",
                                         "repetition_penalty",
                                         "num_beams",
                                         NULL};

static int
present(const cJSON *j, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(j, key);
    return it != NULL && !cJSON_IsNull(it);
}

/* Sliding-window attention: refused wherever a config turns it on (use_sliding_window, or a
 * layer_types entry other than full_attention). A sliding_window size alone is inert. */
static grpo_err
check_window(const cJSON *j, const char *w)
{
    int32_t sw = 0;
    grpo_err err = grpo_model__cfg_bool(j, "use_sliding_window", w, &sw);
    if (err != GRPO_OK)
        return err;
    if (sw)
        return grpo__fail(GRPO_EUNSUPPORTED,
                          "%s: \"use_sliding_window\": true is not supported (sliding-window "
                          "attention)",
                          w);
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(j, "layer_types");
    if (lt == NULL || cJSON_IsNull(lt))
        return GRPO_OK;
    if (!cJSON_IsArray(lt))
        return grpo__fail(GRPO_EFORMAT, "%s: \"layer_types\" must be a list", w);
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, lt)
    {
        if (!cJSON_IsString(it) || strcmp(it->valuestring, "full_attention") != 0)
            return grpo__fail(GRPO_EUNSUPPORTED,
                              "%s: \"layer_types\"[%d] is %s; only \"full_attention\" is "
                              "supported",
                              w, i, cJSON_IsString(it) ? it->valuestring : "not a string");
        i++;
    }
    return GRPO_OK;
}

/* Keys whose mere presence with a non-default value would change the computation. */
static grpo_err
check_refused(const cJSON *j, const char *w)
{
    static const char *const absent[] = {"attention_sinks",         "attn_logit_softcapping",
                                         "final_logit_softcapping", "no_rope_layers",
                                         "embedding_multiplier",    "logits_scaling"};
    for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++)
        if (present(j, absent[i]))
            return grpo__fail(GRPO_EUNSUPPORTED, "%s: \"%s\" is not supported", w, absent[i]);
    double prf = 1.0;
    int32_t mlp_bias = 0, tp = 1, mrope = 0;
    grpo_err err;
    if ((err = grpo__json_num_opt(j, "partial_rotary_factor", w, &prf)) != GRPO_OK ||
        (err = grpo_model__cfg_bool(j, "mlp_bias", w, &mlp_bias)) != GRPO_OK ||
        (err = grpo_model__cfg_bool(j, "use_mrope", w, &mrope)) != GRPO_OK ||
        (err = grpo_model__cfg_int(j, "pretraining_tp", w, 1, 0, &tp)) != GRPO_OK)
        return err;
    if (prf != 1.0)
        return grpo__fail(GRPO_EUNSUPPORTED,
                          "%s: \"partial_rotary_factor\" is %g; only 1 is supported", w, prf);
    if (mrope)
        return grpo__fail(GRPO_EUNSUPPORTED, "%s: \"use_mrope\": true is not supported", w);
    if (mlp_bias)
        return grpo__fail(GRPO_EUNSUPPORTED, "%s: \"mlp_bias\": true is not supported", w);
    if (tp != 1)
        return grpo__fail(GRPO_EUNSUPPORTED, "%s: \"pretraining_tp\" must be 1", w);
    const char *act = NULL;
    if ((err = grpo__json_str_opt(j, "hidden_act", w, &act)) != GRPO_OK)
        return err;
    if (act != NULL && strcmp(act, "silu") != 0)
        return grpo__fail(GRPO_EUNSUPPORTED,
                          "%s: \"hidden_act\" is \"%s\"; only \"silu\" is "
                          "supported",
                          w, act);
    return GRPO_OK;
}

/* rope_scaling "llama3": transformers' _compute_llama3_parameters. */
static grpo_err
parse_llama3(grpo_model_config *c, const cJSON *rs, const char *where)
{
    static const char *const ok[] = {"type",
                                     "rope_type",
                                     "factor",
                                     "low_freq_factor",
                                     "high_freq_factor",
                                     "original_max_position_embeddings",
                                     "rope_theta"};
    const cJSON *it;
    cJSON_ArrayForEach(it, rs)
    {
        size_t i = 0;
        while (i < sizeof ok / sizeof ok[0] && strcmp(ok[i], it->string) != 0)
            i++;
        if (i == sizeof ok / sizeof ok[0])
            return grpo__fail(GRPO_EUNSUPPORTED, "%s: \"%s\" is not supported", where, it->string);
    }
    grpo_err err;
    if ((err = grpo__json_num(rs, "factor", where, &c->llama3_factor)) != GRPO_OK ||
        (err = grpo__json_num(rs, "low_freq_factor", where, &c->llama3_low_freq_factor)) !=
            GRPO_OK ||
        (err = grpo__json_num(rs, "high_freq_factor", where, &c->llama3_high_freq_factor)) !=
            GRPO_OK ||
        (err = grpo_model__cfg_int(rs, "original_max_position_embeddings", where, 1, 1,
                                   &c->llama3_original_max_position)) != GRPO_OK)
        return err;
    if (!(c->llama3_factor > 0) || !(c->llama3_low_freq_factor > 0) ||
        !(c->llama3_high_freq_factor > c->llama3_low_freq_factor))
        return grpo__fail(GRPO_EFORMAT,
                          "%s: factor and low_freq_factor must be positive and "
                          "high_freq_factor above low_freq_factor",
                          where);
    c->rope_llama3 = 1;
    return GRPO_OK;
}

static grpo_err
parse_rope(grpo_model_config *c, const cJSON *rs, const char *w)
{
    char where[512];
    snprintf(where, sizeof where, "%s: rope_scaling", w);
    if (!cJSON_IsObject(rs))
        return grpo__fail(GRPO_EFORMAT, "%s: must be an object or null", where);
    const char *type = NULL;
    grpo_err err;
    if ((err = grpo__json_str_opt(rs, "rope_type", where, &type)) != GRPO_OK)
        return err;
    if (type == NULL && (err = grpo__json_str(rs, "type", where, &type)) != GRPO_OK)
        return err;
    if ((err = grpo__json_num_opt(rs, "rope_theta", where, &c->rope_theta)) != GRPO_OK)
        return err;
    if (strcmp(type, "default") == 0)
        return GRPO_OK;
    if (strcmp(type, "llama3") == 0)
        return parse_llama3(c, rs, where);
    return grpo__fail(GRPO_EUNSUPPORTED,
                      "%s: type \"%s\" is not supported for this model_type (default or llama3)",
                      where, type);
}

static grpo_err
parse_dims(grpo_model_config *c, const cJSON *j, const char *w)
{
    grpo_err err;
    if ((err = grpo_model__cfg_int(j, "vocab_size", w, 1, 1, &c->vocab_size)) != GRPO_OK ||
        (err = grpo_model__cfg_int(j, "hidden_size", w, 1, 1, &c->hidden_size)) != GRPO_OK ||
        (err = grpo_model__cfg_int(j, "intermediate_size", w, 1, 1, &c->intermediate_size)) !=
            GRPO_OK ||
        (err = grpo_model__cfg_int(j, "num_hidden_layers", w, 1, 1, &c->num_hidden_layers)) !=
            GRPO_OK ||
        (err = grpo_model__cfg_int(j, "num_attention_heads", w, 1, 1, &c->num_attention_heads)) !=
            GRPO_OK ||
        (err = grpo_model__cfg_int(j, "max_position_embeddings", w, 1, 1,
                                   &c->max_position_embeddings)) != GRPO_OK)
        return err;
    c->num_key_value_heads = c->num_attention_heads;
    /* transformers: head_dim from the config when set (Qwen3Config defaults it to 128), else
     * hidden_size / num_attention_heads */
    c->head_dim = c->arch == GRPO_ARCH_QWEN3 || c->arch == GRPO_ARCH_QWEN3_MOE
                      ? 128
                      : c->hidden_size / c->num_attention_heads;
    if ((err = grpo_model__cfg_int(j, "num_key_value_heads", w, 1, 0, &c->num_key_value_heads)) !=
            GRPO_OK ||
        (err = grpo_model__cfg_int(j, "head_dim", w, 1, 0, &c->head_dim)) != GRPO_OK)
        return err;
    if (c->num_attention_heads % c->num_key_value_heads != 0)
        return grpo__fail(GRPO_EFORMAT,
                          "%s: \"num_attention_heads\" %d is not a multiple of "
                          "\"num_key_value_heads\" %d",
                          w, c->num_attention_heads, c->num_key_value_heads);
    if (c->head_dim < 2 || c->head_dim % 2 != 0 || c->head_dim > 512)
        return grpo__fail(GRPO_EUNSUPPORTED,
                          "%s: \"head_dim\" is %d; expected an even number "
                          "in [2, 512]",
                          w, c->head_dim);
    if ((int64_t)c->num_attention_heads * c->head_dim > 1 << 20)
        return grpo__fail(GRPO_EFORMAT, "%s: num_attention_heads x head_dim is too large", w);
    return GRPO_OK;
}

/* Biases and norms of the attention, as each family's transformers class builds them. */
static grpo_err
parse_attn(grpo_model_config *c, const cJSON *j, const char *w)
{
    int32_t ab = 0;
    grpo_err err = grpo_model__cfg_bool(j, "attention_bias", w, &ab);
    if (err != GRPO_OK)
        return err;
    if (c->arch == GRPO_ARCH_QWEN2) { /* Qwen2Attention: q/k/v always biased, o never */
        c->qkv_bias = 1;
        c->o_bias = 0;
    } else {
        c->qkv_bias = ab;
        c->o_bias = ab;
    }
    c->qk_norm = c->arch == GRPO_ARCH_QWEN3 || c->arch == GRPO_ARCH_QWEN3_MOE;
    return GRPO_OK;
}

static grpo_err
parse_rest(grpo_model_config *c, const cJSON *j, const char *w)
{
    double eps = c->rms_norm_eps;
    grpo_err err;
    if ((err = grpo__json_num_opt(j, "rms_norm_eps", w, &eps)) != GRPO_OK ||
        (err = grpo__json_num_opt(j, "rope_theta", w, &c->rope_theta)) != GRPO_OK ||
        (err = grpo_model__cfg_bool(j, "tie_word_embeddings", w, &c->tie_word_embeddings)) !=
            GRPO_OK ||
        (err = grpo_model__config_token_id(j, "bos_token_id", w, &c->bos_token_id)) != GRPO_OK ||
        (err = grpo_model__config_token_id(j, "eos_token_id", w, &c->eos_token_id)) != GRPO_OK)
        return err;
    if (!(eps > 0 && eps < 1))
        return grpo__fail(GRPO_EFORMAT, "%s: \"rms_norm_eps\" is %g; expected (0, 1)", w, eps);
    c->rms_norm_eps = (float)eps;
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(j, "rope_scaling");
    if (rs == NULL || cJSON_IsNull(rs))
        rs = cJSON_GetObjectItemCaseSensitive(j, "rope_parameters");
    if (rs != NULL && !cJSON_IsNull(rs) && (err = parse_rope(c, rs, w)) != GRPO_OK)
        return err;
    if (!(c->rope_theta > 0))
        return grpo__fail(GRPO_EFORMAT, "%s: \"rope_theta\" must be positive", w);
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(j, "quantization_config");
    if (q != NULL && !cJSON_IsNull(q) && (err = grpo_model__config_quant(c, q, w)) != GRPO_OK)
        return err;
    return GRPO_OK;
}

/* qwen3_moe's sparse blocks (Qwen3MoeSparseMoeBlock): num_experts experts, softmax router, top
 * num_experts_per_tok, renormalized when norm_topk_prob; every layer sparse (decoder_sparse_step
 * 1, no mlp_only_layers: Qwen3-30B-A3B and -235B-A22B), anything else refused. */
static grpo_err
parse_moe(grpo_model_config *c, const cJSON *j, const char *w)
{
    int32_t step = 1;
    grpo_err err;
    if ((err = grpo_model__cfg_int(j, "num_experts", w, 1, 1, &c->n_routed_experts)) != GRPO_OK ||
        (err = grpo_model__cfg_int(j, "num_experts_per_tok", w, 1, 1, &c->num_experts_per_tok)) !=
            GRPO_OK ||
        (err = grpo_model__cfg_int(j, "moe_intermediate_size", w, 1, 1,
                                   &c->moe_intermediate_size)) != GRPO_OK ||
        (err = grpo_model__cfg_int(j, "decoder_sparse_step", w, 1, 0, &step)) != GRPO_OK ||
        (err = grpo_model__cfg_bool(j, "norm_topk_prob", w, &c->norm_topk_prob)) != GRPO_OK)
        return err;
    if (step != 1)
        return grpo__fail(GRPO_EUNSUPPORTED,
                          "%s: \"decoder_sparse_step\" is %d; only 1 (every layer sparse) is "
                          "supported",
                          w, step);
    const cJSON *mo = cJSON_GetObjectItemCaseSensitive(j, "mlp_only_layers");
    if (mo != NULL && !cJSON_IsNull(mo) && (!cJSON_IsArray(mo) || cJSON_GetArraySize(mo) > 0))
        return grpo__fail(GRPO_EUNSUPPORTED,
                          "%s: \"mlp_only_layers\" must be empty (dense layers in a qwen3_moe "
                          "model are not supported)",
                          w);
    if (c->num_experts_per_tok > c->n_routed_experts || c->num_experts_per_tok > 256)
        return grpo__fail(GRPO_EFORMAT,
                          "%s: \"num_experts_per_tok\" %d exceeds num_experts %d (or 256)", w,
                          c->num_experts_per_tok, c->n_routed_experts);
    return GRPO_OK;
}

grpo_err
grpo_model__config_gqa(grpo_model_config *c, const cJSON *j, const char *w, const char *mt)
{
    size_t f = 0, nf = sizeof families / sizeof families[0];
    while (f < nf && strcmp(families[f].name, mt) != 0)
        f++;
    if (f == nf)
        return grpo__fail(
            GRPO_EUNSUPPORTED,
            "%s: \"model_type\" is \"%s\"; supported: deepseek_v3, deepseek_v2, qwen2, "
            "llama, qwen3, qwen3_moe",
            w, mt);
    c->arch = families[f].arch;
    c->rope_interleave = 0; /* rotate_half: pairs (i, i + head_dim / 2) */
    grpo_err err;
    if ((err = parse_dims(c, j, w)) != GRPO_OK || (err = parse_attn(c, j, w)) != GRPO_OK ||
        (err = check_window(j, w)) != GRPO_OK || (err = check_refused(j, w)) != GRPO_OK ||
        (err = parse_rest(c, j, w)) != GRPO_OK)
        return err;
    if (c->arch == GRPO_ARCH_QWEN3_MOE && (err = parse_moe(c, j, w)) != GRPO_OK)
        return err;
    c->n_moe_layers = c->n_routed_experts > 0 ? c->num_hidden_layers : 0;
    grpo_model__log_unknown(j, w, known_keys, sizeof known_keys / sizeof known_keys[0]);
    c->softmax_scale = (float)(1.0 / sqrt((double)c->head_dim));
    c->rope_attn_factor = 1.0f;
    c->n_group = 1;
    c->topk_group = 1;
    c->moe_layer_freq = 1;
    c->routed_scaling_factor = 1.0f;
    return GRPO_OK;
}

const char *
grpo_model_type_name(const grpo_model_config *cfg)
{
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
        if ((int32_t)families[f].arch == cfg->arch)
            return families[f].name;
    return cfg->arch == GRPO_ARCH_DEEPSEEK_V2 ? "deepseek_v2" : "deepseek_v3";
}
