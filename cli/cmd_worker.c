/* `grpo worker`: the flags, the help and what is printed for a rollout worker, which is run/
 * (grpo/run.h: grpo_worker_open, grpo_worker_run): it pulls prompt groups from a coordinator
 * (`grpo serve`), generates, scores and returns them, and follows policy-version changes. */
#include "cli/cli.h"
#include "cli/run_common.h"
#include "common/common_int.h"
#include "grpo/rollout.h"
#include "grpo/run.h"
#include "grpo/verify.h"
#include "grpo/workers.h"

#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CMD "worker"

typedef struct args {
    const char *connect, *model, *tokenizer, *template_name, *reward_config, *id_arg, *kv_budget;
    int threads, gpu, inflight, step_delay_ms;
    double give_up_s;
    uint64_t kv_bytes;
    grpo_run_tools tools; /* only threads and in_process: the coordinator names the tools */
    char id[GRPO_WORKERS_MAX_ID + 1];
} args;

static void
usage(FILE *f)
{
    fprintf(
        f, "usage: grpo worker --connect URL [--model DIR] [--threads N | --gpu N] [options]\n\n"
           "A rollout worker: pulls prompt groups from a coordinator (grpo serve), generates\n"
           "and verifies them, and returns them. Workers may join and leave at any time; a\n"
           "group is the same whichever worker generates it.\n\n"
           "  --connect URL        the coordinator (tcp://host:port or ipc:///path; default\n"
           "                       $GRPO_COORDINATOR_URL)\n"
           "  --model DIR          model directory (default $GRPO_MODEL, else the bundled demo\n"
           "                       model, else the tiny test model)\n"
           "  --threads N          forward threads (default: all CPUs)\n"
           "  --gpu N              run the model on GPU N (sets CUDA_VISIBLE_DEVICES=N): weights,\n"
           "                       activations and KV pages in device memory, exact fp32 GEMMs\n"
           "                       (docs/cuda.md); a CPU-only build refuses it\n"
           "  --id NAME            worker id in the store and stats (default $GRPO_WORKER_ID,\n"
           "                       else HOST-$SLURM_PROCID under Slurm, else HOST-PID)\n"
           "  --inflight N         groups generated at once (default 2; at most 64)\n"
           "  --kv-budget B        KV cache bytes (default 1G)\n"
           "  --tokenizer PATH     tokenizer.json (default: the model directory's)\n"
           "  --template NAME      chat template when the coordinator names none (default r1)\n"
           "  --reward-config FILE reward composition (default as grpo rollout)\n"
           "  --give-up S          exit when the coordinator has not answered for S seconds\n"
           "                       (default 0 = keep trying)\n"
           "  --step-delay MS      sleep MS after every scheduler step: a slow device, for\n"
           "                       fault-injection tests (default 0)\n"
           "  --tool-threads N     threads running tool calls when the coordinator's run has\n"
           "                       --tools (default 4); the environments it names (python,\n"
           "                       plugin paths) are loaded here and must exist on this machine\n"
           "  --tools-in-process   call environment plugins in this process (trusted only)\n"
           "  --help               this text\n\n"
           "exit codes: 0 success (the coordinator said stop), 1 runtime failure, 2 usage error\n");
}

/* The bundled demo model, else the tiny test model (as grpo rollout finds them). */
static const char *
default_model(void)
{
    static char buf[PATH_MAX];
    if (cli_bundled("models/demo", buf, sizeof buf, 1) ||
        cli_bundled("tests/data/tiny_models/bf16", buf, sizeof buf, 1))
        return buf;
    return NULL;
}

enum {
    O_CONNECT = 256,
    O_MODEL,
    O_THREADS,
    O_GPU,
    O_ID,
    O_INFLIGHT,
    O_KV,
    O_TOK,
    O_TEMPLATE,
    O_REWARD,
    O_GIVEUP,
    O_DELAY
};

static const struct option long_opts[] = {
    {"connect", required_argument, 0, O_CONNECT},
    {"model", required_argument, 0, O_MODEL},
    {"threads", required_argument, 0, O_THREADS},
    {"gpu", required_argument, 0, O_GPU},
    {"id", required_argument, 0, O_ID},
    {"inflight", required_argument, 0, O_INFLIGHT},
    {"kv-budget", required_argument, 0, O_KV},
    {"tokenizer", required_argument, 0, O_TOK},
    {"template", required_argument, 0, O_TEMPLATE},
    {"reward-config", required_argument, 0, O_REWARD},
    {"give-up", required_argument, 0, O_GIVEUP},
    {"step-delay", required_argument, 0, O_DELAY},
    {"tool-threads", required_argument, 0, CLI_O_TOOLTHREADS},
    {"tools-in-process", no_argument, 0, CLI_O_TOOLSINPROC},
    {0, 0, 0, 0},
};

static int
int_arg(const char *v, long lo, long hi, int *out)
{
    long n;
    if (cli_parse_long(v, lo, hi, &n) != 0)
        return -1;
    *out = (int)n;
    return 0;
}

static int
parse_opt(void *ctx, int c, const char *v)
{
    args *a = ctx;
    char *end;
    switch (c) {
    case O_CONNECT:
        a->connect = v;
        return 0;
    case O_MODEL:
        a->model = v;
        return 0;
    case O_ID:
        if (v[0] == '\0' || strlen(v) > GRPO_WORKERS_MAX_ID || !grpo__utf8_valid(v, strlen(v)))
            return cli_usage(CMD, "--id: 1 to %d bytes of UTF-8", GRPO_WORKERS_MAX_ID);
        a->id_arg = v;
        return 0;
    case O_TOK:
        a->tokenizer = v;
        return 0;
    case O_TEMPLATE:
        a->template_name = v;
        return 0;
    case O_REWARD:
        a->reward_config = v;
        return 0;
    case O_KV:
        a->kv_budget = v;
        return 0;
    case O_THREADS:
        return int_arg(v, 1, 1024, &a->threads) ? cli_usage(CMD, "--threads %s: 1..1024", v) : 0;
    case O_GPU:
        return int_arg(v, 0, 1023, &a->gpu) ? cli_usage(CMD, "--gpu %s: a device index", v) : 0;
    case O_INFLIGHT:
        return int_arg(v, 1, GRPO_WORKERS_MAX_LEASES, &a->inflight)
                   ? cli_usage(CMD, "--inflight %s: 1..64", v)
                   : 0;
    case O_DELAY:
        return int_arg(v, 0, 60000, &a->step_delay_ms)
                   ? cli_usage(CMD, "--step-delay %s: 0..60000", v)
                   : 0;
    case O_GIVEUP:
        a->give_up_s = strtod(v, &end);
        if (end == v || *end != '\0' || !(a->give_up_s >= 0))
            return cli_usage(CMD, "--give-up %s: expected seconds", v);
        return 0;
    case CLI_O_TOOLTHREADS:
    case CLI_O_TOOLSINPROC:
        return cli_tools_parse_opt(CMD, &a->tools, c, v);
    default:
        return cli_usage(CMD, "unknown option");
    }
}

static int
parse_args(args *a, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    a->gpu = -1, a->inflight = 2, a->kv_budget = "1G";
    grpo_run_tools_default(&a->tools);
    int rc = cli_getopt(CMD, argc, argv, long_opts, parse_opt, a);
    if (rc != 0)
        return rc;
    if (a->connect == NULL && (a->connect = getenv("GRPO_COORDINATOR_URL")) == NULL)
        return cli_usage(CMD, "--connect URL (or GRPO_COORDINATOR_URL) is required");
    if ((rc = cli_select_gpu(CMD, a->gpu, a->threads)) != 0)
        return rc;
    if (cli_parse_size(a->kv_budget, &a->kv_bytes) != 0 || a->kv_bytes == 0)
        return cli_usage(CMD, "--kv-budget %s: expected bytes (512M, 2G)", a->kv_budget);
    if (a->model == NULL && (a->model = getenv("GRPO_MODEL")) == NULL &&
        (a->model = default_model()) == NULL)
        return cli_usage(CMD, "give --model DIR (no bundled model found)");
    char host[128] = "worker";
    gethostname(host, sizeof host - 1);
    const char *env = getenv("GRPO_WORKER_ID"), *rank = getenv("SLURM_PROCID");
    if (a->id_arg)
        snprintf(a->id, sizeof a->id, "%s", a->id_arg);
    else if (env && env[0] && strlen(env) <= GRPO_WORKERS_MAX_ID &&
             grpo__utf8_valid(env, strlen(env)))
        snprintf(a->id, sizeof a->id, "%s", env);
    else if (rank && rank[0])
        snprintf(a->id, sizeof a->id, "%.120s-%.16s", host, rank);
    else
        snprintf(a->id, sizeof a->id, "%.120s-%ld", host, (long)getpid());
    return 0;
}

static grpo_worker *volatile the_worker;

static void
on_signal(int sig)
{
    (void)sig;
    grpo_worker_cancel(the_worker);
}

int
grpo_cmd_worker(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return CLI_OK;
    }
    args a;
    int rc = parse_args(&a, argc, argv);
    if (rc != 0)
        return rc;
    grpo_worker_opts o;
    grpo_worker_opts_default(&o);
    o.connect = a.connect, o.model = a.model, o.id = a.id, o.tokenizer = a.tokenizer;
    o.template_name = a.template_name, o.reward_config = a.reward_config;
    o.kv_bytes = a.kv_bytes, o.threads = a.threads, o.gpu = a.gpu, o.inflight = a.inflight;
    o.step_delay_ms = a.step_delay_ms, o.give_up_s = a.give_up_s;
    o.tool_threads = a.tools.threads, o.tools_in_process = a.tools.in_process;
    grpo_worker *w = NULL;
    grpo_err err = grpo_worker_open(&w, &o);
    if (err == GRPO_OK) {
        fprintf(stderr, "grpo worker %s: model %s, coordinator %s\n", a.id, a.model, a.connect);
        the_worker = w;
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        signal(SIGPIPE, SIG_IGN);
        err = grpo_worker_run(w);
    }
    char msg[600] = "";
    if (err != GRPO_OK) {
        snprintf(msg, sizeof msg, "%s", grpo_error_last());
    } else {
        grpo_worker_stats st;
        grpo_worker_get_stats(w, &st);
        fprintf(stderr, "grpo worker %s: %llu groups, %llu tokens in %.1f s\n", a.id,
                (unsigned long long)st.groups_done, (unsigned long long)st.tokens, st.seconds);
    }
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    the_worker = NULL;
    grpo_worker_close(w);
    if (err != GRPO_OK)
        fprintf(stderr, "grpo worker %s: %s\n", a.id, msg);
    return err == GRPO_OK ? CLI_OK : CLI_FAIL;
}
