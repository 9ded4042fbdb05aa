/* config.json of model_type deepseek_v3 and deepseek_v2 (the GQA families are in config_gqa.c):
 * every field that changes the computation is read and checked; values we do not implement are
 * refused by name rather than ignored. */
#include "rollout/model/model_int.h"
#include "common/json.h"

#include <math.h>
#include <string.h>

#define I32MAX 2147483647LL

/* Keys that do not change the computation (or are checked elsewhere); anything else is logged. */
static const char *const known_keys[] = {
    "architectures",
    "auto_map",
    "model_type",
    "torch_dtype",
    "dtype",
    "transformers_version",
    "initializer_range",
    "use_cache",
    "attention_dropout",
    "ep_size",
    "pad_token_id",
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "moe_intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "head_dim",
    "qk_head_dim",
    "n_routed_experts",
    "n_shared_experts",
    "num_experts_per_tok",
    "n_group",
    "topk_group",
    "first_k_dense_replace",
    "moe_layer_freq",
    "routed_scaling_factor",
    "norm_topk_prob",
    "scoring_func",
    "topk_method",
    "hidden_act",
    "rms_norm_eps",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "rope_interleave",
    "max_position_embeddings",
    "tie_word_embeddings",
    "num_nextn_predict_layers",
    "quantization_config",
    "attention_bias",
    "bos_token_id",
    "eos_token_id",
    "pretraining_tp",
    "aux_loss_alpha",
    "seq_aux",
    "output_router_logits",
    "router_aux_loss_coef",
    "id2label",
    "label2id",
    "return_dict",
    "output_hidden_states",
    "output_attentions",
    "torchscript",
    "chunk_size_feed_forward",
    "is_encoder_decoder",
    "is_decoder",
    "tie_encoder_decoder",
    "_name_or_path",
    "problem_type",
    "tokenizer_class",
    "prefix",
    "sep_token_id",
    "decoder_start_token_id",
    "task_specific_params",
    "finetuning_task",
    "cross_attention_hidden_size",
    "add_cross_attention",
    "pruned_heads",
    "tf_legacy_loss",
    "use_bfloat16",
    "bad_words_ids",
    "num_labels",
    "mlp_bias",
};

grpo_err
grpo_model__cfg_int(const cJSON *j, const char *key, const char *w, int64_t lo, int req,
                    int32_t *out)
{
    int64_t v = *out;
    grpo_err err = req ? grpo__json_int(j, key, w, lo, I32MAX, &v)
                       : grpo__json_int_opt(j, key, w, lo, I32MAX, &v);
    if (err == GRPO_OK)
        *out = (int32_t)v;
    return err;
}

grpo_err
grpo_model__cfg_bool(const cJSON *j, const char *key, const char *w, int32_t *out)
{
    bool v = *out != 0;
    grpo_err err = grpo__json_bool_opt(j, key, w, &v);
    if (err == GRPO_OK)
        *out = v ? 1 : 0;
    return err;
}

void
grpo_model__log_unknown(const cJSON *j, const char *w, const char *const *known, size_t n)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, j)
    {
        size_t i = 0;
        while (i < n && known[i] != NULL && strcmp(known[i], it->string) != 0)
            i++;
        if (i == n || known[i] == NULL)
            grpo_log(GRPO_LOG_DEBUG, "%s: ignoring unknown key \"%s\"", w, it->string);
    }
}

/* A string field that, when present, must equal `want`. */
static grpo_err
opt_str_is(const cJSON *j, const char *key, const char *w, const char *want)
{
    const char *s = NULL;
    grpo_err err = grpo__json_str_opt(j, key, w, &s);
    if (err != GRPO_OK)
        return err;
    if (s != NULL && strcmp(s, want) != 0)
        return grpo__fail(GRPO_EUNSUPPORTED, "%s: \"%s\" is \"%s\"; only \"%s\" is supported", w,
                          key, s, want);
    return GRPO_OK;
}

static double
yarn_get_mscale(double scale, double mscale)
{
    return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

/* rope_scaling (or rope_parameters): only YaRN (or none) is implemented. */
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
    if (strcmp(type, "default") == 0) {
        /* transformers scales the softmax by mscale(factor, mscale_all_dim)^2 whenever
         * rope_scaling carries a nonzero mscale_all_dim, whatever its type (derive()). */
        if ((err = grpo__json_num_opt(rs, "mscale_all_dim", where, &c->yarn_mscale_all_dim)) !=
            GRPO_OK)
            return err;
        if (c->yarn_mscale_all_dim != 0 &&
            (err = grpo__json_num(rs, "factor", where, &c->yarn_factor)) != GRPO_OK)
            return err;
        return GRPO_OK;
    }
    if (strcmp(type, "yarn") != 0)
        return grpo__fail(GRPO_EUNSUPPORTED, "%s: type \"%s\" is not supported (yarn or default)",
                          where, type);
    const cJSON *it;
    cJSON_ArrayForEach(it, rs)
    {
        static const char *const ok[] = {
            "type",       "rope_type", "factor", "original_max_position_embeddings",
            "beta_fast",  "beta_slow", "mscale", "mscale_all_dim",
            "rope_theta", "truncate"};
        size_t i = 0;
        while (i < sizeof ok / sizeof ok[0] && strcmp(ok[i], it->string) != 0)
            i++;
        if (i == sizeof ok / sizeof ok[0])
            return grpo__fail(GRPO_EUNSUPPORTED, "%s: \"%s\" is not supported", where, it->string);
    }
    bool truncate = true;
    c->rope_yarn = 1;
    c->yarn_beta_fast = 32;
    c->yarn_beta_slow = 1;
    c->yarn_mscale = 0;
    c->yarn_mscale_all_dim = 0;
    int64_t omax = c->max_position_embeddings;
    if ((err = grpo__json_num(rs, "factor", where, &c->yarn_factor)) != GRPO_OK ||
        (err = grpo__json_int_opt(rs, "original_max_position_embeddings", where, 1, I32MAX,
                                  &omax)) != GRPO_OK ||
        (err = grpo__json_num_opt(rs, "beta_fast", where, &c->yarn_beta_fast)) != GRPO_OK ||
        (err = grpo__json_num_opt(rs, "beta_slow", where, &c->yarn_beta_slow)) != GRPO_OK ||
        (err = grpo__json_num_opt(rs, "mscale", where, &c->yarn_mscale)) != GRPO_OK ||
        (err = grpo__json_num_opt(rs, "mscale_all_dim", where, &c->yarn_mscale_all_dim)) !=
            GRPO_OK ||
        (err = grpo__json_bool_opt(rs, "truncate", where, &truncate)) != GRPO_OK)
        return err;
    if (!truncate)
        return grpo__fail(GRPO_EUNSUPPORTED, "%s: \"truncate\": false is not supported", where);
    if (c->yarn_factor <= 0 || c->yarn_beta_fast <= 0 || c->yarn_beta_slow <= 0)
        return grpo__fail(GRPO_EFORMAT, "%s: factor, beta_fast and beta_slow must be positive",
                          where);
    c->yarn_original_max_position = (int32_t)omax;
    return GRPO_OK;
}

grpo_err
grpo_model__config_quant(grpo_model_config *c, const cJSON *q, const char *w)
{
    char where[512];
    snprintf(where, sizeof where, "%s: quantization_config", w);
    grpo_err err;
    const char *method = NULL;
    if ((err = grpo__json_str(q, "quant_method", where, &method)) != GRPO_OK)
        return err;
    if (strcmp(method, "fp8") != 0)
        return grpo__fail(GRPO_EUNSUPPORTED, "%s: quant_method \"%s\" is not supported (fp8)",
                          where, method);
    if ((err = opt_str_is(q, "fmt", where, "e4m3")) != GRPO_OK ||
        (err = opt_str_is(q, "activation_scheme", where, "dynamic")) != GRPO_OK)
        return err;
    const cJSON *bs = cJSON_GetObjectItemCaseSensitive(q, "weight_block_size");
    if (!cJSON_IsArray(bs) || cJSON_GetArraySize(bs) != 2)
        return grpo__fail(GRPO_EUNSUPPORTED,
                          "%s: \"weight_block_size\" must be a list of two integers "
                          "(per-tensor scales are not supported)",
                          where);
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetArrayItem(bs, i);
        if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > 65536 ||
            v->valuedouble != floor(v->valuedouble))
            return grpo__fail(GRPO_EFORMAT,
                              "%s: \"weight_block_size\"[%d] is not a positive "
                              "integer",
                              where, i);
        c->fp8_block[i] = (int32_t)v->valuedouble;
    }
    c->fp8 = 1;
    return GRPO_OK;
}

grpo_err
grpo_model__config_token_id(const cJSON *j, const char *key, const char *w, int32_t *out)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(j, key);
    if (cJSON_IsArray(it)) /* several EOS ids: the first is the one we stop on by default */
        it = cJSON_GetArrayItem(it, 0);
    if (it == NULL || cJSON_IsNull(it))
        return GRPO_OK;
    if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > I32MAX)
        return grpo__fail(GRPO_EFORMAT, "%s: \"%s\" must be a token id", w, key);
    *out = (int32_t)it->valuedouble;
    return GRPO_OK;
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
        (err = grpo_model__cfg_int(j, "kv_lora_rank", w, 1, 1, &c->kv_lora_rank)) != GRPO_OK ||
        (err = grpo_model__cfg_int(j, "qk_nope_head_dim", w, 1, 1, &c->qk_nope_head_dim)) !=
            GRPO_OK ||
        (err = grpo_model__cfg_int(j, "qk_rope_head_dim", w, 2, 1, &c->qk_rope_head_dim)) !=
            GRPO_OK ||
        (err = grpo_model__cfg_int(j, "v_head_dim", w, 1, 1, &c->v_head_dim)) != GRPO_OK ||
        (err = grpo_model__cfg_int(j, "q_lora_rank", w, 1, 0, &c->q_lora_rank)) != GRPO_OK ||
        (err = grpo_model__cfg_int(j, "max_position_embeddings", w, 1, 1,
                                   &c->max_position_embeddings)) != GRPO_OK)
        return err;
    int32_t kvh = c->num_attention_heads;
    if ((err = grpo_model__cfg_int(j, "num_key_value_heads", w, 1, 0, &kvh)) != GRPO_OK)
        return err;
    if (kvh != c->num_attention_heads)
        return grpo__fail(GRPO_EUNSUPPORTED,
                          "%s: \"num_key_value_heads\" is %d; MLA needs it "
                          "equal to num_attention_heads (%d)",
                          w, kvh, c->num_attention_heads);
    if (c->qk_rope_head_dim % 2 != 0 || c->qk_rope_head_dim > 512)
        return grpo__fail(GRPO_EUNSUPPORTED,
                          "%s: \"qk_rope_head_dim\" is %d; expected an even "
                          "number <= 512",
                          w, c->qk_rope_head_dim);
    return GRPO_OK;
}

/* DeepseekV2MoEGate: softmax scores (transformers does not read scoring_func; we take "softmax" or
 * absent), top-k by "greedy" (no groups: n_group/topk_group ignored, as transformers does) or by
 * "group_limited_greedy" (groups scored by their largest probability), times
 * routed_scaling_factor. transformers never normalizes the top-k weights while DeepSeek's own code
 * does when norm_topk_prob is set, so that value (false in every published V2 config) is refused.
 */
static grpo_err
parse_v2_gate(grpo_model_config *c, const cJSON *j, const char *w)
{
    const char *tm = "greedy";
    grpo_err err;
    if ((err = opt_str_is(j, "scoring_func", w, "softmax")) != GRPO_OK ||
        (err = grpo__json_str_opt(j, "topk_method", w, &tm)) != GRPO_OK)
        return err;
    if (tm == NULL)
        tm = "greedy";
    if (c->norm_topk_prob)
        return grpo__fail(GRPO_EUNSUPPORTED,
                          "%s: \"norm_topk_prob\": true is not supported for deepseek_v2 "
                          "(transformers ignores it, DeepSeek's code normalizes)",
                          w);
    if (strcmp(tm, "greedy") == 0) {
        c->n_group = c->topk_group = 1;
        return GRPO_OK;
    }
    if (strcmp(tm, "group_limited_greedy") != 0)
        return grpo__fail(GRPO_EUNSUPPORTED,
                          "%s: \"topk_method\" is \"%s\"; deepseek_v2 supports \"greedy\" "
                          "and \"group_limited_greedy\"",
                          w, tm);
    const cJSON *ng = cJSON_GetObjectItemCaseSensitive(j, "n_group"),
                *tg = cJSON_GetObjectItemCaseSensitive(j, "topk_group");
    if (c->n_routed_experts > 0 && (!cJSON_IsNumber(ng) || !cJSON_IsNumber(tg)))
        return grpo__fail(GRPO_EFORMAT,
                          "%s: \"topk_method\" group_limited_greedy needs \"n_group\" and "
                          "\"topk_group\"",
                          w);
    return GRPO_OK;
}

static grpo_err
parse_moe(grpo_model_config *c, const cJSON *j, const char *w)
{
    grpo_err err;
    c->n_group = 1;
    c->topk_group = 1;
    c->moe_layer_freq = 1;
    c->routed_scaling_factor = 1.0f;
    double rsf = 1.0;
    if ((err = grpo_model__cfg_int(j, "n_routed_experts", w, 0, 0, &c->n_routed_experts)) !=
            GRPO_OK ||
        (err = grpo_model__cfg_int(j, "n_shared_experts", w, 0, 0, &c->n_shared_experts)) !=
            GRPO_OK ||
        (err = grpo_model__cfg_int(j, "num_experts_per_tok", w, 0, 0, &c->num_experts_per_tok)) !=
            GRPO_OK ||
        (err = grpo_model__cfg_int(j, "n_group", w, 1, 0, &c->n_group)) != GRPO_OK ||
        (err = grpo_model__cfg_int(j, "topk_group", w, 1, 0, &c->topk_group)) != GRPO_OK ||
        (err = grpo_model__cfg_int(j, "first_k_dense_replace", w, 0, 0,
                                   &c->first_k_dense_replace)) != GRPO_OK ||
        (err = grpo_model__cfg_int(j, "moe_layer_freq", w, 1, 0, &c->moe_layer_freq)) != GRPO_OK ||
        (err = grpo_model__cfg_int(j, "moe_intermediate_size", w, 1, 0,
                                   &c->moe_intermediate_size)) != GRPO_OK ||
        (err = grpo__json_num_opt(j, "routed_scaling_factor", w, &rsf)) != GRPO_OK ||
        (err = grpo_model__cfg_bool(j, "norm_topk_prob", w, &c->norm_topk_prob)) != GRPO_OK)
        return err;
    if (c->arch == GRPO_ARCH_DEEPSEEK_V2)
        err = parse_v2_gate(c, j, w);
    else if ((err = opt_str_is(j, "scoring_func", w, "sigmoid")) == GRPO_OK)
        err = opt_str_is(j, "topk_method", w, "noaux_tc");
    if (err != GRPO_OK)
        return err;
    c->routed_scaling_factor = (float)rsf;
    if (c->moe_layer_freq != 1)
        return grpo__fail(GRPO_EUNSUPPORTED,
                          "%s: \"moe_layer_freq\" is %d; only 1 is supported "
                          "(as in DeepSeek-V3 and transformers)",
                          w, c->moe_layer_freq);
    if (c->n_routed_experts == 0)
        return GRPO_OK;
    if (c->moe_intermediate_size <= 0 || c->num_experts_per_tok <= 0)
        return grpo__fail(GRPO_EFORMAT,
                          "%s: \"moe_intermediate_size\" and \"num_experts_per_tok\""
                          " must be positive with n_routed_experts %d",
                          w, c->n_routed_experts);
    if (c->n_group > 256 || c->n_routed_experts % c->n_group != 0 || c->topk_group > c->n_group)
        return grpo__fail(GRPO_EFORMAT,
                          "%s: \"n_group\" %d / \"topk_group\" %d do not divide "
                          "n_routed_experts %d",
                          w, c->n_group, c->topk_group, c->n_routed_experts);
    int per = c->n_routed_experts / c->n_group;
    if (c->num_experts_per_tok > 256 || c->num_experts_per_tok > c->topk_group * per)
        return grpo__fail(GRPO_EFORMAT,
                          "%s: \"num_experts_per_tok\" %d exceeds the %d experts "
                          "of the kept groups",
                          w, c->num_experts_per_tok, c->topk_group * per);
    return GRPO_OK;
}

/* Softmax scale and rope cos/sin factor exactly as transformers derives them from rope_scaling
 * (equal to DeepSeek's reference when mscale == mscale_all_dim, as in V3/R1). */
static void
derive(grpo_model_config *c)
{
    int qk = c->qk_nope_head_dim + c->qk_rope_head_dim;
    double scale = 1.0 / sqrt((double)qk), af = 1.0;
    if (c->yarn_mscale_all_dim != 0) { /* yarn, or default rope with mscale_all_dim */
        double ms = yarn_get_mscale(c->yarn_factor, c->yarn_mscale_all_dim);
        scale *= ms * ms;
    }
    if (c->rope_yarn) {
        if (c->yarn_mscale != 0 && c->yarn_mscale_all_dim != 0)
            af = yarn_get_mscale(c->yarn_factor, c->yarn_mscale) /
                 yarn_get_mscale(c->yarn_factor, c->yarn_mscale_all_dim);
        else
            af = yarn_get_mscale(c->yarn_factor, 1.0);
    }
    c->softmax_scale = (float)scale;
    c->rope_attn_factor = (float)af;
    c->n_moe_layers = 0;
    for (int i = 0; i < c->num_hidden_layers; i++)
        if (c->n_routed_experts > 0 && i >= c->first_k_dense_replace)
            c->n_moe_layers++;
}

grpo_err
grpo_model__config_from_json(grpo_model_config *c, const cJSON *j, const char *w)
{
    grpo_err err;
    memset(c, 0, sizeof *c);
    c->rms_norm_eps = 1e-6f;
    c->rope_theta = 10000.0;
    c->rope_interleave = 1;
    c->eos_token_id = 1;
    if (!cJSON_IsObject(j))
        return grpo__fail(GRPO_EFORMAT, "%s: expected a JSON object", w);
    const char *mt = NULL;
    if ((err = grpo__json_str(j, "model_type", w, &mt)) != GRPO_OK)
        return err;
    if (strcmp(mt, "deepseek_v2") == 0)
        c->arch = GRPO_ARCH_DEEPSEEK_V2;
    else if (strcmp(mt, "deepseek_v3") != 0)
        return grpo_model__config_gqa(c, j, w, mt);
    if ((err = parse_dims(c, j, w)) != GRPO_OK || (err = parse_moe(c, j, w)) != GRPO_OK)
        return err;
    double eps = c->rms_norm_eps;
    bool attn_bias = false, mlp_bias = false;
    int32_t tp = 1;
    if ((err = grpo__json_num_opt(j, "rms_norm_eps", w, &eps)) != GRPO_OK ||
        (err = grpo__json_num_opt(j, "rope_theta", w, &c->rope_theta)) != GRPO_OK ||
        (err = grpo_model__cfg_bool(j, "rope_interleave", w, &c->rope_interleave)) != GRPO_OK ||
        (err = grpo_model__cfg_bool(j, "tie_word_embeddings", w, &c->tie_word_embeddings)) !=
            GRPO_OK ||
        (err = grpo_model__cfg_int(j, "num_nextn_predict_layers", w, 0, 0,
                                   &c->num_nextn_predict_layers)) != GRPO_OK ||
        (err = opt_str_is(j, "hidden_act", w, "silu")) != GRPO_OK ||
        (err = grpo__json_bool_opt(j, "attention_bias", w, &attn_bias)) != GRPO_OK ||
        (err = grpo__json_bool_opt(j, "mlp_bias", w, &mlp_bias)) != GRPO_OK ||
        (err = grpo_model__cfg_int(j, "pretraining_tp", w, 1, 0, &tp)) != GRPO_OK ||
        (err = grpo_model__config_token_id(j, "bos_token_id", w, &c->bos_token_id)) != GRPO_OK ||
        (err = grpo_model__config_token_id(j, "eos_token_id", w, &c->eos_token_id)) != GRPO_OK)
        return err;
    if (attn_bias || mlp_bias)
        return grpo__fail(GRPO_EUNSUPPORTED, "%s: \"%s\": true is not supported", w,
                          attn_bias ? "attention_bias" : "mlp_bias");
    /* DeepseekV2Attention always rotates adjacent pairs; it has no rope_interleave option */
    if (c->arch == GRPO_ARCH_DEEPSEEK_V2 && !c->rope_interleave)
        return grpo__fail(GRPO_EUNSUPPORTED,
                          "%s: \"rope_interleave\": false is not supported for deepseek_v2", w);
    if (tp != 1)
        return grpo__fail(GRPO_EUNSUPPORTED, "%s: \"pretraining_tp\" must be 1", w);
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
    grpo_model__log_unknown(j, w, known_keys, sizeof known_keys / sizeof known_keys[0]);
    derive(c);
    return GRPO_OK;
}

grpo_err
grpo_model_config_parse(grpo_model_config *cfg, const char *json, size_t len, const char *where)
{
    cJSON *j = NULL;
    grpo_err err = grpo__json_parse(json, len, where, &j);
    if (err == GRPO_OK)
        err = grpo_model__config_from_json(cfg, j, where);
    cJSON_Delete(j);
    return err;
}
