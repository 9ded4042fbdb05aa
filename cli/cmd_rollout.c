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
#include "grpo/run.h"
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
    int64_t item; /* its index in the prompt set */
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
    grpo_run_persist persist;
    grpo_run_lock *lock; /* the run is this process's */
    FILE *out;
    pthread_mutex_t mu; /* guards out and the totals below */
    grpo_err first_err;
    char first_msg[512];
    size_t groups_done, groups_handled, zero_std_groups, samples;
    size_t already, skipped; /* --resume: groups the resumed run had recorded; skipped samples */
    int resumed;             /* run_id is a resumed run */
    int finished;            /* --resume found the run finished: nothing to sample */
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
    unsigned long long v = strtoull(s, &end, 10);
    if (end != s && s[0] != '-' &&
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

/* One line per completion of the group, written together and flushed (the store already holds
 * the group: a resumed run repairs the file from it). */
static grpo_err
write_jsonl(run_ctx *c, const grpo_rollout_group *rg, const grpo_run_group *g)
{
    const prompt_ctx *pc = rg->user;
    grpo_buf b = {0};
    grpo_err err = GRPO_OK;
    for (int32_t i = 0; i < g->n_samples && err == GRPO_OK; i++) {
        const grpo_rollout_sample *s = &rg->samples[i];
        const grpo_run_sample *x = &g->samples[i];
        grpo_run_line l = {0};
        l.run_id = c->run_id, l.group = g->item, l.prompt_id = pc->p->id;
        l.task = pc->p->task, l.answer = pc->p->answer;
        l.sample = x->index, l.finish = x->finish, l.n_tokens = x->n_tokens;
        l.text = x->text, l.text_len = x->text_len;
        l.reward = x->score.reward, l.advantage = x->advantage, l.skipped = x->score.skipped;
        l.tokens = x->tokens, l.logprobs = x->logprobs;
        l.logprobs_processed = s->logprob_processed, l.ref_logprobs = s->ref_logprob;
        l.rescored_logprobs = s->policy_logprob;
        char *line = grpo_run_line_json(&l);
        err = line ? grpo__buf_append(&b, line, strlen(line)) : GRPO_ENOMEM;
        if (err == GRPO_OK)
            err = grpo__buf_append(&b, "\n", 1);
        free(line);
    }
    pthread_mutex_lock(&c->mu);
    if (err == GRPO_OK && (fwrite(b.data, 1, b.len, c->out) != b.len || fflush(c->out) != 0))
        err = grpo__fail_errno(GRPO_EIO, errno, "%s: write failed", c->a->out);
    pthread_mutex_unlock(&c->mu);
    grpo__buf_fini(&b);
    return err;
}

static grpo_err
publish_group(run_ctx *c, const grpo_run_group *g)
{
    grpo_batch *b = NULL;
    grpo_err err = grpo_run_batch(&b, g);
    if (err == GRPO_OK)
        err = grpo_bridge_publish(c->pub, b, -1);
    grpo_batch_destroy(b);
    return err;
}

static void
add_totals(run_ctx *c, const grpo_run_group *g)
{
    pthread_mutex_lock(&c->mu);
    c->groups_done++;
    c->zero_std_groups += (g->flags & GRPO_GROUP_ZERO_VAR) != 0;
    for (int32_t i = 0; i < g->n_samples; i++) {
        const grpo_run_sample *s = &g->samples[i];
        c->skipped += s->score.skipped != 0;
        c->reward_sum += s->score.skipped ? 0.0 : s->score.reward;
        c->tokens += (uint64_t)s->n_tokens;
    }
    c->samples += (size_t)g->n_samples;
    pthread_mutex_unlock(&c->mu);
}

/* The steps of a finished group: score, advantages, record, --out lines, publish. */
static grpo_err
handle_group(run_ctx *c, grpo_rollout_group *rg)
{
    prompt_ctx *pc = rg->user;
    grpo_run_group g = {0};
    grpo_err err = grpo_run_group_from_rollout(&g, rg);
    /* step = the policy version that sampled the group: 0 without a trainer; with --publish each
     * new weights version is a training step, so `grpo stats --by step` is the reward curve */
    g.run_id = c->run_id, g.item = pc->item, g.store_prompt_id = pc->store_prompt_id;
    g.step = rg->policy_version, g.seed = c->a->gen.seed, g.max_tokens = c->a->gen.max_new;
    g.sampling_json = pc->sampling_json;
    grpo_run_prompt rp = {pc->p, pc->rendered, c->opens_think};
    if (err == GRPO_OK)
        err = grpo_run_score(&g, c->rewarder, &rp);
    if (err == GRPO_OK)
        err = grpo_run_advantages(&g);
    if (err == GRPO_OK)
        err = grpo_run_record(c->store, &g, NULL, 0);
    if (err == GRPO_OK && c->out)
        err = write_jsonl(c, rg, &g);
    if (err == GRPO_OK && c->pub && !grpo_run_group_aborted(&g)) /* a cancelled group is */
        err = publish_group(c, &g); /* recorded, never sent to a trainer */
    if (err == GRPO_OK)
        add_totals(c, &g);
    grpo_run_group_fini(&g);
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

/* The model directory of weights version v: DB.weights/runN-vV, beside the store, so that `grpo
 * replay` can load that version later. */
static grpo_err
weights_dir(const run_ctx *c, const grpo_weights_update *u, char *out, size_t cap)
{
    snprintf(out, cap, "%s.weights/run%lld-v%lld", c->a->db, (long long)c->run_id,
             (long long)u->version);
    return grpo_run_weights_dir(out, c->a->model, u->path);
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
        pcs[i].p = p, pcs[i].item = (int64_t)i;
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
    cJSON_AddNumberToObject(o, "seed", (double)a->gen.seed);
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

/* Locks the run found for --resume, drops its groups an interrupt cut short and reopens it. */
static grpo_err
resume_run(run_ctx *c, const args *a, const char *sha)
{
    int64_t dropped = 0;
    grpo_err err = grpo_run_lock_take(&c->lock, a->db, c->run_id);
    if (err == GRPO_OK &&
        (err = grpo_store_run_prepare_resume(c->store, c->run_id, sha, &dropped)) == GRPO_OK &&
        (err = grpo_store_run_reopen(c->store, c->run_id)) == GRPO_OK)
        fprintf(stderr,
                "grpo rollout: resuming run %lld from %s (%lld groups cut short by the "
                "interrupt are sampled again)\n",
                (long long)c->run_id, a->db, (long long)dropped);
    c->resumed = err == GRPO_OK;
    return err;
}

/* --resume with nothing unfinished: the newest finished run with these options, if any, is left
 * as it is (nothing to sample; --out is completed from the store, never truncated). */
static grpo_err
find_finished(run_ctx *c, const args *a, const char *cfg)
{
    grpo_err err = grpo_store_run_find_finished(&c->run_id, c->store, cfg);
    if (err != GRPO_OK || c->run_id == 0)
        return err;
    if ((err = grpo_run_lock_take(&c->lock, a->db, c->run_id)) == GRPO_OK) {
        c->finished = 1;
        fprintf(stderr,
                "grpo rollout: --resume: run %lld in %s with these options finished; "
                "nothing to sample\n",
                (long long)c->run_id, a->db);
    }
    return err;
}

/* With --resume, the newest unfinished run with this config (its interrupted groups dropped), or
 * the newest finished one (left as it is); else, or when there is none, a new run. */
static grpo_err
begin_run(run_ctx *c, setup *su, const args *a, int argc, char **argv, const char *sha)
{
    grpo_err err = GRPO_OK;
    char *cfg = config_json(a), *cmdline = cli_join_argv(argc, argv);
    if (cfg == NULL || cmdline == NULL) {
        err = grpo__fail(GRPO_ENOMEM, "rollout: out of memory");
        goto done;
    }
    if (a->resume && (err = grpo_store_run_find(&c->run_id, c->store, cfg)) != GRPO_OK)
        goto done;
    if (c->run_id > 0) {
        err = resume_run(c, a, sha);
        goto done;
    }
    if (a->resume && ((err = find_finished(c, a, cfg)) != GRPO_OK || c->finished))
        goto done;
    if (a->resume)
        fprintf(stderr,
                "grpo rollout: --resume: no unfinished run with these options in %s; "
                "starting a new one\n",
                a->db);
    err = grpo_run_store_begin(&c->run_id, c->store, cmdline, cfg, &su->ps, a->prompts);
    if (err == GRPO_OK)
        err = grpo_run_lock_take(&c->lock, a->db, c->run_id);
done:
    free(cfg), free(cmdline);
    return err;
}

/* --out: a new run's file is started afresh; a resumed (or finished) run's is first made to hold
 * exactly the completions the store records, then appended to. */
static grpo_err
open_out(run_ctx *c, setup *su, const args *a)
{
    size_t rebuilt = 0, dropped = 0;
    grpo_err err;
    if (!c->resumed && !c->finished) {
        if ((c->out = fopen(a->out, "w")) == NULL)
            return grpo__fail_errno(GRPO_EIO, errno, "%s: cannot open for writing", a->out);
        return GRPO_OK;
    }
    if ((err = grpo_run_repair_jsonl(a->out, c->store, c->run_id, &su->ps, &rebuilt, &dropped)) !=
        GRPO_OK)
        return err;
    if (rebuilt || dropped)
        fprintf(stderr,
                "grpo rollout: %s: %zu lines rebuilt from the store, %zu torn, repeated or "
                "superseded lines dropped\n",
                a->out, rebuilt, dropped);
    if (!c->finished && (c->out = fopen(a->out, "a")) == NULL)
        return grpo__fail_errno(GRPO_EIO, errno, "%s: cannot open for appending", a->out);
    return GRPO_OK;
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
    if (a->out && (err = open_out(c, su, a)) != GRPO_OK)
        return err;
    if (c->finished)
        return GRPO_OK;
    if (a->publish) {
        grpo_bridge_opts bo;
        grpo_bridge_opts_default(&bo);
        bo.run_id = c->run_id_str;
        bo.window = a->window;
        grpo_run_persist_init(&c->persist, c->store, c->run_id);
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
           c->samples > c->skipped ? c->reward_sum / (double)(c->samples - c->skipped) : 0.0,
           c->groups_done ? 100.0 * (double)c->zero_std_groups / (double)c->groups_done : 0.0,
           st.peak_groups_in_flight, st.peak_pages_used, st.budget_pages);
    if (c->skipped)
        printf("%zu completions skipped by the verifiers (no advantage, not in the mean)\n",
               c->skipped);
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
    if (err == GRPO_OK && !c.finished)
        err = start_engine(&c, &su, &a, budget_pages);
    if (err == GRPO_OK && !c.finished)
        err = submit_and_start(&c, &su, &a, th, &n_th, &submitted);
    double t0 = grpo_now();
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    if (err == GRPO_OK && !c.finished)
        err = drive(&c, &su, &a, submitted, t0);
    if (!c.finished || err != GRPO_OK)
        err = finish_run(&c, th, n_th, err, submitted, t0);
    grpo_bridge_publisher_destroy(c.pub);
    if (c.out)
        fclose(c.out);
    grpo_err cerr = grpo_store_close(c.store);
    if (err == GRPO_OK && cerr != GRPO_OK) {
        err = cerr;
        cli_fail(CMD);
    }
    grpo_run_unlock(c.lock);
    teardown(&c, &su, th);
    return err == GRPO_OK ? CLI_OK : CLI_FAIL;
}
