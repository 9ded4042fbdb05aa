/* `grpo rollout`: sample G completions per prompt with the rollout engine, score them with the
 * verifiers as groups complete (a thread pool, overlapping generation), compute group-relative
 * advantages, and record everything in the store; optionally write JSONL and publish batches to a
 * trainer over the bridge.
 *
 * Threads: the main thread drives the scheduler (one forward per step, itself multi-threaded);
 * --verify-threads workers pop completed groups, verify, write and publish them. */
#include "cli/cli.h"
#include "cli/run_common.h"
#include "common/common_int.h"
#include "grpo/bridge.h"
#include "grpo/rollout.h"
#include "grpo/store.h"
#include "grpo/verify.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CMD "rollout"

typedef struct args {
    const char *model, *prompts, *db, *out, *publish, *tokenizer, *template_name;
    const char *ref_model, *reward_config, *kv_budget;
    int threads, verify_threads, rescore, max_pending, window, max_batch, gpu, resume;
    uint64_t kv_bytes, kv_tokens;
    cli_gen_args gen; /* --group, sampling, --seed, stops, --logprobs, --on-bad-line */
    char model_buf[PATH_MAX], prompts_buf[PATH_MAX];
} args;

/* What a worker needs about a prompt; the group's user pointer. */
typedef struct prompt_ctx {
    const grpo_prompt *p;
    char *rendered;
    int64_t store_prompt_id;
    char *sampling_json;
} prompt_ctx;

typedef struct run_ctx {
    const args *a;
    grpo_rollout *r;
    grpo_policy *pol;
    grpo_store *store;
    int64_t run_id;
    char run_id_str[32];
    grpo_rewarder *rewarder;
    grpo_bridge_publisher *pub;
    cli_store_persist persist;
    FILE *out;
    pthread_mutex_t mu; /* guards out and the totals below */
    grpo_err first_err;
    char first_msg[512];
    size_t groups_done, groups_handled, zero_std_groups, samples;
    size_t already; /* --resume: groups the resumed run had recorded */
    int resumed;    /* run_id is a resumed run */
    int opens_think;
    double reward_sum;
    uint64_t tokens;
} run_ctx;

static void
usage(FILE *f)
{
    fprintf(
        f,
        "usage: grpo rollout [options]\n\n"
        "Samples G completions per prompt (one shared prefill per prompt, continuous batching),\n"
        "verifies them as groups complete, and records runs, groups, completions and rewards.\n"
        "With neither --model nor --prompts it runs the bundled demo model (models/demo +\n"
        "data/demo_prompts.jsonl) when present, else the tiny test model with\n"
        "data/tiny_prompts.jsonl.\n\n"
        "  --model DIR          model directory (config.json, safetensors, tokenizer.json)\n"
        "  --prompts FILE       prompts JSONL, or git:REPO_PATH@REV:path/in/repo.jsonl\n");
    cli_gen_help_sampling(f);
    fputs("  --seed S             run seed; a completion is a pure function of the weights, the\n"
          "                       prompt, the params, S, the prompt id and the sample index\n"
          "                       (default 0)\n",
          f);
    cli_gen_help_stops(f);
    fputs("  --template NAME      chat template: r1 (default), v3, none\n"
          "  --tokenizer PATH     tokenizer.json (default: the model directory's)\n"
          "  --db FILE            SQLite store (default grpo.db)\n"
          "  --out FILE.jsonl     also write one JSON line per completion (appended to with\n"
          "                       --resume: a group an interrupt cut short has lines with\n"
          "                       finish \"abort\", superseded by its later lines)\n"
          "  --resume             continue the newest unfinished run (interrupted or failed)\n"
          "                       whose options are these: groups it recorded are kept, groups\n"
          "                       an interrupt cut short are sampled again, and the rest are\n"
          "                       sampled as the whole run would have; refused when its weights\n"
          "                       differ. Starts a new run when there is none. Not with --publish\n"
          "  --publish URL        publish one batch per group to a trainer (tcp://, ipc://);\n"
          "                       batches wait in the store until acknowledged, and the run\n"
          "                       ends when the trainer has acknowledged all of them\n"
          "  --publish-window K   unacknowledged batches before publishing blocks (default 4)\n"
          "                       New weights a trainer sends (bridge) are applied between\n"
          "                       groups: admission pauses, groups in flight finish, the\n"
          "                       weights are swapped and the next groups carry the new\n"
          "                       policy version\n"
          "  --max-pending-groups N  pause admitting prompts while N finished groups wait for\n"
          "                       verification or publishing (backpressure; default 8)\n"
          "  --max-batch N        decode rows per forward (default 256; bounds the logits\n"
          "                       buffer: N x vocab floats)\n"
          "  --threads N          forward threads (default: all CPUs)\n"
          "  --gpu N              run the model on GPU N (CUDA build; CUDA_VISIBLE_DEVICES=N):\n"
          "                       the CUDA kernels with exact fp32 GEMMs, operands staged per\n"
          "                       op (docs/cuda.md)\n"
          "  --verify-threads N   verifier threads (default 2)\n"
          "  --kv-budget B        KV cache budget: bytes (4096, 512M, 2G) or tokens (65536t);\n"
          "                       groups are admitted while their worst case fits (default 1G)\n",
          f);
    cli_gen_help_logprobs(f);
    fputs("  --ref-model DIR      reference model: per-token ref logprobs and KL summaries\n"
          "  --rescore            recompute policy logprobs by teacher forcing and report the\n"
          "                       largest sampling/scoring mismatch\n"
          "  --reward-config FILE reward composition (default: math = math + 0.2 format, ...)\n"
          "  --on-bad-line MODE   fail (default) or skip a bad prompts line\n"
          "  --help               this text\n\n"
          "exit codes: 0 success, 1 runtime failure, 2 usage error\n",
          f);
}

static int
resolve_defaults(args *a)
{
    if (a->model != NULL || a->prompts != NULL) {
        if (a->model == NULL || a->prompts == NULL)
            return cli_usage(CMD, "give both --model and --prompts, or neither for the demo");
        return 0;
    }
    if (cli_bundled("models/demo", a->model_buf, sizeof a->model_buf, 1) &&
        cli_bundled("data/demo_prompts.jsonl", a->prompts_buf, sizeof a->prompts_buf, 0)) {
    } else if (cli_bundled("tests/data/tiny_models/bf16", a->model_buf, sizeof a->model_buf, 1) &&
               cli_bundled("data/tiny_prompts.jsonl", a->prompts_buf, sizeof a->prompts_buf, 0)) {
    } else {
        return cli_usage(CMD, "no bundled demo model found; give --model and --prompts");
    }
    a->model = a->model_buf, a->prompts = a->prompts_buf;
    fprintf(stderr, "grpo rollout: model %s, prompts %s\n", a->model, a->prompts);
    return 0;
}

enum {
    O_DB = 256,
    O_OUT,
    O_PUBLISH,
    O_THREADS,
    O_VTHREADS,
    O_GPU,
    O_KV,
    O_REF,
    O_RESCORE,
    O_REWARD,
    O_TEMPLATE,
    O_TOKENIZER,
    O_MODEL,
    O_PROMPTS,
    O_PENDING,
    O_WINDOW,
    O_MAXBATCH,
    O_RESUME
};

static const struct option long_opts[] = {
    {"model", required_argument, 0, O_MODEL},
    {"prompts", required_argument, 0, O_PROMPTS},
    {"db", required_argument, 0, O_DB},
    {"out", required_argument, 0, O_OUT},
    {"publish", required_argument, 0, O_PUBLISH},
    {"threads", required_argument, 0, O_THREADS},
    {"verify-threads", required_argument, 0, O_VTHREADS},
    {"gpu", required_argument, 0, O_GPU},
    {"kv-budget", required_argument, 0, O_KV},
    {"ref-model", required_argument, 0, O_REF},
    {"rescore", no_argument, 0, O_RESCORE},
    {"reward-config", required_argument, 0, O_REWARD},
    {"template", required_argument, 0, O_TEMPLATE},
    {"tokenizer", required_argument, 0, O_TOKENIZER},
    {"max-pending-groups", required_argument, 0, O_PENDING},
    {"publish-window", required_argument, 0, O_WINDOW},
    {"max-batch", required_argument, 0, O_MAXBATCH},
    {"resume", no_argument, 0, O_RESUME},
    CLI_GEN_LONG_OPTS,
    {0, 0, 0, 0},
};

static int
parse_opt(void *ctx, int c, const char *v)
{
    args *a = ctx;
    long n;
    switch (c) {
    case O_MODEL:
        a->model = v;
        return 0;
    case O_PROMPTS:
        a->prompts = v;
        return 0;
    case O_RESUME:
        a->resume = 1;
        return 0;
    case O_DB:
        a->db = v;
        return 0;
    case O_OUT:
        a->out = v;
        return 0;
    case O_PUBLISH:
        a->publish = v;
        return 0;
    case O_KV:
        a->kv_budget = v;
        return 0;
    case O_REF:
        a->ref_model = v;
        return 0;
    case O_RESCORE:
        a->rescore = 1;
        return 0;
    case O_REWARD:
        a->reward_config = v;
        return 0;
    case O_TEMPLATE:
        if (strcmp(v, "r1") != 0 && strcmp(v, "v3") != 0 && strcmp(v, "none") != 0)
            return cli_usage(CMD, "--template %s: expected r1, v3 or none", v);
        a->template_name = v;
        return 0;
    case O_TOKENIZER:
        a->tokenizer = v;
        return 0;
    case O_PENDING:
    case O_WINDOW:
    case O_MAXBATCH:
        if (cli_parse_long(v, 1, 1 << 20, &n) != 0)
            return cli_usage(CMD, "--%s %s: expected a positive integer",
                             c == O_PENDING  ? "max-pending-groups"
                             : c == O_WINDOW ? "publish-window"
                                             : "max-batch",
                             v);
        *(c == O_PENDING ? &a->max_pending : c == O_WINDOW ? &a->window : &a->max_batch) = (int)n;
        return 0;
    case O_THREADS:
    case O_VTHREADS:
        if (cli_parse_long(v, 1, 1024, &n) != 0)
            return cli_usage(CMD, "--%s %s: expected an integer in [1, 1024]",
                             c == O_THREADS ? "threads" : "verify-threads", v);
        *(c == O_THREADS ? &a->threads : &a->verify_threads) = (int)n;
        return 0;
    case O_GPU:
        if (cli_parse_long(v, 0, 1023, &n) != 0)
            return cli_usage(CMD, "--gpu %s: a device index in [0, 1023]", v);
        a->gpu = (int)n;
        return 0;
    default:
        return cli_gen_is_opt(c) ? cli_gen_parse_opt(CMD, &a->gen, c, v)
                                 : cli_usage(CMD, "unknown option");
    }
}

/* "65536t" / "65536tok" / "65536tokens" -> tokens; else a byte size. */
static int
parse_budget(const char *s, uint64_t *bytes, uint64_t *tokens)
{
    char *end;
    *bytes = *tokens = 0;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end != s && s[0] != '-' && errno == 0 &&
        (strcmp(end, "t") == 0 || strcmp(end, "tok") == 0 || strcmp(end, "tokens") == 0)) {
        *tokens = v;
        return v > 0 ? 0 : -1;
    }
    return cli_parse_size(s, bytes) == 0 && *bytes > 0 ? 0 : -1;
}

/* The NNG transports the bridge's publisher listens on (tcp4/tcp6 are NNG's address-family forms
 * of tcp); anything else is a usage error, caught before the model is loaded. */
static bool
publish_scheme_ok(const char *url)
{
    static const char *const schemes[] = {"tcp://", "tcp4://", "tcp6://", "ipc://", "inproc://"};
    for (size_t k = 0; k < sizeof schemes / sizeof schemes[0]; k++)
        if (strncmp(url, schemes[k], strlen(schemes[k])) == 0)
            return true;
    return false;
}

static int
parse_args(args *a, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    cli_gen_defaults(&a->gen);
    a->db = "grpo.db", a->verify_threads = 2;
    a->kv_budget = "1G", a->max_pending = 8, a->window = 4;
    a->max_batch = 256, a->gpu = -1;
    int rc = cli_getopt(CMD, argc, argv, long_opts, parse_opt, a);
    if (rc != 0 || (rc = cli_select_gpu(CMD, a->gpu, a->threads)) != 0)
        return rc;
    if (parse_budget(a->kv_budget, &a->kv_bytes, &a->kv_tokens) != 0)
        return cli_usage(CMD, "--kv-budget %s: expected bytes (512M, 2G) or tokens (65536t)",
                         a->kv_budget);
    if (a->resume && a->publish)
        return cli_usage(CMD, "--resume does not go with --publish (a trainer's run is resumed "
                              "by the trainer bridge, not by sampling again)");
    if (a->publish && !publish_scheme_ok(a->publish))
        return cli_usage(CMD, "--publish %s: expected a tcp://, ipc:// or inproc:// URL",
                         a->publish);
    return resolve_defaults(a);
}

/* ---- per-group output ---- */

static char *
sampling_json(const args *a, const grpo_policy *pol, const grpo_prompt *p, int32_t n_prompt,
              int32_t eos)
{
    cJSON *o = cJSON_CreateObject();
    char *txt;
    cli_gen_json_sampling(o, &a->gen, p->id);
    cJSON_AddStringToObject(o, "template", grpo_policy_template(pol));
    char tp[PATH_MAX];
    if (a->tokenizer)
        cJSON_AddStringToObject(o, "tokenizer", realpath(a->tokenizer, tp) ? tp : a->tokenizer);
    cJSON_AddNumberToObject(o, "eos_id", eos);
    cli_gen_json_stops(o, &a->gen);
    cJSON_AddNumberToObject(o, "prompt_tokens", n_prompt);
    txt = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return txt;
}

static void
note_error(run_ctx *c, grpo_err err)
{
    pthread_mutex_lock(&c->mu);
    if (c->first_err == GRPO_OK) {
        c->first_err = err;
        snprintf(c->first_msg, sizeof c->first_msg, "%s", grpo_error_last());
    }
    pthread_mutex_unlock(&c->mu);
}

typedef struct scored {
    grpo_reward_result *res;
    double *rewards, *adv;
    uint8_t zero_var;
} scored;

static grpo_err
verify_group(run_ctx *c, grpo_rollout_group *g, scored *sc)
{
    prompt_ctx *pc = g->user;
    int32_t G = g->n_samples;
    for (int32_t i = 0; i < G; i++) {
        grpo_rollout_sample *s = &g->samples[i];
        grpo_verifier_sample vs = {0};
        vs.task = pc->p->task ? pc->p->task : "math";
        vs.prompt = pc->rendered;
        vs.completion = s->text ? s->text : "";
        vs.completion_len = s->text ? s->text_len : 0;
        vs.answer = pc->p->answer;
        vs.tests_json = pc->p->tests_json;
        vs.language = pc->p->language;
        vs.extra_json = pc->p->record_json;
        vs.prompt_opens_think = c->opens_think;
        vs.n_tokens = s->n_tokens;
        vs.max_tokens = c->a->gen.max_new;
        vs.truncated = s->finish == GRPO_ROLLOUT_FINISH_LENGTH;
        grpo_err err = grpo_rewarder_score(c->rewarder, &vs, &sc->res[i]);
        if (err != GRPO_OK)
            return err;
        sc->rewards[i] = sc->res[i].reward;
    }
    return cli_group_advantages(sc->rewards, G, sc->adv, &sc->zero_var);
}

static grpo_err
store_group(run_ctx *c, const grpo_rollout_group *g, const scored *sc)
{
    prompt_ctx *pc = g->user;
    int32_t G = g->n_samples;
    grpo_completion_rec *cr = calloc((size_t)G, sizeof *cr);
    grpo_reward_rec *rr = calloc((size_t)G * GRPO_REWARD_MAX_TERMS, sizeof *rr);
    grpo_err err = GRPO_OK;
    if (cr == NULL || rr == NULL) {
        err = GRPO_ENOMEM;
        goto done;
    }
    for (int32_t i = 0; i < G; i++) {
        const grpo_rollout_sample *s = &g->samples[i];
        const grpo_reward_result *res = &sc->res[i];
        grpo_completion_rec *r = &cr[i];
        r->sample_index = s->index;
        r->n_tokens = s->n_tokens;
        r->token_ids = s->tokens;
        r->token_logprobs = s->logprob_raw;
        r->text = s->text ? s->text : "";
        r->text_len = s->text ? s->text_len : 0;
        r->finish_reason = cli_store_finish(s->finish);
        for (int32_t k = 0; k < s->n_tokens; k++)
            r->logprob_sum += s->logprob_raw[k];
        r->gen_ms = (s->t_done - g->t_admit) * 1e3;
        r->first_token_ms = g->t_first_token > 0 ? (g->t_first_token - g->t_admit) * 1e3 : 0;
        r->has_reward = 1, r->reward = res->reward, r->correct = -1;
        r->n_rewards = res->n_terms;
        r->rewards = rr + (size_t)i * GRPO_REWARD_MAX_TERMS;
        for (int32_t t = 0; t < res->n_terms; t++) {
            const grpo_reward_term *tm = &res->terms[t];
            rr[(size_t)i * GRPO_REWARD_MAX_TERMS + t] =
                (grpo_reward_rec){tm->verifier, tm->version,      tm->kind, tm->label,
                                  tm->score,    tm->details_json, tm->ms};
        }
        r->has_advantage = 1, r->advantage = sc->adv[i];
        if (s->ref_logprob) {
            double kmax = 0, ksum = 0;
            for (int32_t k = 0; k < s->n_tokens; k++) {
                double kl = grpo_kl_token(GRPO_KL_K3, s->logprob_raw[k], s->ref_logprob[k]);
                ksum += kl, kmax = kl > kmax ? kl : kmax;
                r->ref_logprob_sum += s->ref_logprob[k];
            }
            r->kl_mean = s->n_tokens ? ksum / s->n_tokens : 0, r->kl_max = kmax;
        }
    }
    grpo_group_rec gr = {0};
    /* step = the policy version that sampled the group: 0 without a trainer; with --publish each
     * new weights version is a training step, so `grpo stats --by step` is the reward curve */
    gr.run_id = c->run_id, gr.step = g->policy_version, gr.prompt_id = pc->store_prompt_id;
    gr.policy_version = g->policy_version, gr.seed = c->a->gen.seed;
    gr.sampling_json = pc->sampling_json, gr.max_tokens = c->a->gen.max_new;
    gr.started_at = (double)time(NULL) - (g->t_done - g->t_submit);
    gr.finished_at = (double)time(NULL);
    gr.gen_ms = (g->t_done - g->t_admit) * 1e3;
    gr.prefill_ms = g->t_first_token > 0 ? (g->t_first_token - g->t_admit) * 1e3 : 0;
    gr.n_completions = G, gr.completions = cr;
    err = grpo_store_put_group(c->store, &gr);
done:
    free(cr), free(rr);
    return err;
}

static void
json_floats(cJSON *o, const char *key, const float *v, int32_t n)
{
    cJSON *arr = cJSON_AddArrayToObject(o, key);
    for (int32_t i = 0; i < n; i++)
        cJSON_AddItemToArray(arr, cJSON_CreateNumber(v[i]));
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0 when it is not one. */
static size_t
utf8_seq(const unsigned char *s, size_t n)
{
    size_t len = s[0] < 0x80                    ? 1
                 : s[0] >= 0xC2 && s[0] <= 0xDF ? 2
                 : s[0] >= 0xE0 && s[0] <= 0xEF ? 3
                 : s[0] >= 0xF0 && s[0] <= 0xF4 ? 4
                                                : 0;
    if (len == 0 || len > n || (len > 1 && !grpo__utf8_valid((const char *)s, len)))
        return 0;
    return s[0] == 0 ? 0 : len; /* NUL cannot travel in a C string */
}

/* Model output may be invalid UTF-8 (or hold NUL): JSON needs text, so each bad byte becomes
 * U+FFFD here (the store keeps the exact bytes). The caller frees the result. */
static char *
utf8_lossy(const char *text, size_t n)
{
    grpo_buf b = {0};
    for (size_t i = 0; i < n;) {
        size_t l = utf8_seq((const unsigned char *)text + i, n - i);
        if (grpo__buf_append(&b, l ? text + i : "\xEF\xBF\xBD", l ? l : 3) != GRPO_OK)
            break;
        i += l ? l : 1;
    }
    if (grpo__buf_append(&b, "", 1) != GRPO_OK) {
        grpo__buf_fini(&b);
        return NULL;
    }
    return b.data;
}

static grpo_err
write_jsonl(run_ctx *c, const grpo_rollout_group *g, const scored *sc)
{
    prompt_ctx *pc = g->user;
    for (int32_t i = 0; i < g->n_samples; i++) {
        const grpo_rollout_sample *s = &g->samples[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "run_id", (double)c->run_id);
        cJSON_AddNumberToObject(o, "group", (double)g->id);
        cJSON_AddStringToObject(o, "prompt_id", pc->p->id);
        cJSON_AddNumberToObject(o, "sample", s->index);
        cJSON_AddStringToObject(o, "finish", grpo_rollout_finish_name(s->finish));
        cJSON_AddNumberToObject(o, "n_tokens", s->n_tokens);
        char *text = utf8_lossy(s->text ? s->text : "", s->text ? s->text_len : 0);
        cJSON_AddStringToObject(o, "text", text ? text : "");
        free(text);
        cJSON_AddNumberToObject(o, "reward", sc->rewards[i]);
        cJSON_AddNumberToObject(o, "advantage", sc->adv[i]);
        if (pc->p->task)
            cJSON_AddStringToObject(o, "task", pc->p->task);
        if (pc->p->answer)
            cJSON_AddStringToObject(o, "answer", pc->p->answer);
        cJSON *tk = cJSON_AddArrayToObject(o, "tokens");
        for (int32_t k = 0; k < s->n_tokens; k++)
            cJSON_AddItemToArray(tk, cJSON_CreateNumber(s->tokens[k]));
        json_floats(o, "logprobs", s->logprob_raw, s->n_tokens);
        if (s->logprob_processed)
            json_floats(o, "logprobs_processed", s->logprob_processed, s->n_tokens);
        if (s->ref_logprob)
            json_floats(o, "ref_logprobs", s->ref_logprob, s->n_tokens);
        if (s->policy_logprob)
            json_floats(o, "rescored_logprobs", s->policy_logprob, s->n_tokens);
        char *line = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        if (line == NULL)
            return GRPO_ENOMEM;
        pthread_mutex_lock(&c->mu);
        fputs(line, c->out);
        fputc('\n', c->out);
        pthread_mutex_unlock(&c->mu);
        free(line);
    }
    return GRPO_OK;
}

static grpo_err
publish_group(run_ctx *c, const grpo_rollout_group *g, const scored *sc)
{
    prompt_ctx *pc = g->user;
    int32_t G = g->n_samples, P = g->n_prompt;
    size_t T = 0;
    int has_ref = g->samples[0].ref_logprob != NULL;
    for (int32_t i = 0; i < G; i++)
        T += (size_t)P + (size_t)g->samples[i].n_tokens;
    grpo_batch *b = NULL;
    grpo_err err =
        grpo_batch_create(&b, c->run_id_str, (size_t)G, T, has_ref ? GRPO_BATCH_HAS_REF : 0);
    if (err != GRPO_OK)
        return err;
    b->batch_id = c->run_id << 32 | (int64_t)g->id; /* unique per store */
    b->step = g->policy_version, b->policy_version = g->policy_version;
    if ((err = grpo_batch_set_str(b, &b->sampling_json, pc->sampling_json)) != GRPO_OK)
        goto done;
    size_t at = 0;
    for (int32_t i = 0; i < G; i++) {
        const grpo_rollout_sample *s = &g->samples[i];
        cli_batch_row row = {s->tokens,     s->logprob_raw, has_ref ? s->ref_logprob : NULL,
                             s->n_tokens,   s->index,       sc->adv[i],
                             sc->rewards[i]};
        cli_batch_put_row(b, &at, i, g->prompt, P, (int64_t)g->id, &row);
    }
    err = grpo_bridge_publish(c->pub, b, -1);
done:
    grpo_batch_destroy(b);
    return err;
}

static grpo_err
handle_group(run_ctx *c, grpo_rollout_group *g)
{
    int32_t G = g->n_samples;
    scored sc = {0};
    sc.res = calloc((size_t)G, sizeof *sc.res);
    sc.rewards = calloc((size_t)G, sizeof *sc.rewards);
    sc.adv = calloc((size_t)G, sizeof *sc.adv);
    grpo_err err = sc.res && sc.rewards && sc.adv ? GRPO_OK : GRPO_ENOMEM;
    if (err == GRPO_OK)
        err = verify_group(c, g, &sc);
    if (err == GRPO_OK)
        err = store_group(c, g, &sc);
    if (err == GRPO_OK && c->out)
        err = write_jsonl(c, g, &sc);
    int aborted = 0; /* a cancelled group is recorded, never sent to a trainer */
    for (int32_t i = 0; i < G; i++)
        aborted |= g->samples[i].finish == GRPO_ROLLOUT_FINISH_ABORT;
    if (err == GRPO_OK && c->pub && !aborted)
        err = publish_group(c, g, &sc);
    if (err == GRPO_OK) {
        pthread_mutex_lock(&c->mu);
        c->groups_done++;
        c->zero_std_groups += (sc.zero_var & GRPO_GROUP_ZERO_VAR) != 0;
        for (int32_t i = 0; i < G; i++) {
            c->reward_sum += sc.rewards[i];
            c->tokens += (uint64_t)g->samples[i].n_tokens;
        }
        c->samples += (size_t)G;
        pthread_mutex_unlock(&c->mu);
    }
    for (int32_t i = 0; sc.res && i < G; i++)
        grpo_reward_result_fini(&sc.res[i]);
    free(sc.res), free(sc.rewards), free(sc.adv);
    return err;
}

static void *
verify_worker(void *arg)
{
    run_ctx *c = arg;
    grpo_rollout_group *g;
    while ((g = grpo_rollout_pop(c->r, 1)) != NULL) {
        grpo_err err = handle_group(c, g);
        if (err != GRPO_OK) {
            note_error(c, err);
            grpo_rollout_cancel(c->r);
        }
        pthread_mutex_lock(&c->mu);
        c->groups_handled++;
        pthread_mutex_unlock(&c->mu);
        grpo_rollout_group_free(g);
    }
    return NULL;
}

/* ---- new weights from the trainer ---- */

/* The scheduler's token text comes through the run, so the policy behind it can be swapped. */
static const char *
run_token_bytes(const void *ctx, int32_t id, size_t *len)
{
    return grpo_policy_token_bytes(((const run_ctx *)ctx)->pol, id, len);
}

/* A model directory for weights version v: links to every file of the running model's directory
 * except its weights, and model.safetensors -> the new file. It stays beside the store so `grpo
 * replay` can load that version later. */
static grpo_err
weights_dir(const run_ctx *c, const grpo_weights_update *u, char *out, size_t cap)
{
    char src[PATH_MAX], link[PATH_MAX + 300], target[PATH_MAX + 300];
    if (realpath(c->a->model, src) == NULL)
        return grpo__fail_errno(GRPO_EIO, errno, "%s", c->a->model);
    snprintf(out, cap, "%s.weights", c->a->db);
    mkdir(out, 0755);
    snprintf(out, cap, "%s.weights/run%lld-v%lld", c->a->db, (long long)c->run_id,
             (long long)u->version);
    if (mkdir(out, 0755) != 0 && errno != EEXIST)
        return grpo__fail_errno(GRPO_EIO, errno, "%s", out);
    DIR *d = opendir(src);
    if (d == NULL)
        return grpo__fail_errno(GRPO_EIO, errno, "%s", src);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (e->d_name[0] == '.' || (n > 12 && strcmp(e->d_name + n - 12, ".safetensors") == 0) ||
            strstr(e->d_name, ".safetensors.index") != NULL)
            continue;
        snprintf(link, sizeof link, "%s/%s", out, e->d_name);
        snprintf(target, sizeof target, "%s/%s", src, e->d_name);
        unlink(link);
        if (symlink(target, link) != 0) {
            closedir(d);
            return grpo__fail_errno(GRPO_EIO, errno, "%s", link);
        }
    }
    closedir(d);
    snprintf(link, sizeof link, "%s/model.safetensors", out);
    unlink(link);
    if (symlink(u->path, link) != 0)
        return grpo__fail_errno(GRPO_EIO, errno, "%s", link);
    return GRPO_OK;
}

/* With no group in flight: load the new weights, swap them into the scheduler (and the rescoring
 * pool), record the version. A bad update is logged and the old weights stay. */
static grpo_err
swap_weights(run_ctx *c, const grpo_weights_update *u, grpo_kv **rescore_kv,
             grpo_rollout_backend *rescore_be)
{
    char dir[PATH_MAX];
    grpo_policy *np = NULL;
    grpo_kv *nkv = NULL;
    grpo_rollout_backend nbe = {0};
    const args *a = c->a;
    grpo_policy_opts po = {.tokenizer = a->tokenizer,
                           .template_name = a->template_name,
                           .n_threads = a->threads,
                           .kv_budget_bytes = (size_t)a->kv_bytes,
                           .kv_budget_tokens = (size_t)a->kv_tokens,
                           .backend = a->gpu >= 0};
    grpo_err err = weights_dir(c, u, dir, sizeof dir);
    if (err == GRPO_OK)
        err = grpo_policy_open(&np, dir, &po);
    if (err == GRPO_OK && *rescore_kv != NULL &&
        ((err = grpo_kv_create(&nkv, grpo_model_get_config(grpo_policy_model(np)),
                               (size_t)256 << 20)) != GRPO_OK ||
         (err = grpo_rollout_backend_model(&nbe, grpo_policy_model(np), nkv)) != GRPO_OK))
        goto fail;
    if (err == GRPO_OK &&
        (err = grpo_rollout_set_policy(c->r, grpo_policy_backend(np), u->version)) != GRPO_OK)
        goto fail;
    if (err != GRPO_OK)
        goto fail;
    if (*rescore_kv != NULL) {
        grpo_rollout_backend_fini(rescore_be);
        grpo_kv_destroy(*rescore_kv);
        *rescore_be = nbe, *rescore_kv = nkv; /* the engine holds rescore_be by address */
    }
    grpo_policy *old = c->pol;
    c->pol = np; /* the scheduler thread is the only reader of c->pol from here */
    grpo_policy_close(old);
    grpo_bridge_set_policy_version(c->pub, u->version);
    fprintf(stderr, "\ngrpo rollout: policy version %lld from %s\n", (long long)u->version,
            u->path);
    return grpo_store_put_policy_version(c->store, c->run_id, u->version, dir, u->sha256);
fail:
    grpo_log(GRPO_LOG_ERROR, "weights version %lld from %s not applied: %s", (long long)u->version,
             u->path, grpo_error_last());
    grpo_rollout_backend_fini(&nbe);
    grpo_kv_destroy(nkv);
    grpo_policy_close(np);
    return GRPO_OK;
}

/* ---- setup ---- */

static grpo_err
submit_all(run_ctx *c, const grpo_prompt_set *ps, prompt_ctx *pcs, size_t *n_submitted)
{
    const args *a = c->a;
    grpo_err err = GRPO_OK;
    int32_t eos = grpo_policy_eos_id(c->pol);
    for (size_t i = 0; i < ps->n && err == GRPO_OK; i++) {
        const grpo_prompt *p = &ps->items[i];
        int32_t *ids = NULL;
        size_t n = 0;
        pcs[i].p = p;
        err = grpo_policy_encode(c->pol, p, &ids, &n, &pcs[i].rendered);
        if (err != GRPO_OK && a->gen.skip_bad) {
            fprintf(stderr, "grpo rollout: skipping prompt %s (line %lld): %s\n", p->id,
                    (long long)p->line, grpo_error_last());
            err = GRPO_OK;
            continue;
        }
        grpo_prompt_rec pr = {ps->source,       (int64_t)i,     p->prompt,
                              p->messages_json, p->answer_json, p->tests_json};
        if (err == GRPO_OK)
            err = grpo_store_put_prompt(&pcs[i].store_prompt_id, c->store, &pr);
        int32_t exists = 0;
        if (err == GRPO_OK && c->resumed &&
            (err = grpo_store_group_exists(&exists, c->store, c->run_id, 0, pcs[i].store_prompt_id,
                                           a->gen.seed)) == GRPO_OK &&
            exists) {
            c->already++;
            free(ids);
            continue;
        }
        if (err == GRPO_OK &&
            (pcs[i].sampling_json = sampling_json(a, c->pol, p, (int32_t)n, eos)) == NULL)
            err = GRPO_ENOMEM;
        grpo_rollout_request q = {0};
        q.prompt = ids, q.n_prompt = (int32_t)n, q.group_size = a->gen.G, q.seed = a->gen.seed;
        q.prompt_key = grpo_rollout_prompt_key(p->id);
        grpo_gen_params_default(&q.params);
        q.params.sampling = a->gen.s;
        q.params.max_new_tokens = a->gen.max_new;
        q.params.eos_id = eos;
        q.params.logprobs = a->gen.logprobs;
        q.params.n_stop_ids = a->gen.n_stop_ids;
        memcpy(q.params.stop_ids, a->gen.stop_ids, sizeof a->gen.stop_ids);
        q.params.n_stop_strings = a->gen.n_stop;
        for (int k = 0; k < a->gen.n_stop; k++)
            q.params.stop_strings[k] = a->gen.stop[k];
        q.user = &pcs[i];
        if (err == GRPO_OK && (err = grpo_rollout_submit(c->r, &q, NULL)) == GRPO_OK)
            (*n_submitted)++;
        free(ids);
    }
    return err;
}

static char *
config_json(const args *a)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", a->model);
    cJSON_AddStringToObject(o, "prompts", a->prompts);
    cli_gen_json_config(o, &a->gen);
    /* The seed's exact digits: as a double, 2^53 + 1 would read as 2^53 and --resume would take
     * a run of one seed for the other. Below 10^15 the text is what it always was. */
    char seed[24];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)a->gen.seed);
    cJSON_AddRawToObject(o, "seed", seed);
    cJSON_AddStringToObject(o, "kv_budget", a->kv_budget);
    if (a->ref_model)
        cJSON_AddStringToObject(o, "ref_model", a->ref_model);
    if (a->reward_config)
        cJSON_AddStringToObject(o, "reward_config", a->reward_config);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static void
progress(run_ctx *c, size_t total, double t0, int final)
{
    static double last;
    double now = grpo_now();
    if (!final && now - last < 0.5)
        return;
    last = now;
    grpo_rollout_stats st;
    grpo_rollout_get_stats(c->r, &st);
    double el = now - t0, rate = el > 0 ? (double)st.tokens_generated / el : 0;
    size_t done = (size_t)st.groups_done;
    double eta = done ? el / (double)done * (double)(total - done) : 0;
    char eta_s[32] = "--:--"; /* unknown until a group has finished */
    if (done)
        snprintf(eta_s, sizeof eta_s, "%02d:%02d", (int)eta / 60, (int)eta % 60);
    fprintf(stderr, "\rgroups %zu/%zu  in flight %d  %.0f tok/s  ETA %s   %s", done, total,
            st.groups_in_flight, rate, eta_s, final ? "\n" : "");
    fflush(stderr);
}

typedef struct setup {
    grpo_prompt_set ps;
    grpo_policy *ref;
    grpo_kv *rescore_kv;
    grpo_rollout_backend rescore_be;
    grpo_reward_config *rcfg;
    prompt_ctx *pcs;
} setup;

/* With --resume, the newest unfinished run with this config (its interrupted groups dropped);
 * else, or when there is none, a new run. */
static grpo_err
begin_run(run_ctx *c, setup *su, const args *a, int argc, char **argv, const char *sha)
{
    grpo_err err = GRPO_OK;
    char *cfg = config_json(a);
    int64_t dropped = 0;
    if (cfg == NULL) {
        err = grpo__fail(GRPO_ENOMEM, "rollout: out of memory");
        goto done;
    }
    if (a->resume && (err = grpo_store_run_find(&c->run_id, c->store, cfg)) != GRPO_OK)
        goto done;
    if (c->run_id > 0) {
        if ((err = grpo_store_run_prepare_resume(c->store, c->run_id, sha, &dropped)) == GRPO_OK &&
            (err = grpo_store_run_reopen(c->store, c->run_id)) == GRPO_OK)
            fprintf(stderr,
                    "grpo rollout: resuming run %lld from %s (%lld groups cut short by the "
                    "interrupt are sampled again)\n",
                    (long long)c->run_id, a->db, (long long)dropped);
        c->resumed = err == GRPO_OK;
        goto done;
    }
    if (a->resume)
        fprintf(stderr,
                "grpo rollout: --resume: no unfinished run with these options in %s; "
                "starting a new one\n",
                a->db);
    err = cli_run_begin(&c->run_id, c->store, argc, argv, cfg, &su->ps, a->prompts);
done:
    free(cfg);
    return err;
}

static grpo_err
open_all(run_ctx *c, setup *su, args *a, int argc, char **argv, size_t *budget_pages)
{
    uint64_t bytes = a->kv_bytes, tokens = a->kv_tokens;
    grpo_err err;
    if ((err = grpo_prompts_load(&su->ps, a->prompts, a->gen.skip_bad)) != GRPO_OK)
        return err;
    grpo_policy_opts po = {.tokenizer = a->tokenizer,
                           .template_name = a->template_name,
                           .n_threads = a->threads,
                           .kv_budget_bytes = (size_t)bytes,
                           .kv_budget_tokens = (size_t)tokens,
                           .backend = a->gpu >= 0};
    if ((err = grpo_policy_open(&c->pol, a->model, &po)) != GRPO_OK)
        return err;
    const grpo_rollout_backend *be = grpo_policy_backend(c->pol);
    *budget_pages = tokens ? (size_t)((tokens + GRPO_KV_PAGE - 1) / GRPO_KV_PAGE) : 0;
    if (*budget_pages > be->pages_total)
        return grpo__fail(GRPO_EINVAL, "--kv-budget %s: more than the KV pool of %zu tokens",
                          a->kv_budget, be->pages_total * (size_t)GRPO_KV_PAGE);
    if (a->ref_model) {
        grpo_policy_opts ro = {.tokenizer = a->tokenizer,
                               .template_name = a->template_name,
                               .n_threads = a->threads,
                               .backend = a->gpu >= 0};
        if ((err = grpo_policy_open(&su->ref, a->ref_model, &ro)) != GRPO_OK)
            return err;
        if (grpo_policy_backend(su->ref)->vocab != be->vocab)
            return grpo__fail(GRPO_EINVAL, "--ref-model %s: vocabulary %d differs from %d",
                              a->ref_model, grpo_policy_backend(su->ref)->vocab, be->vocab);
    }
    if (a->rescore) {
        const grpo_model_config *cfg = grpo_model_get_config(grpo_policy_model(c->pol));
        if ((err = grpo_kv_create(&su->rescore_kv, cfg, (size_t)256 << 20)) != GRPO_OK ||
            (err = grpo_rollout_backend_model(&su->rescore_be, grpo_policy_model(c->pol),
                                              su->rescore_kv)) != GRPO_OK)
            return err;
    }
    err = a->reward_config ? grpo_reward_config_load(&su->rcfg, a->reward_config)
                           : grpo_reward_config_default(&su->rcfg);
    if (err != GRPO_OK || (err = grpo_rewarder_create(&c->rewarder, su->rcfg)) != GRPO_OK)
        return err;
    if ((err = grpo_store_open(&c->store, a->db, NULL)) != GRPO_OK)
        return err;
    const char *sha = grpo_model_weights_sha256(grpo_policy_model(c->pol));
    if (sha == NULL)
        return GRPO_EIO;
    if ((err = begin_run(c, su, a, argc, argv, sha)) != GRPO_OK)
        return err;
    snprintf(c->run_id_str, sizeof c->run_id_str, "%lld", (long long)c->run_id);
    char loc[PATH_MAX];
    if (realpath(a->model, loc) == NULL)
        snprintf(loc, sizeof loc, "%s", a->model);
    if ((err = grpo_store_put_policy_version(c->store, c->run_id, 0, loc, sha)) != GRPO_OK)
        return err;
    if (a->out && (c->out = fopen(a->out, c->resumed ? "a" : "w")) == NULL)
        return grpo__fail_errno(GRPO_EIO, errno, "%s: cannot open for writing", a->out);
    if (a->publish) {
        grpo_bridge_opts bo;
        grpo_bridge_opts_default(&bo);
        bo.run_id = c->run_id_str;
        bo.window = a->window;
        cli_store_persist_init(&c->persist, c->store, c->run_id);
        bo.persist = &c->persist.persist;
        if ((err = grpo_bridge_publisher_create(&c->pub, a->publish, &bo)) != GRPO_OK)
            return err;
    }
    return GRPO_OK;
}

static void
summary(run_ctx *c, double secs)
{
    grpo_rollout_stats st;
    grpo_rollout_get_stats(c->r, &st);
    printf("run %lld: %zu groups, %zu completions, %llu tokens in %.1f s (%.0f tok/s)\n",
           (long long)c->run_id, c->groups_done, c->samples, (unsigned long long)c->tokens, secs,
           secs > 0 ? (double)c->tokens / secs : 0.0);
    printf("reward mean %.4f, zero-std groups %.1f%%, peak groups in flight %d, peak KV pages %zu"
           " of %zu\n",
           c->samples ? c->reward_sum / (double)c->samples : 0.0,
           c->groups_done ? 100.0 * (double)c->zero_std_groups / (double)c->groups_done : 0.0,
           st.peak_groups_in_flight, st.peak_pages_used, st.budget_pages);
}

static volatile sig_atomic_t interrupted;

static void
on_signal(int sig)
{
    (void)sig;
    if (interrupted)
        _exit(130); /* a second signal: stop now (the store stays consistent: WAL) */
    interrupted = 1;
}

/* The engine over the opened policy, with the verifier, reference and rescoring hooks. */
static grpo_err
start_engine(run_ctx *c, setup *su, const args *a, size_t budget_pages)
{
    grpo_rollout_opts ro = {0};
    ro.kv_budget_pages = budget_pages;
    ro.max_batch_seqs = a->max_batch;
    ro.sample_threads = a->threads > 0 ? a->threads : grpo_cpu_count();
    ro.token_bytes = run_token_bytes;
    ro.token_bytes_ctx = c;
    c->opens_think = grpo_policy_opens_think(c->pol);
    ro.ref = su->ref ? grpo_policy_backend(su->ref) : NULL;
    ro.rescore = su->rescore_kv ? &su->rescore_be : NULL;
    return grpo_rollout_create(&c->r, grpo_policy_backend(c->pol), &ro);
}

/* Steps the engine until every submitted group is done (or a signal or an error): new weights
 * are swapped in between groups, and generation pauses while the verifiers are behind. t0: the
 * start of generation, for the progress line. */
static grpo_err
drive(run_ctx *c, setup *su, const args *a, size_t submitted, double t0)
{
    grpo_err err = GRPO_OK;
    int tty = isatty(2), busy = 1, swapping = 0;
    grpo_weights_update wu;
    while (err == GRPO_OK && busy) {
        if (interrupted == 1) {
            fprintf(stderr, "\ngrpo rollout: interrupted; finishing the groups in flight as "
                            "aborted\n");
            grpo_rollout_cancel(c->r);
            interrupted = 2;
        }
        grpo_rollout_stats st;
        grpo_rollout_get_stats(c->r, &st);
        if (c->pub && !swapping && grpo_bridge_poll_weights(c->pub, &wu))
            swapping = 1; /* drain: groups are sampled from one policy */
        if (swapping && st.groups_in_flight == 0) {
            err = swap_weights(c, &wu, &su->rescore_kv, &su->rescore_be);
            swapping = 0;
        }
        pthread_mutex_lock(&c->mu);
        size_t pending = (size_t)st.groups_done - c->groups_handled;
        pthread_mutex_unlock(&c->mu);
        grpo_rollout_pause(c->r, swapping || pending >= (size_t)a->max_pending);
        if (err == GRPO_OK)
            err = grpo_rollout_step(c->r, &busy);
        grpo_rollout_stats st2;
        grpo_rollout_get_stats(c->r, &st2);
        if (st2.forward_calls == st.forward_calls && busy)
            usleep(1000); /* paused with nothing to decode: wait for the verifiers */
        if (tty)
            progress(c, submitted, t0, 0);
    }
    return err;
}

/* Everything open_all and the run made, in reverse (the publisher and the store are closed by the
 * caller first: the publisher persists acks into the store). */
static void
teardown(run_ctx *c, setup *su, pthread_t *th)
{
    grpo_rollout_destroy(c->r);
    for (size_t i = 0; su->pcs && i < su->ps.n; i++)
        free(su->pcs[i].rendered), free(su->pcs[i].sampling_json);
    free(su->pcs), free(th);
    grpo_rewarder_destroy(c->rewarder);
    grpo_reward_config_destroy(su->rcfg);
    grpo_rollout_backend_fini(&su->rescore_be);
    grpo_kv_destroy(su->rescore_kv);
    grpo_policy_close(su->ref);
    grpo_policy_close(c->pol);
    grpo_prompts_fini(&su->ps);
    pthread_mutex_destroy(&c->mu);
}

/* Encodes and submits every prompt (those a resumed run recorded are skipped), then starts the
 * verifier threads into th (*n_th of them). */
static grpo_err
submit_and_start(run_ctx *c, setup *su, const args *a, pthread_t *th, int *n_th, size_t *submitted)
{
    grpo_err err = GRPO_OK;
    if ((su->pcs = calloc(su->ps.n ? su->ps.n : 1, sizeof *su->pcs)) == NULL)
        return GRPO_ENOMEM;
    if ((err = submit_all(c, &su->ps, su->pcs, submitted)) != GRPO_OK)
        return err;
    if (c->resumed)
        fprintf(stderr, "grpo rollout: %zu groups already recorded, %zu to sample\n", c->already,
                *submitted);
    for (int i = 0; i < a->verify_threads; i++, (*n_th)++)
        if (pthread_create(&th[i], NULL, verify_worker, c) != 0)
            return grpo__fail(GRPO_ESYS, "cannot start a verifier thread");
    return GRPO_OK;
}

/* After the drive: the engine closed (cancelled on an error), the verifier threads joined, the
 * trainer's acknowledgements awaited, the summary printed and the run's status recorded. Returns
 * the run's outcome. */
static grpo_err
finish_run(run_ctx *c, pthread_t *th, int n_th, grpo_err err, size_t submitted, double t0)
{
    if (err != GRPO_OK && c->r)
        note_error(c, err);
    if (c->r) {
        if (err != GRPO_OK) {
            grpo_rollout_cancel(c->r);
            grpo_rollout_run(c->r);
        }
        grpo_rollout_close(c->r);
    }
    for (int i = 0; i < n_th; i++)
        pthread_join(th[i], NULL);
    if (isatty(2) && c->r && err == GRPO_OK)
        progress(c, submitted, t0, 1);
    if (c->first_err != GRPO_OK && err == GRPO_OK)
        err = c->first_err;
    if (interrupted && err == GRPO_OK)
        err = grpo__fail(GRPO_ECANCELED, "interrupted; the groups finished so far are recorded");
    if (err == GRPO_OK && c->pub) {
        fprintf(stderr, "grpo rollout: waiting for the trainer to acknowledge every batch\n");
        if ((err = grpo_bridge_flush(c->pub, -1)) == GRPO_OK)
            err = grpo_bridge_finish(c->pub);
    }
    if (err == GRPO_OK)
        summary(c, grpo_now() - t0);
    if (c->store && c->run_id > 0)
        grpo_store_run_end(c->store, c->run_id,
                           interrupted      ? "interrupted"
                           : err == GRPO_OK ? "ok"
                                            : "failed");
    if (err != GRPO_OK)
        fprintf(stderr, "grpo rollout: %s\n",
                c->first_msg[0]        ? c->first_msg
                : grpo_error_last()[0] ? grpo_error_last()
                                       : grpo_err_name(err));
    return err;
}

int
grpo_cmd_rollout(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return CLI_OK;
    }
    args a;
    int rc = parse_args(&a, argc, argv);
    if (rc != 0)
        return rc;
    run_ctx c;
    setup su;
    memset(&c, 0, sizeof c);
    memset(&su, 0, sizeof su);
    c.a = &a;
    pthread_mutex_init(&c.mu, NULL);
    size_t budget_pages = 0, submitted = 0;
    pthread_t *th = calloc((size_t)a.verify_threads, sizeof *th);
    int n_th = 0;
    grpo_err err = th ? open_all(&c, &su, &a, argc, argv, &budget_pages) : GRPO_ENOMEM;
    if (err == GRPO_OK)
        err = start_engine(&c, &su, &a, budget_pages);
    if (err == GRPO_OK)
        err = submit_and_start(&c, &su, &a, th, &n_th, &submitted);
    double t0 = grpo_now();
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    if (err == GRPO_OK)
        err = drive(&c, &su, &a, submitted, t0);
    err = finish_run(&c, th, n_th, err, submitted, t0);
    grpo_bridge_publisher_destroy(c.pub);
    if (c.out)
        fclose(c.out);
    grpo_err cerr = grpo_store_close(c.store);
    if (err == GRPO_OK && cerr != GRPO_OK) {
        err = cerr;
        cli_fail(CMD);
    }
    teardown(&c, &su, th);
    return err == GRPO_OK ? CLI_OK : CLI_FAIL;
}
