/* `grpo bench rollout`: generated tokens/s and peak memory of the rollout engine for
 *   shared:      1 prompt x G samples (one prefill, G forks sharing the prompt's KV pages),
 *   independent: G different prompts of the same length x 1 sample (G prefills, no sharing),
 *   batch-1:     1 prompt x G samples decoded one sequence per forward.
 * Each scenario runs in its own child process so its peak RSS is its own (wait4 rusage). Every
 * sample generates exactly --new tokens (EOS ignored) so the work is equal. Then the peer users run
 * today, HF transformers `generate` (tools/bench_hf_generate.py), on the same prompt ids, G, N and
 * threads, in the same run. With --speculative K each scenario runs a second time with K MTP
 * drafts per step, so the two speeds come from the same run. */
#include "cli/cli.h"
#include "common/json.h"
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
    int hf;
    unsigned scenarios; /* bit w set: run scenario w (0 shared, 1 independent, 2 batch-1) */
    int numerics;       /* grpo_numerics */
    int kv_dtype;       /* grpo_kv_dtype */
    int record_routes;  /* grpo_rollout_opts.record_routes */
    int speculative;    /* --speculative K: each scenario again with K drafts per step */
    int spec_run;       /* the drafts of the run at hand (0 or speculative) */
} bench_args;

typedef struct bench_result {
    int ok;
    double secs;
    uint64_t tokens, prefilled, forwards;
    size_t peak_pages, page_bytes;
    int32_t peak_seqs, vocab;
    uint64_t drafted, accepted, verify_rows, emitted;
} bench_result;

static void
usage(FILE *f)
{
    fprintf(f, "usage: grpo bench rollout --model DIR [options]\n\n"
               "Generated tokens/s and peak memory for 1 prompt x G samples (shared prefill and\n"
               "pages) against G independent prompts of the same length and against batch-1\n"
               "decoding, then HF transformers generate on the same prompt, G, N and threads\n"
               "(skipped when python3 lacks torch or transformers). Prints a Markdown table.\n\n"
               "  --model DIR        model directory (default: the demo model, else the tiny one)\n"
               "  --prompt-len L     prompt tokens (default 256)\n"
               "  --group G          samples, and independent prompts (default 64)\n"
               "  --new N            tokens generated per sample (default 64)\n"
               "  --threads N        forward threads (default: all CPUs)\n"
               "  --numerics N       exact (default), q8 or fp8 (grpo rollout --help)\n"
               "  --kv-budget B      KV pool bytes (default 1G)\n"
               "  --kv-dtype D       KV cache rows: f32 (default), bf16 or fp8 (grpo rollout\n"
               "                     --help)\n"
               "  --scenarios LIST   comma-separated subset of shared,independent,batch1\n"
               "                     (default: all three, in that order)\n"
               "  --record-routes    keep every token's MoE routes, as grpo rollout\n"
               "                     --record-routes does (to measure what it costs)\n"
               "  --speculative K    run each scenario again with K = 1..3 MTP draft tokens per\n"
               "                     step (the model needs an MTP module; CPU)\n"
               "  --no-hf            skip the HF transformers peer (python3\n"
               "                     tools/bench_hf_generate.py: generate with\n"
               "                     num_return_sequences=G on the same prompt ids)\n"
               "  --help             this text\n");
}

static const char *const scenario_keys[3] = {"shared", "independent", "batch1"};

/* Sets *mask from a comma-separated list of scenario_keys; -1 for an unknown or empty name. */
static int
parse_scenarios(const char *list, unsigned *mask)
{
    *mask = 0;
    const char *p = list;
    for (;;) {
        size_t n = strcspn(p, ","), w = 0;
        while (w < 3 && (strlen(scenario_keys[w]) != n || strncmp(p, scenario_keys[w], n) != 0))
            w++;
        if (w == 3)
            return -1;
        *mask |= 1u << w;
        if (p[n] == 0)
            return 0;
        p += n + 1;
    }
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
    po.numerics = a->numerics;
    po.kv_dtype = a->kv_dtype;
    po.load_mtp = a->spec_run > 0;
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
    ro.record_routes = a->record_routes;
    ro.speculative = a->spec_run;
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
    out->drafted = st.spec_drafted, out->accepted = st.spec_accepted;
    out->verify_rows = st.spec_verify_rows, out->emitted = st.spec_emitted;
    out->vocab = be->vocab;
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

/* The HF transformers peer's figures, from the JSON line of tools/bench_hf_generate.py. */
typedef struct hf_result {
    double tps, secs, rss_mib;
    uint64_t prefilled, forwards;
    char versions[128];
} hf_result;

/* Appends s to buf in single quotes for sh (each ' as '\''); returns -1 when it does not fit. */
static int
sh_quote(char *buf, size_t cap, const char *s)
{
    size_t n = strlen(buf);
    if (n + 2 >= cap)
        return -1;
    buf[n++] = '\'';
    for (; *s && n + 6 < cap; s++) {
        if (*s == '\'')
            memcpy(buf + n, "'\\''", 4), n += 4;
        else
            buf[n++] = *s;
    }
    buf[n++] = '\'';
    buf[n] = 0;
    return *s == 0 ? 0 : -1;
}

/* Writes prompt 0 (the shared scenario's prompt) to a new temporary file named in path. */
static int
write_ids(char path[64], const bench_args *a, int32_t vocab)
{
    snprintf(path, 64, "/tmp/grpo_bench_rollout_ids_XXXXXX");
    int fd = mkstemp(path);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
    int32_t *p = malloc((size_t)a->prompt_len * sizeof *p);
    int rc = f != NULL && p != NULL ? 0 : -1;
    if (rc == 0) {
        fill_prompt(p, a->prompt_len, 0, vocab);
        for (int i = 0; i < a->prompt_len; i++)
            fprintf(f, "%d%c", p[i], i + 1 < a->prompt_len ? ' ' : '\n');
    }
    if (f != NULL && fclose(f) != 0)
        rc = -1;
    if (f == NULL && fd >= 0)
        close(fd);
    free(p);
    return rc;
}

/* Fills *out from the peer's JSON line; returns 0, 1 for {"skipped": why}, -1 otherwise. */
static int
parse_hf(const char *line, hf_result *out, char *why, size_t cap)
{
    cJSON *j = cJSON_Parse(line);
    const cJSON *skip = cJSON_GetObjectItem(j, "skipped");
    const cJSON *tps = cJSON_GetObjectItem(j, "tokens_per_s");
    int rc = cJSON_IsString(skip) ? 1 : cJSON_IsNumber(tps) ? 0 : -1;
    if (rc == 1)
        snprintf(why, cap, "%s", skip->valuestring);
    if (rc == 0) {
        const cJSON *tv = cJSON_GetObjectItem(j, "transformers");
        const cJSON *pv = cJSON_GetObjectItem(j, "torch");
        out->tps = tps->valuedouble;
        out->secs = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "wall_s"));
        out->rss_mib = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "peak_rss_mib"));
        out->prefilled = (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "prefill_tokens"));
        out->forwards = (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "forwards"));
        snprintf(out->versions, sizeof out->versions, "transformers %.40s, torch %.40s",
                 cJSON_IsString(tv) ? tv->valuestring : "?",
                 cJSON_IsString(pv) ? pv->valuestring : "?");
    }
    cJSON_Delete(j);
    return rc;
}

/* The command line of the peer for a's workload, stderr folded into stdout. */
static int
hf_command(char *cmd, size_t cap, const char *script, const bench_args *a, const char *ids)
{
    snprintf(cmd, cap, "python3 ");
    if (sh_quote(cmd, cap, script) != 0 || strlen(cmd) + 10 > cap)
        return -1;
    strcat(cmd, " --model ");
    size_t n;
    if (sh_quote(cmd, cap, a->model) != 0 || (n = strlen(cmd)) + 160 > cap)
        return -1;
    snprintf(cmd + n, cap - n, " --prompt-len %d --group %d --new %d --threads %d --ids %s 2>&1",
             a->prompt_len, a->G, a->new_tokens, a->threads > 0 ? a->threads : grpo_cpu_count(),
             ids);
    return 0;
}

/* Runs tools/bench_hf_generate.py on a's workload with the shared scenario's prompt ids. Returns 0
 * with *out filled, 1 when the peer is unavailable, -1 when it failed; why says why (not for 0). */
static int
run_hf(const bench_args *a, int32_t vocab, hf_result *out, char *why, size_t cap)
{
    char script[4096], ids[64], cmd[16384], line[4096];
    snprintf(script, sizeof script, "%s/tools/bench_hf_generate.py", GRPO_SOURCE_DIR);
    snprintf(why, cap, "no output");
    if (access(script, R_OK) != 0)
        return snprintf(why, cap, "tools/bench_hf_generate.py is missing"), 1;
    if (write_ids(ids, a, vocab) != 0) {
        unlink(ids);
        return snprintf(why, cap, "cannot write the prompt ids to /tmp"), -1;
    }
    if (hf_command(cmd, sizeof cmd, script, a, ids) != 0) {
        unlink(ids);
        return snprintf(why, cap, "the model path is too long"), -1;
    }
    int rc = -1;
    fflush(NULL);
    FILE *p = popen(cmd, "r");
    while (p != NULL && fgets(line, sizeof line, p) != NULL) {
        line[strcspn(line, "\n")] = 0;
        if (line[0] == '{' && (rc = parse_hf(line, out, why, cap)) >= 0)
            continue;
        if (line[0] != 0 && rc < 0)
            snprintf(why, cap, "%s", line); /* the peer's last word, for a failure */
    }
    int st = p != NULL ? pclose(p) : -1;
    unlink(ids);
    if (st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 127)
        return snprintf(why, cap, "python3 not found"), 1;
    return rc == 0 && st != 0 ? -1 : rc;
}

/* The transformers row and the speedup line; a missing peer is reported, not an error. */
static int
hf_peer(const bench_args *a, int32_t vocab, double shared_tps)
{
    hf_result h = {0};
    char why[4096] = "";
    int rc = run_hf(a, vocab, &h, why, sizeof why);
    if (rc == 1) {
        printf("\ntransformers generate: skipped (%s)\n", why);
        return CLI_OK;
    }
    if (rc != 0) {
        fprintf(stderr, "grpo bench rollout: tools/bench_hf_generate.py failed: %s\n", why);
        return CLI_FAIL;
    }
    printf("| transformers generate (G sequences) | %.1f | %.2f | %llu | %llu | - | %.1f |\n",
           h.tps, h.secs, (unsigned long long)h.prefilled, (unsigned long long)h.forwards,
           h.rss_mib);
    if (shared_tps > 0) /* the shared scenario ran */
        printf("\ngrpo shared-prefix vs transformers: %.1fx (%s, fp32, python3 "
               "tools/bench_hf_generate.py)\n",
               h.tps > 0 ? shared_tps / h.tps : 0.0, h.versions);
    return CLI_OK;
}

/* The grpo rows of the table: each scenario asked for, and again with --speculative K. */
static int
table_rows(bench_args *a, double *shared_tps, int32_t *vocab)
{
    static const char *names[3] = {"1 prompt x G (shared prefill + pages)",
                                   "G independent prompts x 1", "1 prompt x G, batch-1 decode"};
    double tps[3][2] = {{0}};
    for (int w = 0; w < 3; w++)
        for (int sp = 0; sp < 1 + (a->speculative > 0) && (a->scenarios & 1u << w); sp++) {
            bench_result r;
            long rss = 0;
            a->spec_run = sp ? a->speculative : 0;
            if (fork_scenario(a, w, &r, &rss) != 0) {
                fprintf(stderr, "grpo bench rollout: scenario \"%s\"%s failed\n", names[w],
                        sp ? " with --speculative" : "");
                return CLI_FAIL;
            }
            char name[160];
            if (sp)
                snprintf(name, sizeof name,
                         "%s, speculative %d (%.0f%% of drafts kept, %.2f tokens per verify)",
                         names[w], a->speculative,
                         r.drafted ? 100.0 * (double)r.accepted / (double)r.drafted : 0.0,
                         r.verify_rows ? (double)r.emitted / (double)r.verify_rows : 0.0);
            tps[w][sp] = r.secs > 0 ? (double)r.tokens / r.secs : 0.0;
            printf("| %s | %.1f | %.2f | %llu | %llu | %.1f | %.1f |\n", sp ? name : names[w],
                   tps[w][sp], r.secs, (unsigned long long)r.prefilled,
                   (unsigned long long)r.forwards,
                   (double)r.peak_pages * (double)r.page_bytes / 1048576.0, (double)rss / 1024.0);
            *vocab = r.vocab;
            if (w == 0 && sp == 0)
                *shared_tps = tps[w][sp];
            fflush(stdout);
        }
    for (int w = 0; w < 3 && a->speculative > 0; w++)
        if (tps[w][0] > 0)
            printf("%sspeculative %d vs off, %s: %.2fx\n", w == 0 ? "\n" : "", a->speculative,
                   scenario_keys[w], tps[w][1] / tps[w][0]);
    return CLI_OK;
}

int
grpo_bench_rollout(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return CLI_OK;
    }
    bench_args a = {NULL, 256, 64, 64, 0, "1G", 1, 7u, GRPO_NUMERICS_EXACT, GRPO_KV_F32, 0, 0, 0};
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},    {"prompt-len", required_argument, 0, 'l'},
        {"group", required_argument, 0, 'g'},    {"new", required_argument, 0, 'n'},
        {"threads", required_argument, 0, 't'},  {"kv-budget", required_argument, 0, 'k'},
        {"no-hf", no_argument, 0, 'h'},          {"scenarios", required_argument, 0, 's'},
        {"numerics", required_argument, 0, 'q'}, {"kv-dtype", required_argument, 0, 'd'},
        {"record-routes", no_argument, 0, 'r'},  {"speculative", required_argument, 0, 'x'},
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
        case 'q':
            if (cli_numerics_opt(CMD, optarg, &a.numerics) != 0)
                return CLI_USAGE;
            continue;
        case 'd':
            if (cli_kv_dtype_opt(CMD, optarg, &a.kv_dtype) != 0)
                return CLI_USAGE;
            continue;
        case 'h':
            a.hf = 0;
            continue;
        case 'r':
            a.record_routes = 1;
            continue;
        case 'x':
            if (v < 1 || v > 3)
                return cli_usage(CMD, "--speculative %s: expected 1 to 3 draft tokens", optarg);
            a.speculative = v;
            continue;
        case 's':
            if (parse_scenarios(optarg, &a.scenarios) != 0)
                return cli_usage(CMD,
                                 "--scenarios %s: expected a comma-separated subset of "
                                 "shared,independent,batch1",
                                 optarg);
            continue;
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
    printf("model %s, prompt %d tokens, G = %d, %d new tokens per sample, threads %d\n\n", a.model,
           a.prompt_len, a.G, a.new_tokens, a.threads);
    printf("| scenario | generated tok/s | wall s | prefill tokens | forwards | peak KV MiB | "
           "peak RSS MiB |\n|---|---|---|---|---|---|---|\n");
    double shared_tps = 0;
    int32_t vocab = 0;
    if (table_rows(&a, &shared_tps, &vocab) != CLI_OK)
        return CLI_FAIL;
    return a.hf ? hf_peer(&a, vocab, shared_tps) : CLI_OK;
}
