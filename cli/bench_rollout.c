/* `grpo bench rollout`: generated tokens/s and peak memory of the rollout engine for
 *   shared:      1 prompt x G samples (one prefill, G forks sharing the prompt's KV pages),
 *   independent: G different prompts of the same length x 1 sample (G prefills, no sharing),
 *   batch-1:     1 prompt x G samples decoded one sequence per forward.
 * Each scenario runs in its own child process so its peak RSS is its own (wait4 rusage). Every
 * sample generates exactly --new tokens (EOS ignored) so the work is equal. */
#include "cli/cli.h"
#include "grpo/rollout.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define CMD "bench rollout"

typedef struct bench_args {
    const char *model;
    int prompt_len, G, new_tokens, threads;
    const char *kv_budget;
} bench_args;

typedef struct bench_result {
    int ok;
    double secs;
    uint64_t tokens, prefilled, forwards;
    size_t peak_pages, page_bytes;
    int32_t peak_seqs;
} bench_result;

static void
usage(FILE *f)
{
    fprintf(f, "usage: grpo bench rollout --model DIR [options]\n\n"
               "Generated tokens/s and peak memory for 1 prompt x G samples (shared prefill and\n"
               "pages) against G independent prompts of the same length and against batch-1\n"
               "decoding. Prints a Markdown table.\n\n"
               "  --model DIR        model directory (default: the demo model, else the tiny one)\n"
               "  --prompt-len L     prompt tokens (default 256)\n"
               "  --group G          samples, and independent prompts (default 64)\n"
               "  --new N            tokens generated per sample (default 64)\n"
               "  --threads N        forward threads (default: all CPUs)\n"
               "  --kv-budget B      KV pool bytes (default 1G)\n"
               "  --help             this text\n");
}

/* Deterministic prompt tokens in [2, vocab) for prompt k. */
static void
fill_prompt(int32_t *p, int n, int k, int32_t vocab)
{
    for (int i = 0; i < n; i++) {
        grpo_rng_key key = {7, (uint64_t)k, 0, (uint32_t)i};
        p[i] = 2 + (int32_t)(grpo_rng_uniform(key) * (double)(vocab - 2));
    }
}

static int
run_scenario(const bench_args *a, int which, bench_result *out)
{
    uint64_t budget = 0;
    cli_parse_size(a->kv_budget, &budget);
    grpo_policy_opts po = {0};
    po.template_name = "none";
    po.n_threads = a->threads;
    po.kv_budget_bytes = (size_t)budget;
    grpo_policy *pol = NULL;
    grpo_rollout *r = NULL;
    int32_t *prompts = NULL;
    grpo_err err = grpo_policy_open(&pol, a->model, &po);
    if (err != GRPO_OK)
        return cli_fail(CMD);
    const grpo_rollout_backend *be = grpo_policy_backend(pol);
    grpo_rollout_opts ro = {0};
    ro.max_batch_seqs = which == 2 ? 1 : 0;
    ro.sample_threads = a->threads > 0 ? a->threads : grpo_cpu_count();
    int n_prompts = which == 1 ? a->G : 1;
    prompts = malloc((size_t)n_prompts * (size_t)a->prompt_len * sizeof *prompts);
    if (prompts == NULL || (err = grpo_rollout_create(&r, be, &ro)) != GRPO_OK)
        goto done;
    double t0 = grpo_now();
    for (int k = 0; k < n_prompts && err == GRPO_OK; k++) {
        int32_t *p = prompts + (size_t)k * (size_t)a->prompt_len;
        fill_prompt(p, a->prompt_len, k, be->vocab);
        grpo_rollout_request q = {0};
        q.prompt = p, q.n_prompt = a->prompt_len, q.group_size = which == 1 ? 1 : a->G;
        q.seed = 1, q.prompt_key = (uint64_t)k;
        grpo_gen_params_default(&q.params);
        q.params.max_new_tokens = a->new_tokens;
        q.params.eos_id = -1;
        err = grpo_rollout_submit(r, &q, NULL);
    }
    grpo_rollout_stats st;
    if (err != GRPO_OK || (err = grpo_rollout_run(r)) != GRPO_OK)
        goto done;
    out->secs = grpo_now() - t0;
    grpo_rollout_get_stats(r, &st);
    out->tokens = st.tokens_generated, out->prefilled = st.tokens_prefilled;
    out->forwards = st.forward_calls, out->peak_pages = st.peak_pages_used;
    out->peak_seqs = st.peak_seqs_active;
    out->page_bytes = grpo_kv_page_bytes(grpo_policy_kv(pol));
    out->ok = 1;
    grpo_rollout_group *g;
    while ((g = grpo_rollout_pop(r, 0)) != NULL)
        grpo_rollout_group_free(g);
done:
    grpo_rollout_destroy(r);
    grpo_policy_close(pol);
    free(prompts);
    return err == GRPO_OK ? CLI_OK : cli_fail(CMD);
}

/* Runs scenario `which` in a child; fills *res and the child's peak RSS in KiB. */
static int
fork_scenario(const bench_args *a, int which, bench_result *res, long *rss_kib)
{
    int fd[2];
    if (pipe(fd) != 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        close(fd[0]);
        bench_result r = {0};
        int rc = run_scenario(a, which, &r);
        ssize_t w = write(fd[1], &r, sizeof r);
        _exit(rc == 0 && w == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fd[1]);
    memset(res, 0, sizeof *res);
    ssize_t got = read(fd[0], res, sizeof *res);
    close(fd[0]);
    int status = 0;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0 || got != (ssize_t)sizeof *res || !res->ok)
        return -1;
    *rss_kib = ru.ru_maxrss;
    return 0;
}

int
grpo_bench_rollout(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return CLI_OK;
    }
    bench_args a = {NULL, 256, 64, 64, 0, "1G"};
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"prompt-len", required_argument, 0, 'l'},
                                         {"group", required_argument, 0, 'g'},
                                         {"new", required_argument, 0, 'n'},
                                         {"threads", required_argument, 0, 't'},
                                         {"kv-budget", required_argument, 0, 'k'},
                                         {0, 0, 0, 0}};
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        char *end = NULL;
        long lv = optarg ? strtol(optarg, &end, 10) : 0;
        int v = optarg && end != optarg && *end == 0 && lv > 0 && lv <= 1 << 20 ? (int)lv : 0;
        switch (c) {
        case 'm':
            a.model = optarg;
            break;
        case 'k':
            a.kv_budget = optarg;
            break;
        case 'l':
            a.prompt_len = v;
            break;
        case 'g':
            a.G = v;
            break;
        case 'n':
            a.new_tokens = v;
            break;
        case 't':
            a.threads = v;
            break;
        default:
            return cli_usage(CMD, "unknown option or missing value: %s", argv[optind - 1]);
        }
        if (c != 'm' && c != 'k' && (v <= 0 || (c == 't' && v > 1024))) {
            const char *name = "?";
            for (size_t k = 0; opts[k].name != NULL; k++)
                if (opts[k].val == c)
                    name = opts[k].name;
            return cli_usage(CMD, "--%s %s: expected an integer in [1, %d]", name, optarg,
                             c == 't' ? 1024 : 1 << 20);
        }
    }
    uint64_t tmp;
    if (cli_parse_size(a.kv_budget, &tmp) != 0 || tmp == 0)
        return cli_usage(CMD, "--kv-budget %s: expected a byte size like 512M or 2G", a.kv_budget);
    if (a.model == NULL) {
        static const char *cands[] = {"models/demo", GRPO_SOURCE_DIR "/models/demo",
                                      "tests/data/tiny_models/bf16",
                                      GRPO_SOURCE_DIR "/tests/data/tiny_models/bf16"};
        for (size_t i = 0; i < 4 && a.model == NULL; i++) {
            char p[4096];
            snprintf(p, sizeof p, "%s/config.json", cands[i]);
            if (access(p, R_OK) == 0)
                a.model = cands[i];
        }
        if (a.model == NULL)
            return cli_usage(CMD, "--model DIR is required (no bundled model found)");
    }
    static const char *names[3] = {"1 prompt x G (shared prefill + pages)",
                                   "G independent prompts x 1", "1 prompt x G, batch-1 decode"};
    printf("model %s, prompt %d tokens, G = %d, %d new tokens per sample, threads %d\n\n", a.model,
           a.prompt_len, a.G, a.new_tokens, a.threads);
    printf("| scenario | generated tok/s | wall s | prefill tokens | forwards | peak KV MiB | "
           "peak RSS MiB |\n|---|---|---|---|---|---|---|\n");
    for (int w = 0; w < 3; w++) {
        bench_result r;
        long rss = 0;
        if (fork_scenario(&a, w, &r, &rss) != 0) {
            fprintf(stderr, "grpo bench rollout: scenario \"%s\" failed\n", names[w]);
            return CLI_FAIL;
        }
        printf("| %s | %.1f | %.2f | %llu | %llu | %.1f | %.1f |\n", names[w],
               r.secs > 0 ? (double)r.tokens / r.secs : 0.0, r.secs,
               (unsigned long long)r.prefilled, (unsigned long long)r.forwards,
               (double)r.peak_pages * (double)r.page_bytes / 1048576.0, (double)rss / 1024.0);
        fflush(stdout);
    }
    return CLI_OK;
}
