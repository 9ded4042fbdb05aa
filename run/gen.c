/* The generation parameters of a run: defaults, and the JSON records that identify a run
 * (config_json) and a group's sampling (sampling_json). */
#include "run/run_int.h"

#include <cjson/cJSON.h>
#include <string.h>

void
grpo_run_gen_default(grpo_run_gen *g)
{
    memset(g, 0, sizeof *g);
    g->G = 64, g->max_new = 1024, g->logprobs = GRPO_LOGPROBS_RAW;
    grpo_sampling_default(&g->s);
}

void
grpo_run_opts_default(grpo_run_opts *o)
{
    memset(o, 0, sizeof *o);
    grpo_run_gen_default(&o->gen);
    o->db = "grpo.db", o->kv_budget = "1G", o->verify_threads = 2;
    o->max_pending = 8, o->window = 4, o->max_batch = 256, o->gpu = -1;
    o->kv_bytes = (uint64_t)1 << 30;
    grpo_run_tools_default(&o->tools);
}

void
grpo_run__json_tools(cJSON *o, const grpo_run_tools *t)
{
    if (t->list == NULL || t->list[0] == '\0') /* one-turn runs read as they always did */
        return;
    cJSON *x = cJSON_AddObjectToObject(o, "tools");
    cJSON_AddStringToObject(x, "list", t->list);
    cJSON_AddNumberToObject(x, "max_calls", t->max_calls);
    cJSON_AddNumberToObject(x, "max_turns", t->max_turns);
    cJSON_AddNumberToObject(x, "max_obs_tokens", t->max_obs_tokens);
    cJSON_AddNumberToObject(x, "time_s", t->time_s);
}

void
grpo_run__json_numerics(cJSON *o, int numerics, int kv_dtype)
{
    if (numerics != GRPO_NUMERICS_EXACT)
        cJSON_AddStringToObject(o, "numerics", grpo_numerics_name(numerics));
    if (kv_dtype != GRPO_KV_F32)
        cJSON_AddStringToObject(o, "kv_dtype", grpo_kv_dtype_name(kv_dtype));
}

void
grpo_run__json_sampling(cJSON *o, const grpo_run_gen *g, const char *prompt_id)
{
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)g->seed);
    cJSON_AddNumberToObject(o, "temperature", g->s.temperature);
    cJSON_AddNumberToObject(o, "top_p", g->s.top_p);
    cJSON_AddNumberToObject(o, "top_k", g->s.top_k);
    cJSON_AddNumberToObject(o, "min_p", g->s.min_p);
    cJSON_AddNumberToObject(o, "max_new_tokens", g->max_new);
    if (g->speculative > 0) /* runs without read as they always did */
        cJSON_AddNumberToObject(o, "speculative", g->speculative);
    cJSON_AddStringToObject(o, "seed", seed);
    cJSON_AddStringToObject(o, "prompt_id", prompt_id);
}

void
grpo_run__json_config(cJSON *o, const grpo_run_gen *g)
{
    cJSON_AddNumberToObject(o, "group", g->G);
    cJSON_AddNumberToObject(o, "max_new_tokens", g->max_new);
    cJSON_AddNumberToObject(o, "temperature", g->s.temperature);
    cJSON_AddNumberToObject(o, "top_p", g->s.top_p);
    cJSON_AddNumberToObject(o, "top_k", g->s.top_k);
    cJSON_AddNumberToObject(o, "min_p", g->s.min_p);
    if (g->speculative > 0)
        cJSON_AddNumberToObject(o, "speculative", g->speculative);
}

void
grpo_run__json_stops(cJSON *o, const grpo_run_gen *g)
{
    cJSON *st = cJSON_AddArrayToObject(o, "stop");
    for (int i = 0; i < g->n_stop; i++)
        cJSON_AddItemToArray(st, cJSON_CreateString(g->stop[i]));
    cJSON *si = cJSON_AddArrayToObject(o, "stop_ids");
    for (int i = 0; i < g->n_stop_ids; i++)
        cJSON_AddItemToArray(si, cJSON_CreateNumber(g->stop_ids[i]));
}
