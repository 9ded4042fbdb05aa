/* `grpo rollout`: the flags, the help and what is printed; the run itself is run/ (grpo/run.h:
 * grpo_run_open, grpo_run_execute): G completions per prompt from the rollout engine, scored by
 * the verifiers as groups complete (overlapping generation), group-relative advantages, the
 * store, optional JSONL and batches to a trainer over the bridge. */
#include "cli/cli.h"
#include "cli/run_common.h"
#include "common/common_int.h"
#include "grpo/bridge.h"
#include "grpo/rollout.h"
#include "grpo/tokenizer.h"
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
    grpo_run_opts o; /* the flags, as the run's options */
    char model_buf[PATH_MAX], prompts_buf[PATH_MAX];
    int det; /* --deterministic: -1 not given, 0 off, 1 on */
} args;

/* The options of how the model runs (threads, numerics, KV dtype, GPU, budget). */
static void
usage_model(FILE *f)
{
    fputs("  --threads N          forward threads (default: all CPUs)\n"
          "  --numerics N         exact (default: fp32, matches transformers), q8 (CPU: FP8\n"
          "                       weights and the lm_head in int8 per 32 columns, int16\n"
          "                       activations, integer dot products; faster) or fp8\n"
          "                       (DeepSeek-V3's FP8 inference: E4M3 activations per 128\n"
          "                       columns at FP8 weights, BF16 at BF16 weights; with --gpu\n"
          "                       the tensor cores, on the CPU their twin, not faster);\n"
          "                       not exact; recorded, so replay and --resume use it too\n",
          f);
    fputs(CLI_HELP_DETERMINISTIC, f);
    fputs("  --kv-dtype D         KV cache rows in f32 (default: exact), bf16 or fp8 (E4M3 +\n"
          "                       fp32 scale per 128 latent values, rope key bf16; also\n"
          "                       with --gpu):\n"
          "                       smaller rows, more groups in the same --kv-budget, not\n"
          "                       exact; recorded, so replay and --resume use it too\n"
          "  --gpu N              run the model on GPU N (CUDA build; CUDA_VISIBLE_DEVICES=N):\n"
          "                       weights, activations and KV pages in device memory, the\n"
          "                       draws made there too; exact fp32 GEMMs and attention by\n"
          "                       default; --numerics fp8 --kv-dtype bf16 is the fast one\n"
          "                       (tensor-core GEMMs and attention; docs/cuda.md)\n"
          "  --verify-threads N   verifier threads (default 2)\n"
          "  --kv-budget B        KV cache budget: bytes (4096, 512M, 2G) or tokens (65536t);\n"
          "                       groups are admitted while their worst case fits (default 1G)\n",
          f);
}

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
    fputs("  --template NAME      chat template: r1 (default), v3, qwen2.5, qwen3, qwen3-nothink,\n"
          "                       llama3, llama3.1, r1-distill, none, or auto (the template of\n"
          "                       the tokenizer_config.json; refused when grpo does not know it)\n"
          "  --tokenizer PATH     tokenizer.json (default: the model directory's)\n"
          "  --db FILE            SQLite store (default grpo.db)\n"
          "  --out FILE.jsonl     also write one JSON line per completion; a skipped one\n"
          "                       (a verifier could not judge it) has \"skipped\": true and no\n"
          "                       advantage. With --resume the file is first made to hold one\n"
          "                       whole line per completion the store records (torn, repeated\n"
          "                       and cut-short lines dropped, lost ones rebuilt), then appended\n"
          "  --resume             continue the newest unfinished run (interrupted or failed)\n"
          "                       whose options are these: groups it recorded are kept, groups\n"
          "                       an interrupt cut short are sampled again, and the rest are\n"
          "                       sampled as the whole run would have; refused when its weights\n"
          "                       differ or another process is writing it. A finished run is\n"
          "                       left as it is; with none, a new run starts. Not with --publish\n"
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
          "                       buffer: N x vocab floats)\n",
          f);
    usage_model(f);
    cli_gen_help_logprobs(f);
    fputs("  --ref-model DIR      reference model: per-token ref logprobs and KL summaries\n"
          "  --rescore            recompute policy logprobs by teacher forcing and report the\n"
          "                       largest sampling/scoring mismatch\n"
          "  --record-routes      keep the MoE experts the router chose for every prompt and\n"
          "                       completion token (docs/routes.md)\n"
          "  --reward-config FILE reward composition (default: math = math + 0.2 format, ...)\n",
          f);
    cli_tools_help(f);
    fputs("  --on-bad-line MODE   fail (default) or skip a bad prompts line\n"
          "  --help               this text\n\n"
          "exit codes: 0 success, 1 runtime failure, 2 usage error\n",
          f);
}

static int
resolve_defaults(args *x)
{
    grpo_run_opts *a = &x->o;
    if (a->model != NULL || a->prompts != NULL) {
        if (a->model == NULL || a->prompts == NULL)
            return cli_usage(CMD, "give both --model and --prompts, or neither for the demo");
        return 0;
    }
    if (cli_bundled("models/demo", x->model_buf, sizeof x->model_buf, 1) &&
        cli_bundled("data/demo_prompts.jsonl", x->prompts_buf, sizeof x->prompts_buf, 0)) {
    } else if (cli_bundled("tests/data/tiny_models/bf16", x->model_buf, sizeof x->model_buf, 1) &&
               cli_bundled("data/tiny_prompts.jsonl", x->prompts_buf, sizeof x->prompts_buf, 0)) {
    } else {
        return cli_usage(CMD, "no bundled demo model found; give --model and --prompts");
    }
    a->model = x->model_buf, a->prompts = x->prompts_buf;
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
    O_RESUME,
    O_NUMERICS,
    O_KVDT,
    O_ROUTES,
    O_DET
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
    {"numerics", required_argument, 0, O_NUMERICS},
    {"kv-dtype", required_argument, 0, O_KVDT},
    {"record-routes", no_argument, 0, O_ROUTES},
    {"deterministic", required_argument, 0, O_DET},
    CLI_GEN_LONG_OPTS,
    CLI_TOOLS_LONG_OPTS,
    {0, 0, 0, 0},
};

/* The options whose values are checked (numbers, names), and the generation flags. */
static int
parse_checked_opt(grpo_run_opts *a, int c, const char *v)
{
    long n;
    switch (c) {
    case O_TEMPLATE:
        if (strcmp(v, "auto") != 0 && grpo_chat_family_parse(v) < 0)
            return cli_usage(CMD,
                             "--template %s: expected auto, r1, v3, qwen2.5, qwen3, "
                             "qwen3-nothink, llama3, llama3.1, r1-distill or none",
                             v);
        a->template_name = v;
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
    case O_NUMERICS:
        return cli_numerics_opt(CMD, v, &a->numerics);
    case O_KVDT:
        return cli_kv_dtype_opt(CMD, v, &a->kv_dtype);
    default:
        if (cli_tools_is_opt(c))
            return cli_tools_parse_opt(CMD, &a->tools, c, v);
        return cli_gen_is_opt(c) ? cli_gen_parse_opt(CMD, &a->gen, c, v)
                                 : cli_usage(CMD, "unknown option");
    }
}

static int
parse_opt(void *ctx, int c, const char *v)
{
    grpo_run_opts *a = &((args *)ctx)->o;
    switch (c) {
    case O_DET:
        return cli_deterministic_opt(CMD, v, &((args *)ctx)->det);
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
    case O_ROUTES:
        a->record_routes = 1;
        return 0;
    case O_REWARD:
        a->reward_config = v;
        return 0;
    case O_TOKENIZER:
        a->tokenizer = v;
        return 0;
    default:
        return parse_checked_opt(a, c, v);
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
parse_args(args *x, int argc, char **argv)
{
    memset(x, 0, sizeof *x);
    x->det = -1;
    grpo_run_opts *a = &x->o;
    grpo_run_opts_default(a);
    int rc = cli_getopt(CMD, argc, argv, long_opts, parse_opt, x);
    if (rc != 0 || (rc = cli_deterministic_apply(CMD, x->det, &a->numerics)) != 0 ||
        (rc = cli_select_gpu(CMD, a->gpu, a->threads)) != 0)
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
    return resolve_defaults(x);
}

/* ---- what the run says ---- */

static void
progress(void *ctx, const grpo_run_stats *st, int final)
{
    static double last;
    double now = grpo_now();
    (void)ctx;
    if (!isatty(2) || (!final && now - last < 0.5))
        return;
    last = now;
    double el = st->seconds, rate = el > 0 ? (double)st->engine.tokens_generated / el : 0;
    size_t done = (size_t)st->engine.groups_done, total = st->submitted;
    double eta = done ? el / (double)done * (double)(total - done) : 0;
    char eta_s[32] = "--:--"; /* unknown until a group has finished */
    if (done)
        snprintf(eta_s, sizeof eta_s, "%02d:%02d", (int)eta / 60, (int)eta % 60);
    fprintf(stderr, "\rgroups %zu/%zu  in flight %d  %.0f tok/s  ETA %s   %s", done, total,
            st->engine.groups_in_flight, rate, eta_s, final ? "\n" : "");
    fflush(stderr);
}

/* What opening found: a resumed, finished or new run, and what --out needed. */
static void
opened(const grpo_run_opts *o, const grpo_run_stats *st)
{
    if (st->resumed)
        fprintf(stderr,
                "grpo rollout: resuming run %lld from %s (%lld groups cut short by the "
                "interrupt are sampled again)\n",
                (long long)st->run_id, o->db, (long long)st->dropped);
    else if (st->finished)
        fprintf(stderr,
                "grpo rollout: --resume: run %lld in %s with these options finished; "
                "nothing to sample\n",
                (long long)st->run_id, o->db);
    else if (o->resume)
        fprintf(stderr,
                "grpo rollout: --resume: no unfinished run with these options in %s; "
                "starting a new one\n",
                o->db);
    if (st->out_rebuilt || st->out_dropped)
        fprintf(stderr,
                "grpo rollout: %s: %zu lines rebuilt from the store, %zu torn, repeated or "
                "superseded lines dropped\n",
                o->out, st->out_rebuilt, st->out_dropped);
}

static void
summary(const grpo_run_stats *st)
{
    double secs = st->seconds;
    if (st->resumed)
        fprintf(stderr, "grpo rollout: %zu groups already recorded, %zu to sample\n", st->already,
                st->submitted);
    printf("run %lld: %zu groups, %zu completions, %llu tokens in %.1f s (%.0f tok/s)\n",
           (long long)st->run_id, st->groups_done, st->completions, (unsigned long long)st->tokens,
           secs, secs > 0 ? (double)st->tokens / secs : 0.0);
    printf("reward mean %.4f, zero-std groups %.1f%%, peak groups in flight %d, peak KV pages %zu"
           " of %zu\n",
           st->reward_mean,
           st->groups_done ? 100.0 * (double)st->zero_std_groups / (double)st->groups_done : 0.0,
           st->engine.peak_groups_in_flight, st->engine.peak_pages_used, st->engine.budget_pages);
    if (st->skipped)
        printf("%zu completions skipped by the verifiers (no advantage, not in the mean)\n",
               st->skipped);
    const grpo_rollout_stats *e = &st->engine;
    if (e->spec_verify_rows > 0)
        printf("speculative: %llu of %llu drafts accepted (%.1f%%), %.2f tokens per verify step\n",
               (unsigned long long)e->spec_accepted, (unsigned long long)e->spec_drafted,
               e->spec_drafted ? 100.0 * (double)e->spec_accepted / (double)e->spec_drafted : 0.0,
               (double)e->spec_emitted / (double)e->spec_verify_rows);
    if (e->turns > 0)
        printf("tools: %llu observations fed (%llu tokens, loss mask 0); the engine waited for "
               "tools in %llu of %llu steps (%.2f s)\n",
               (unsigned long long)e->turns, (unsigned long long)e->obs_tokens,
               (unsigned long long)e->wait_steps,
               (unsigned long long)(e->forward_calls + e->wait_steps), e->wait_s);
}

static grpo_run *volatile the_run;
static volatile sig_atomic_t interrupted;

static void
on_signal(int sig)
{
    (void)sig;
    if (interrupted)
        _exit(130); /* a second signal: stop now (the store stays consistent: WAL) */
    interrupted = 1;
    grpo_run_cancel(the_run);
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
    char *cmdline = cli_join_argv(argc, argv);
    a.o.command_line = cmdline;
    grpo_run *r = NULL;
    grpo_run_stats st;
    grpo_err err = grpo_run_open(&r, &a.o);
    if (err == GRPO_OK) {
        grpo_run_get_stats(r, &st);
        opened(&a.o, &st);
        the_run = r;
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        err = grpo_run_execute(r, progress, NULL);
        grpo_run_get_stats(r, &st);
        if (err == GRPO_OK && !st.finished)
            summary(&st);
    }
    if (err != GRPO_OK)
        cli_fail(CMD);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    the_run = NULL;
    grpo_err cerr = grpo_run_close(r);
    if (err == GRPO_OK && cerr != GRPO_OK) {
        err = cerr;
        cli_fail(CMD);
    }
    free(cmdline);
    return err == GRPO_OK ? CLI_OK : CLI_FAIL;
}
