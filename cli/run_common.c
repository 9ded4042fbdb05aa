/* See run_common.h. */
#include "cli/run_common.h"
#include "cli/cli.h"
#include "common/common_int.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int
cli_gen_is_opt(int c)
{
    return c >= CLI_O_GROUP && c < CLI_O_GEN_END;
}

static int
parse_float(const char *s, float lo, float hi, float *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || !(v >= lo && v <= hi))
        return -1;
    *out = (float)v;
    return 0;
}

int
cli_parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int
cli_gen_parse_opt(const char *cmd, grpo_run_gen *g, int c, const char *v)
{
    long n;
    switch (c) {
    case CLI_O_GROUP:
        if (cli_parse_long(v, 1, 1 << 16, &n) != 0)
            return cli_usage(cmd, "--group %s: expected an integer in [1, 65536]", v);
        g->G = (int)n;
        return 0;
    case CLI_O_MAXNEW:
        if (cli_parse_long(v, 1, 1 << 24, &n) != 0)
            return cli_usage(cmd, "--max-new-tokens %s: expected a positive integer", v);
        g->max_new = (int)n;
        return 0;
    case CLI_O_TEMP:
        return parse_float(v, 0.0f, 100.0f, &g->s.temperature)
                   ? cli_usage(cmd, "--temperature %s: expected a number in [0, 100]", v)
                   : 0;
    case CLI_O_TOPP:
        return parse_float(v, 1e-6f, 1.0f, &g->s.top_p)
                   ? cli_usage(cmd, "--top-p %s: expected a number in (0, 1]", v)
                   : 0;
    case CLI_O_MINP:
        return parse_float(v, 0.0f, 0.999999f, &g->s.min_p)
                   ? cli_usage(cmd, "--min-p %s: expected a number in [0, 1)", v)
                   : 0;
    case CLI_O_TOPK:
        if (cli_parse_long(v, 0, INT32_MAX, &n) != 0)
            return cli_usage(cmd, "--top-k %s: expected an integer >= 0", v);
        g->s.top_k = (int32_t)n;
        return 0;
    case CLI_O_SEED: {
        char *end;
        errno = 0;
        unsigned long long s = strtoull(v, &end, 0);
        if (end == v || *end != '\0' || !isdigit((unsigned char)v[0]))
            return cli_usage(cmd, "--seed %s: expected a non-negative integer", v);
        if (errno == ERANGE) /* strtoull clamps to 2^64-1: refuse, never run another seed */
            return cli_usage(cmd, "--seed %s: beyond 2^64-1, the largest seed", v);
        g->seed = (uint64_t)s;
        return 0;
    }
    case CLI_O_STOP:
        if (g->n_stop == GRPO_ROLLOUT_MAX_STOP || v[0] == '\0' ||
            strlen(v) > GRPO_ROLLOUT_MAX_STOP_LEN)
            return cli_usage(cmd, "--stop: at most %d non-empty strings of at most %d bytes",
                             GRPO_ROLLOUT_MAX_STOP, GRPO_ROLLOUT_MAX_STOP_LEN);
        g->stop[g->n_stop++] = v;
        return 0;
    case CLI_O_STOPID:
        if (g->n_stop_ids == GRPO_ROLLOUT_MAX_STOP || cli_parse_long(v, 0, INT32_MAX, &n) != 0)
            return cli_usage(cmd, "--stop-id %s: at most %d non-negative ids", v,
                             GRPO_ROLLOUT_MAX_STOP);
        g->stop_ids[g->n_stop_ids++] = (int32_t)n;
        return 0;
    case CLI_O_LOGPROBS:
        if ((g->logprobs = grpo_logprobs_parse(v)) < 0)
            return cli_usage(cmd, "--logprobs %s: expected raw, processed or both", v);
        g->logprobs |= GRPO_LOGPROBS_RAW;
        return 0;
    case CLI_O_SPEC:
        if (cli_parse_long(v, 0, 3, &n) != 0)
            return cli_usage(cmd, "--speculative %s: expected 0 (off) to 3 draft tokens", v);
        g->speculative = (int32_t)n;
        return 0;
    case CLI_O_BADLINE:
        if (strcmp(v, "skip") != 0 && strcmp(v, "fail") != 0)
            return cli_usage(cmd, "--on-bad-line %s: expected skip or fail", v);
        g->skip_bad = strcmp(v, "skip") == 0;
        return 0;
    default:
        return cli_usage(cmd, "unknown option");
    }
}

void
cli_gen_help_sampling(FILE *f)
{
    fputs("  --group G            samples per prompt (default 64)\n"
          "  --max-new-tokens N   generation limit per sample (default 1024)\n"
          "  --temperature T      sampling temperature; 0 = greedy (default 0.6)\n"
          "  --top-p P            nucleus mass (default 0.95; 1 = off)\n"
          "  --top-k K            keep the K most likely tokens (default 0 = off)\n"
          "  --min-p P            drop tokens below P x the top probability (default 0 = off)\n"
          "  --speculative K      draft K = 1..3 tokens per step with the model's MTP module and\n"
          "                       verify them in the same forward (CPU; the distribution is the\n"
          "                       policy's, the tokens differ from a run without; default 0 = off)\n",
          f);
}

void
cli_gen_help_stops(FILE *f)
{
    fputs("  --stop STR           stop string (repeatable, up to 16), matched across tokens\n"
          "  --stop-id ID         stop token id (repeatable, up to 16); EOS always stops\n",
          f);
}

void
cli_gen_help_logprobs(FILE *f)
{
    fputs("  --logprobs WHICH     raw (default), processed or both: raw is log p under\n"
          "                       softmax(logits/T) before top-p/top-k/min-p (what trainers\n"
          "                       recompute); processed is under the truncated distribution\n"
          "                       (with processed, batches carry it as logprobs_processed)\n",
          f);
}

/* ---- the rest ---- */

int
cli_getopt(const char *cmd, int argc, char **argv, const struct option *opts,
           int (*opt)(void *ctx, int c, const char *v), void *ctx)
{
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == '?')
            return cli_usage(cmd, "unknown option or missing value: %s", argv[optind - 1]);
        int rc = opt(ctx, c, optarg);
        if (rc != 0)
            return rc;
    }
    if (optind < argc)
        return cli_usage(cmd, "unexpected argument \"%s\"", argv[optind]);
    return 0;
}

char *
cli_join_argv(int argc, char **argv)
{
    size_t n = 8;
    for (int i = 0; i < argc; i++)
        n += strlen(argv[i]) + 1;
    char *s = calloc(1, n);
    if (s == NULL)
        return NULL;
    strcat(s, "grpo");
    for (int i = 0; i < argc; i++)
        strcat(s, " "), strcat(s, argv[i]);
    return s;
}

static int
is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

int
cli_bundled(const char *rel, char *out, size_t cap, int want_dir)
{
    const char *roots[2] = {".", GRPO_SOURCE_DIR};
    for (int i = 0; i < 2; i++) {
        snprintf(out, cap, "%s/%s%s", roots[i], rel, want_dir ? "/config.json" : "");
        if (is_file(out)) {
            snprintf(out, cap, "%s/%s", roots[i], rel);
            return 1;
        }
    }
    return 0;
}

int
cli_tools_is_opt(int c)
{
    return c >= CLI_O_TOOLS && c < CLI_O_TOOLS_END;
}

int
cli_tools_parse_opt(const char *cmd, grpo_run_tools *t, int c, const char *v)
{
    long n;
    float f;
    switch (c) {
    case CLI_O_TOOLS:
        t->list = v;
        return 0;
    case CLI_O_TOOLSINPROC:
        t->in_process = 1;
        return 0;
    case CLI_O_TOOLTIME:
        if (parse_float(v, 0.001f, 86400.0f, &f) != 0)
            return cli_usage(cmd, "--tool-time %s: expected seconds in (0, 86400]", v);
        t->time_s = f;
        return 0;
    case CLI_O_MAXCALLS:
    case CLI_O_MAXTURNS:
        if (cli_parse_long(v, 0, 1 << 20, &n) != 0)
            return cli_usage(cmd, "--%s %s: expected an integer >= 0",
                             c == CLI_O_MAXCALLS ? "max-tool-calls" : "max-turns", v);
        *(c == CLI_O_MAXCALLS ? &t->max_calls : &t->max_turns) = (int32_t)n;
        return 0;
    default:
        if (cli_parse_long(v, 1, c == CLI_O_MAXOBS ? 1 << 20 : 64, &n) != 0)
            return cli_usage(cmd, "--%s %s: expected an integer in [1, %d]",
                             c == CLI_O_MAXOBS ? "max-obs-tokens" : "tool-threads", v,
                             c == CLI_O_MAXOBS ? 1 << 20 : 64);
        *(c == CLI_O_MAXOBS ? &t->max_obs_tokens : &t->threads) = (int32_t)n;
        return 0;
    }
}

void
cli_tools_help(FILE *f)
{
    fputs("  --tools LIST         tools and environments the model may call, comma-separated:\n"
          "                       python (a sandboxed Python REPL per sample, called with a\n"
          "                       ```python fenced block or DeepSeek-V3's tool-call tokens)\n"
          "                       and environment plugins (PATH.so); a call parks the sample,\n"
          "                       the observation is fed back as tokens with loss mask 0\n"
          "                       (docs/tools.md)\n"
          "  --max-tool-calls N   calls per sample (default 8); later ones are not run\n"
          "  --max-turns N        model turns per sample (default 0: no limit)\n"
          "  --max-obs-tokens N   observation tokens per call (default 512; more are cut)\n"
          "  --tool-time S        tool seconds per sample (default 60)\n"
          "  --tool-threads N     threads running tool calls (default 4)\n"
          "  --tools-in-process   call environment plugins in this process (trusted only)\n",
          f);
}
