/* `grpo replay`: regenerates one recorded completion from the recorded weights, prompt, sampling
 * params, seed and sample index, and says whether it is bit-identical (tokens, raw logprobs and
 * finish reason). The sample is decoded alone (G = 1, first sample index = the recorded one): the
 * engine promises the same result as inside its original group and batch. */
#include "cli/cli.h"
#include "common/common_int.h"
#include "grpo/rollout.h"
#include "grpo/run.h"
#include "grpo/store.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMD "replay"

static void
usage(FILE *f)
{
    fprintf(f, "usage: grpo replay --db FILE --completion ID [options]\n\n"
               "Regenerates a recorded completion from the recorded weights, prompt, sampling\n"
               "params, seed and sample index, and compares it bit for bit with the record\n"
               "(tokens, raw logprobs, finish reason).\n\n"
               "  --db FILE          the store written by grpo rollout (default grpo.db)\n"
               "  --completion ID    the completion's id in the store\n"
               "  --model DIR        use this model directory instead of the recorded one (its\n"
               "                     weights must still have the recorded sha256)\n"
               "  --threads N        forward threads (default: all CPUs; never changes tokens)\n"
               "  --re-execute       a multi-turn completion (--tools): run every recorded tool\n"
               "                     call again and report each observation that differs from\n"
               "                     the recorded one (the recorded ones are what is fed, so\n"
               "                     the completion still replays bit for bit)\n"
               "  --help             this text\n\n"
               "A multi-turn completion is regenerated with its recorded observations fed where\n"
               "the record says (docs/tools.md).\n\n"
               "exit codes: 0 bit-identical (and, with --re-execute, every observation the\n"
               "same), 1 different (or a runtime failure), 2 usage error\n");
}

typedef struct recorded {
    grpo_gen_params params;
    uint64_t seed;
    char prompt_id[512], template_name[16], tokenizer[4096];
    int32_t prompt_tokens;
    int numerics, kv_dtype;
    int32_t speculative; /* the run's --speculative (absent: 0) */
    char *stops[GRPO_ROLLOUT_MAX_STOP];
    grpo_run_tools tools; /* the run's --tools (list NULL: none) */
    char tools_list[1024];
} recorded;

static grpo_err
json_num(const cJSON *o, const char *k, double *out)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(it))
        return grpo__fail(GRPO_EFORMAT, "recorded sampling params: \"%s\" missing", k);
    *out = it->valuedouble;
    return GRPO_OK;
}

static grpo_err
json_str(const cJSON *o, const char *k, char *out, size_t cap)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsString(it) || strlen(it->valuestring) >= cap)
        return grpo__fail(GRPO_EFORMAT, "recorded sampling params: \"%s\" missing", k);
    memcpy(out, it->valuestring, strlen(it->valuestring) + 1);
    return GRPO_OK;
}

/* The run's "tools" object (grpo_run__json_tools), for --re-execute. */
static void
parse_tools(const cJSON *t, recorded *r)
{
    grpo_run_tools_default(&r->tools);
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(t, "list");
    if (!cJSON_IsString(l) || strlen(l->valuestring) >= sizeof r->tools_list)
        return;
    memcpy(r->tools_list, l->valuestring, strlen(l->valuestring) + 1);
    r->tools.list = r->tools_list;
    double v = 0;
    if (json_num(t, "max_calls", &v) == GRPO_OK && v >= 0 && v < 1e9)
        r->tools.max_calls = (int32_t)v;
    if (json_num(t, "max_turns", &v) == GRPO_OK && v >= 0 && v < 1e9)
        r->tools.max_turns = (int32_t)v;
    if (json_num(t, "max_obs_tokens", &v) == GRPO_OK && v >= 1 && v < 1e9)
        r->tools.max_obs_tokens = (int32_t)v;
    if (json_num(t, "time_s", &v) == GRPO_OK && v > 0)
        r->tools.time_s = v;
}

/* The sampling_json grpo rollout records per group. */
static grpo_err
parse_recorded(const char *json, recorded *r)
{
    cJSON *o = json ? cJSON_Parse(json) : NULL;
    double t = 0, tp = 0, tk = 0, mp = 0, mx = 0, eos = 0, pt = 0;
    char seed[32];
    grpo_err err;
    memset(r, 0, sizeof *r);
    if (o == NULL)
        return grpo__fail(GRPO_EFORMAT, "the group has no readable sampling params");
    if ((err = json_num(o, "temperature", &t)) || (err = json_num(o, "top_p", &tp)) ||
        (err = json_num(o, "top_k", &tk)) || (err = json_num(o, "min_p", &mp)) ||
        (err = json_num(o, "max_new_tokens", &mx)) || (err = json_num(o, "eos_id", &eos)) ||
        (err = json_num(o, "prompt_tokens", &pt)) || (err = json_str(o, "seed", seed, 32)) ||
        (err = json_str(o, "prompt_id", r->prompt_id, sizeof r->prompt_id)) ||
        (err = json_str(o, "template", r->template_name, sizeof r->template_name)))
        goto done;
    json_str(o, "tokenizer", r->tokenizer, sizeof r->tokenizer); /* optional */
    char nm[16] = "exact"; /* absent: exact; present: a string naming numerics */
    if ((cJSON_GetObjectItemCaseSensitive(o, "numerics") != NULL &&
         (err = json_str(o, "numerics", nm, sizeof nm)) != GRPO_OK) ||
        (err = grpo_numerics_parse(nm, &r->numerics)) != GRPO_OK)
        goto done;
    char kd[16] = "f32"; /* absent: f32; present: a string naming the cache dtype */
    if ((cJSON_GetObjectItemCaseSensitive(o, "kv_dtype") != NULL &&
         (err = json_str(o, "kv_dtype", kd, sizeof kd)) != GRPO_OK) ||
        (err = grpo_kv_dtype_parse(kd, &r->kv_dtype)) != GRPO_OK)
        goto done;
    parse_tools(cJSON_GetObjectItemCaseSensitive(o, "tools"), r);
    double sp = 0; /* absent: off */
    if (cJSON_GetObjectItemCaseSensitive(o, "speculative") != NULL &&
        ((err = json_num(o, "speculative", &sp)) != GRPO_OK || !(sp >= 0 && sp <= 3))) {
        err = grpo__fail(GRPO_EFORMAT, "recorded sampling params: \"speculative\" is not 0..3");
        goto done;
    }
    r->speculative = (int32_t)sp;
    grpo_error_clear();
    grpo_gen_params_default(&r->params);
    r->params.sampling = (grpo_sampling){(float)t, (float)tp, (int32_t)tk, (float)mp};
    r->params.max_new_tokens = (int32_t)mx;
    r->params.eos_id = (int32_t)eos;
    r->prompt_tokens = (int32_t)pt;
    r->seed = strtoull(seed, NULL, 10);
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(o, "stop"))
    {
        if (cJSON_IsString(e) && r->params.n_stop_strings < GRPO_ROLLOUT_MAX_STOP) {
            r->stops[r->params.n_stop_strings] = strdup(e->valuestring);
            r->params.stop_strings[r->params.n_stop_strings] = r->stops[r->params.n_stop_strings];
            r->params.n_stop_strings++;
        }
    }
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(o, "stop_ids"))
    {
        if (cJSON_IsNumber(e) && r->params.n_stop_ids < GRPO_ROLLOUT_MAX_STOP)
            r->params.stop_ids[r->params.n_stop_ids++] = (int32_t)e->valuedouble;
    }
done:
    cJSON_Delete(o);
    return err;
}

/* Prints the verdict; returns 1 when identical. */
static int
compare(const grpo_stored_completion *c, const grpo_rollout_sample *s)
{
    int32_t n = c->n_tokens < s->n_tokens ? c->n_tokens : s->n_tokens;
    if (c->token_ids == NULL) {
        printf("completion %lld: no token ids were recorded; cannot compare\n",
               (long long)c->completion_id);
        return 0;
    }
    for (int32_t i = 0; i < n; i++) {
        if (c->token_ids[i] != s->tokens[i]) {
            printf("completion %lld: DIFFERENT at token %d: recorded %d, regenerated %d\n",
                   (long long)c->completion_id, i, c->token_ids[i], s->tokens[i]);
            return 0;
        }
        if (c->token_logprobs &&
            memcmp(&c->token_logprobs[i], &s->logprob_raw[i], sizeof(float)) != 0) {
            printf("completion %lld: DIFFERENT logprob at token %d: recorded %.9g, "
                   "regenerated %.9g\n",
                   (long long)c->completion_id, i, c->token_logprobs[i], s->logprob_raw[i]);
            return 0;
        }
    }
    if (c->n_tokens != s->n_tokens || c->finish_reason != (int32_t)s->finish) {
        printf("completion %lld: DIFFERENT length or finish: recorded %d tokens, regenerated %d "
               "(%s)\n",
               (long long)c->completion_id, c->n_tokens, s->n_tokens, grpo_finish_name(s->finish));
        return 0;
    }
    printf("completion %lld: bit-identical (%d tokens, %s, logprobs %s)\n",
           (long long)c->completion_id, s->n_tokens, grpo_finish_name(s->finish),
           c->token_logprobs ? "equal" : "not recorded");
    return 1;
}

/* ---- multi-turn completions ---- */

typedef struct replay_turns {
    grpo_run_replay_turn *script;
    char *record; /* the prompt as a record, for an environment's reset */
    grpo_policy *pol;
    grpo_run_turns *t;
} replay_turns;

static grpo_err
encode_obs(void *ctx, const char *text, size_t len, int32_t **ids, size_t *n)
{
    return grpo_policy_encode_text(((const replay_turns *)ctx)->pol, text, len, ids, n);
}

static const char *
record_of(void *ctx, const grpo_rollout_group *g)
{
    (void)g;
    return ((const replay_turns *)ctx)->record;
}

/* The stored prompt as a prompts line: id, prompt or messages, answer, tests. */
static char *
prompt_record(const grpo_stored_completion *c, const recorded *rec)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", rec->prompt_id);
    if (c->prompt_text)
        cJSON_AddStringToObject(o, "prompt", c->prompt_text);
    if (c->prompt_messages_json)
        cJSON_AddItemToObject(o, "messages", cJSON_Parse(c->prompt_messages_json));
    if (c->gold_json)
        cJSON_AddItemToObject(o, "answer", cJSON_Parse(c->gold_json));
    if (c->tests_json)
        cJSON_AddItemToObject(o, "tests", cJSON_Parse(c->tests_json));
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* The recorded turns as the replay hook's script (observations are views of the token ids). */
static grpo_err
turns_open(replay_turns *rt, const grpo_stored_completion *c, const recorded *rec,
           grpo_policy *pol, int re_exec)
{
    memset(rt, 0, sizeof *rt);
    rt->pol = pol;
    if (c->n_turns == 0)
        return GRPO_OK;
    if (c->token_ids == NULL)
        return grpo__fail(GRPO_EFORMAT, "completion %lld has turns but no token ids",
                          (long long)c->completion_id);
    if ((rt->script = calloc((size_t)c->n_turns, sizeof *rt->script)) == NULL ||
        (rt->record = prompt_record(c, rec)) == NULL)
        return grpo__fail(GRPO_ENOMEM, "replay: out of memory");
    for (int32_t k = 0; k < c->n_turns; k++) {
        const grpo_turn_rec *u = &c->turns[k];
        grpo_run_replay_turn *s = &rt->script[k];
        s->action_end = u->action_end, s->n_obs = u->n_obs, s->n_cut = u->n_obs_cut;
        s->obs = c->token_ids + u->action_end;
        cJSON *j = cJSON_Parse(u->record_json ? u->record_json : "{}");
        s->done = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "done"));
        s->ran = !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "ran"));
        cJSON_Delete(j);
    }
    if (re_exec && rec->tools.list == NULL)
        return grpo__fail(GRPO_EFORMAT, "completion %lld: the run recorded no --tools to run "
                                        "again", (long long)c->completion_id);
    return grpo_run_turns_replay(&rt->t, rt->script, c->n_turns, re_exec ? &rec->tools : NULL,
                                 encode_obs, record_of, rt);
}

/* Prints the re-execution's differences; returns how many. */
static int
turns_close(replay_turns *rt, long long id, int re_exec)
{
    int n = 0;
    if (rt->t != NULL && re_exec) {
        char *const *msgs;
        n = grpo_run_turns_diffs(rt->t, &msgs);
        for (int k = 0; k < n; k++)
            printf("completion %lld: re-executed %s\n", id, msgs[k]);
        if (n == 0)
            printf("completion %lld: every re-executed observation is the recorded one\n", id);
    }
    grpo_run_turns_destroy(rt->t);
    free(rt->script), free(rt->record);
    return n;
}

static grpo_err
regenerate(const grpo_stored_completion *c, const recorded *rec, const char *model, int threads,
           int re_exec, int *identical)
{
    grpo_policy *pol = NULL;
    grpo_rollout *r = NULL;
    grpo_rollout_group *g = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    replay_turns rt = {0};
    /* a pool just large enough for this one sample (its prompt page is shared, then copied) */
    size_t tokens =
        (size_t)rec->prompt_tokens + (size_t)rec->params.max_new_tokens + 2 * GRPO_KV_PAGE;
    grpo_policy_opts po = {.tokenizer = rec->tokenizer[0] ? rec->tokenizer : NULL,
                           .template_name = rec->template_name,
                           .n_threads = threads,
                           .kv_budget_tokens = tokens,
                           .numerics = rec->numerics,
                           .kv_dtype = rec->kv_dtype,
                           .load_mtp = rec->speculative > 0};
    if (strcmp(rec->template_name, "bytes") == 0)
        po.template_name = "none";
    grpo_err err = grpo_policy_open(&pol, model, &po);
    if (err != GRPO_OK)
        goto done;
    const char *sha = grpo_model_weights_sha256(grpo_policy_model(pol));
    if (sha == NULL || (c->policy_sha256 && strcmp(sha, c->policy_sha256) != 0)) {
        err = grpo__fail(GRPO_EVERSION, "%s: weights sha256 %s differ from the recorded %s", model,
                         sha ? sha : "?", c->policy_sha256);
        goto done;
    }
    grpo_prompt p = {0};
    p.id = (char *)rec->prompt_id;
    p.prompt = c->prompt_text;
    p.messages_json = c->prompt_messages_json;
    if ((err = grpo_policy_encode(pol, &p, &ids, &n, NULL)) != GRPO_OK)
        goto done;
    if ((int32_t)n != rec->prompt_tokens) {
        err = grpo__fail(GRPO_EFORMAT, "the prompt encodes to %zu tokens; %d were recorded", n,
                         rec->prompt_tokens);
        goto done;
    }
    grpo_rollout_opts ro = {0};
    ro.token_bytes = grpo_policy_token_bytes;
    ro.token_bytes_ctx = pol;
    ro.speculative = rec->speculative;
    if ((err = turns_open(&rt, c, rec, pol, re_exec)) != GRPO_OK)
        goto done;
    ro.turns = rt.t ? grpo_run_turns_hook(rt.t) : NULL;
    if ((err = grpo_rollout_create(&r, grpo_policy_backend(pol), &ro)) != GRPO_OK)
        goto done;
    grpo_rollout_request q = {0};
    q.prompt = ids, q.n_prompt = (int32_t)n, q.group_size = 1, q.sample0 = c->sample_index;
    q.seed = rec->seed, q.prompt_key = grpo_rollout_prompt_key(rec->prompt_id);
    q.params = rec->params;
    if ((err = grpo_rollout_submit(r, &q, NULL)) != GRPO_OK ||
        (err = grpo_rollout_run(r)) != GRPO_OK)
        goto done;
    g = grpo_rollout_pop(r, 0);
    *identical = g != NULL && compare(c, &g->samples[0]);
    if (g != NULL && g->samples[0].n_turns != c->n_turns) {
        printf("completion %lld: DIFFERENT turns: recorded %d, regenerated %d\n",
               (long long)c->completion_id, c->n_turns, g->samples[0].n_turns);
        *identical = 0;
    }
done:
    grpo_rollout_group_free(g);
    grpo_rollout_destroy(r);
    if (turns_close(&rt, (long long)c->completion_id, re_exec && err == GRPO_OK) > 0)
        *identical = 0;
    grpo_policy_close(pol);
    free(ids);
    return err;
}

int
grpo_cmd_replay(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return CLI_OK;
    }
    static const struct option opts[] = {{"db", required_argument, 0, 'd'},
                                         {"completion", required_argument, 0, 'c'},
                                         {"model", required_argument, 0, 'm'},
                                         {"threads", required_argument, 0, 't'},
                                         {"re-execute", no_argument, 0, 'x'},
                                         {0, 0, 0, 0}};
    const char *db = "grpo.db", *model = NULL;
    long long id = -1;
    int threads = 0, c, re_exec = 0;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        char *end = NULL;
        switch (c) {
        case 'd':
            db = optarg;
            break;
        case 'm':
            model = optarg;
            break;
        case 'x':
            re_exec = 1;
            break;
        case 'c':
            id = strtoll(optarg, &end, 10);
            if (*end != '\0' || id <= 0)
                return cli_usage(CMD, "--completion %s: expected a positive id", optarg);
            break;
        case 't':
            threads = (int)strtol(optarg, &end, 10);
            if (*end != '\0' || threads < 1 || threads > 1024)
                return cli_usage(CMD, "--threads %s: expected an integer in [1, 1024]", optarg);
            break;
        default:
            return cli_usage(CMD, "unknown option or missing value: %s", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_usage(CMD, "unexpected argument \"%s\"", argv[optind]);
    if (id <= 0)
        return cli_usage(CMD, "--completion ID is required");
    grpo_store *st = NULL;
    grpo_stored_completion *sc = NULL;
    recorded rec;
    int identical = 0;
    memset(&rec, 0, sizeof rec);
    grpo_store_opts so = {0};
    so.read_only = 1;
    grpo_err err = grpo_store_open(&st, db, &so);
    if (err == GRPO_OK)
        err = grpo_store_get_completion(&sc, st, id);
    if (err == GRPO_OK)
        err = parse_recorded(sc->sampling_json, &rec);
    if (err == GRPO_OK && model == NULL && (model = sc->policy_location) == NULL)
        err = grpo__fail(GRPO_ENOTFOUND,
                         "completion %lld: no recorded weights location; give "
                         "--model",
                         id);
    if (err == GRPO_OK)
        err = regenerate(sc, &rec, model, threads, re_exec, &identical);
    for (int i = 0; i < GRPO_ROLLOUT_MAX_STOP; i++)
        free(rec.stops[i]);
    grpo_stored_completion_free(sc);
    grpo_store_close(st);
    if (err != GRPO_OK)
        return cli_fail(CMD);
    return identical ? CLI_OK : CLI_FAIL;
}
