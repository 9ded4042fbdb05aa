/* `grpo bench store`: how fast the store takes completion + reward rows (batched by the writer
 * thread, and one group per transaction), and how long `grpo stats` takes on the database that
 * results (1M completions by default). Prints a table; never decides pass/fail. */
#include "cli/cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char usage_text[] =
    "usage: grpo bench store [--db FILE] [--completions N] [--G G] [--tokens T] [--rewards R]\n"
    "                        [--keep]\n"
    "\n"
    "Writes N completions (N/G groups of G, each completion with T token ids and logprobs, a\n"
    "short text, R rewards and an advantage) three ways: put_group with one transaction per\n"
    "group (a short while), put_groups with 256 groups per transaction (half the rest), and\n"
    "put_group into the batching writer thread (the other half); reports rows/s where a row is\n"
    "a completion or a reward, by wall clock and by CPU time. Then times the stats queries (what\n"
    "`grpo stats` runs: open read-only + query) on the resulting database for each --by.\n"
    "\n"
    "options:\n"
    "  --db FILE          database to write (default: a temporary file, removed afterwards)\n"
    "  --completions N    completions to write (default 1000000)\n"
    "  --G G              completions per group (default 8)\n"
    "  --tokens T         tokens per completion (default 64)\n"
    "  --rewards R        rewards per completion (default 1)\n"
    "  --keep             keep the database file\n"
    "  -h, --help         this help\n";

typedef struct {
    int32_t G, tokens, rewards;
    grpo_completion_rec *c;
    grpo_reward_rec *r;
    int32_t *ids;
    float *lps;
} tmpl;

static int
tmpl_make(tmpl *t)
{
    t->c = calloc((size_t)t->G, sizeof *t->c);
    t->r = calloc((size_t)t->G * (size_t)t->rewards + 1, sizeof *t->r);
    t->ids = calloc((size_t)t->tokens + 1, sizeof *t->ids);
    t->lps = calloc((size_t)t->tokens + 1, sizeof *t->lps);
    if (!t->c || !t->r || !t->ids || !t->lps)
        return -1;
    for (int32_t k = 0; k < t->tokens; k++)
        t->ids[k] = (k * 7919) % 129280, t->lps[k] = -0.01f * (float)(k % 100);
    for (int32_t i = 0; i < t->G; i++) {
        grpo_completion_rec *c = &t->c[i];
        c->sample_index = i;
        c->n_tokens = t->tokens - (i % 4) * (t->tokens / 8);
        c->token_ids = t->ids;
        c->token_logprobs = t->lps;
        c->text = "The answer is \\boxed{42}. Checking: 6 * 7 = 42, so the result holds.";
        c->finish_reason = i % 5 == 0 ? GRPO_FINISH_LENGTH : GRPO_FINISH_EOS;
        c->logprob_sum = -12.5;
        c->first_token_ms = 8, c->gen_ms = 900;
        c->correct = -1;
        c->n_rewards = t->rewards;
        c->rewards = t->r + (size_t)i * t->rewards;
        for (int32_t j = 0; j < t->rewards; j++) {
            grpo_reward_rec *w = &t->r[(size_t)i * t->rewards + j];
            w->verifier = j == 0 ? "math" : "format";
            w->version = "1.0.0";
            w->kind = (i + j) % 3 == 0 ? 0 : 1;
            w->label = w->kind == 0 ? "correct" : "wrong";
            w->score = w->kind == 0 ? 1.0 : 0.0;
            w->ms = 0.1 * (double)((i * 37 + j) % 50);
        }
        c->has_advantage = 1;
        c->advantage = (i % 3 == 0) ? 1.2 : -0.6;
        c->kl_mean = 0.01, c->kl_max = 0.2, c->ref_logprob_sum = -13;
    }
    return 0;
}

static void
tmpl_free(tmpl *t)
{
    free(t->c), free(t->r), free(t->ids), free(t->lps);
}

static double
cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Writes groups [first, first + n), `batch` per put_groups call (1: put_group), and returns the
 * seconds it took, or -1; *cpu receives the process CPU seconds spent meanwhile (all threads). */
static double
write_groups(grpo_store *s, const tmpl *t, int64_t run, int64_t prompt0, int64_t first, int64_t n,
             int32_t batch, double *cpu)
{
    grpo_group_rec *gs = calloc((size_t)batch, sizeof *gs);
    if (gs == NULL)
        return -1;
    double t0 = grpo_now(), c0 = cpu_now();
    for (int64_t i = first; i < first + n;) {
        int32_t k = 0;
        for (; k < batch && i < first + n; k++, i++) {
            grpo_group_rec *g = &gs[k];
            g->run_id = run;
            g->sampling_json = "{\"temperature\":1.0,\"top_p\":1.0,\"max_tokens\":1024}";
            g->max_tokens = t->tokens;
            g->n_completions = t->G;
            g->completions = t->c;
            g->step = i / 256; /* 256 groups per step */
            g->prompt_id = prompt0 + i % 1000;
            g->seed = (uint64_t)i;
            g->started_at = 1.7e9 + (double)i * 0.01;
            g->finished_at = g->started_at + 2;
        }
        if ((batch == 1 ? grpo_store_put_group(s, gs) : grpo_store_put_groups(s, gs, k)) !=
            GRPO_OK) {
            free(gs);
            return -1;
        }
    }
    free(gs);
    if (grpo_store_flush(s) != GRPO_OK)
        return -1;
    *cpu = cpu_now() - c0;
    return grpo_now() - t0;
}

static int
parse_pos(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v <= 0)
        return -1;
    *out = v;
    return 0;
}

static int
time_stats(const char *path, grpo_stats_by by, double *secs, int32_t *rows)
{
    grpo_store *s = NULL;
    grpo_stats_table *t = NULL;
    grpo_store_opts ro = {0};
    grpo_stats_opts o = {0};
    ro.read_only = 1;
    o.by = by;
    double t0 = grpo_now();
    if (grpo_store_open(&s, path, &ro) != GRPO_OK || grpo_store_stats(&t, s, &o) != GRPO_OK) {
        grpo_store_close(s);
        return -1;
    }
    *secs = grpo_now() - t0;
    *rows = t->n_rows;
    grpo_stats_table_free(t);
    grpo_store_close(s);
    return 0;
}

static int
bench(const char *path, int64_t n_compl, tmpl *t)
{
    grpo_store *s = NULL;
    grpo_store_opts o = {0};
    int64_t run = 0, prompt0 = 0, p;
    if (grpo_store_open(&s, path, &o) != GRPO_OK || grpo_store_run_begin(&run, s, NULL) != GRPO_OK)
        goto fail;
    for (int i = 0; i < 1000; i++) {
        char text[64];
        snprintf(text, sizeof text, "bench prompt %d", i);
        grpo_prompt_rec pr = {"bench", i, text, NULL, "\"42\"", NULL};
        if (grpo_store_put_prompt(&p, s, &pr) != GRPO_OK)
            goto fail;
        if (i == 0)
            prompt0 = p;
    }
    int64_t n_groups = n_compl / t->G, n_one = n_groups < 5000 ? n_groups / 10 : 500;
    int64_t n_batched = (n_groups - n_one) / 2, n_async = n_groups - n_one - n_batched;
    double rows_per_group = (double)t->G * (1 + t->rewards);
    double secs[3], cpu[3] = {0, 0, 0};
    secs[0] = write_groups(s, t, run, prompt0, 0, n_one, 1, &cpu[0]);
    secs[1] = write_groups(s, t, run, prompt0, n_one, n_batched, 256, &cpu[1]);
    if (secs[0] < 0 || secs[1] < 0 || grpo_store_close(s) != GRPO_OK)
        goto fail;
    s = NULL;
    o.async = 1;
    if (grpo_store_open(&s, path, &o) != GRPO_OK)
        goto fail;
    secs[2] = write_groups(s, t, run, prompt0, n_one + n_batched, n_async, 1, &cpu[2]);
    if (secs[2] < 0 || grpo_store_close(s) != GRPO_OK)
        goto fail;
    s = NULL;
    struct stat sb;
    double mb = stat(path, &sb) == 0 ? (double)sb.st_size / 1048576.0 : 0;

    printf("grpo bench store: %lld completions in %lld groups of %d, %d tokens, %d reward(s) "
           "each; db %.0f MiB\n\n",
           (long long)(n_groups * t->G), (long long)n_groups, (int)t->G, (int)t->tokens,
           (int)t->rewards, mb);
    printf("%-40s %8s %8s %9s %8s %11s\n", "insert path", "groups", "seconds", "rows/s", "cpu s",
           "rows/cpu-s");
    static const char *const paths[] = {"put_group, one transaction each",
                                        "put_groups, 256 groups per transaction",
                                        "put_group into the writer thread"};
    int64_t counts[3] = {n_one, n_batched, n_async};
    for (int i = 0; i < 3; i++)
        printf("%-40s %8lld %8.3f %9.0f %8.3f %11.0f\n", paths[i], (long long)counts[i], secs[i],
               secs[i] > 0 ? (double)counts[i] * rows_per_group / secs[i] : 0, cpu[i],
               cpu[i] > 0 ? (double)counts[i] * rows_per_group / cpu[i] : 0);
    printf("(a row is a completion or a reward; each completion also carries its advantage, token\n"
           " ids, logprobs and text. cpu s: CPU time of all the process's threads, which the\n"
           " machine's load does not inflate)\n\n");
    printf("%-40s %8s %8s %9s\n", "grpo stats on the result (open + query)", "rows", "seconds",
           "cpu s");
    static const char *const names[] = {"--by step",        "--by verifier",    "--by prompt",
                                        "--by worker",      "--by run",         "--by finish",
                                        "--by reward-hist", "--by length-hist", "--by time",
                                        "--by kl",          "--by example"};
    for (int by = 0; by < (int)(sizeof names / sizeof names[0]); by++) {
        double sec, c0 = cpu_now();
        int32_t rows;
        if (time_stats(path, (grpo_stats_by)by, &sec, &rows) != 0)
            goto fail;
        printf("%-40s %8d %8.3f %9.3f\n", names[by], (int)rows, sec, cpu_now() - c0);
    }
    return CLI_OK;
fail:
    grpo_store_close(s);
    return cli_fail("bench store");
}

int
grpo_bench_store(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"db", required_argument, NULL, 'd'},      {"completions", required_argument, NULL, 'n'},
        {"G", required_argument, NULL, 'g'},       {"tokens", required_argument, NULL, 't'},
        {"rewards", required_argument, NULL, 'r'}, {"keep", no_argument, NULL, 'k'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0}};
    const char *db = NULL;
    int64_t n = 1000000, G = 8, tokens = 64, rewards = 1;
    int keep = 0, c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            fputs(usage_text, stdout);
            return CLI_OK;
        case 'd':
            db = optarg;
            break;
        case 'n':
            if (parse_pos(optarg, &n))
                return cli_usage("bench store", "--completions: \"%s\" is not positive", optarg);
            break;
        case 'g':
            if (parse_pos(optarg, &G) || G > 4096)
                return cli_usage("bench store", "--G: \"%s\" is not in 1..4096", optarg);
            break;
        case 't':
            if (parse_pos(optarg, &tokens) || tokens > 1 << 20)
                return cli_usage("bench store", "--tokens: \"%s\" is not in 1..1048576", optarg);
            break;
        case 'r':
            if (parse_pos(optarg, &rewards) || rewards > 16)
                return cli_usage("bench store", "--rewards: \"%s\" is not in 1..16", optarg);
            break;
        case 'k':
            keep = 1;
            break;
        default:
            return cli_usage("bench store", "unknown or incomplete option \"%s\"",
                             argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_usage("bench store", "unexpected argument \"%s\"", argv[optind]);
    if (n < G * 10)
        return cli_usage("bench store", "--completions must be at least 10 groups");
    char tmp[64] = "/tmp/grpo_bench_store_XXXXXX";
    char path[128];
    if (db == NULL) {
        if (mkdtemp(tmp) == NULL) {
            fprintf(stderr, "grpo bench store: mkdtemp: %s\n", strerror(errno));
            return CLI_FAIL;
        }
        snprintf(path, sizeof path, "%s/bench.db", tmp);
        db = path;
    } else if (access(db, F_OK) == 0) {
        return cli_usage("bench store", "--db %s exists; give a new file", db);
    }
    tmpl t = {(int32_t)G, (int32_t)tokens, (int32_t)rewards, NULL, NULL, NULL, NULL};
    int rc = tmpl_make(&t) == 0 ? bench(db, n, &t) : (fprintf(stderr, "out of memory\n"), 1);
    tmpl_free(&t);
    if (!keep) {
        char side[160];
        unlink(db);
        snprintf(side, sizeof side, "%s-wal", db), unlink(side);
        snprintf(side, sizeof side, "%s-shm", db), unlink(side);
        if (db == path)
            rmdir(tmp);
    } else {
        fprintf(stderr, "grpo bench store: kept %s\n", db);
    }
    return rc;
}
