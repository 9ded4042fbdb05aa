/* `grpo bench tokenize`: single-thread encode throughput on the tokenizer test corpus, beside HF
 * tokenizers timed on the same corpus in the same run (tools/bench_hf_tokenizers.py). */
#include "cli/cli.h"
#include "common/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char USAGE[] =
    "usage: grpo bench tokenize [--tokenizer FILE] [--corpus FILE] [--repeat N] [--no-hf]\n"
    "\n"
    "Encodes every string of the corpus on one thread and prints MB/s and tokens/s (per CPU\n"
    "second of the process, so a busy machine does not skew the comparison): the first\n"
    "pass (empty cache), the best of N passes, and the best with the piece cache off. Then runs\n"
    "python3 tools/bench_hf_tokenizers.py on the same corpus (HF tokenizers, one rayon thread)\n"
    "and prints its figures and the ratio. Timing never decides anything; this is a report.\n"
    "\n"
    "  --tokenizer FILE  tokenizer.json (default: the DeepSeek-V3 one in\n"
    "                    data/deepseek-v3-tokenizer/ in the source tree)\n"
    "  --corpus FILE     corpus.bin from tools/make_tokenizer_fixtures.py (default:\n"
    "                    tests/data/tokenizer/corpus.bin in the source tree)\n"
    "  --repeat N        passes per measurement (default 5)\n"
    "  --no-hf           skip the HF comparison\n"
    "  -h, --help        this help\n";

typedef struct corpus {
    char *buf;
    size_t len, n;
    const char **text;
    size_t *tlen;
} corpus;

static int
varint(const corpus *c, size_t *pos, size_t *out)
{
    size_t v = 0;
    for (int shift = 0; *pos < c->len && shift < 63; shift += 7) {
        unsigned char b = (unsigned char)c->buf[(*pos)++];
        v |= (size_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

static int
read_corpus(corpus *c, const char *path)
{
    memset(c, 0, sizeof *c);
    if (grpo__read_file(path, 0, &c->buf, &c->len) != GRPO_OK)
        return cli_fail("bench tokenize");
    size_t pos = 6, n, len;
    if (c->len < 6 || memcmp(c->buf, "GTKC1\n", 6) != 0 || varint(c, &pos, &n) != 0 || n > c->len) {
        fprintf(stderr, "grpo bench tokenize: %s: not a corpus file\n", path);
        return CLI_FAIL;
    }
    c->text = calloc(n + 1, sizeof *c->text);
    c->tlen = calloc(n + 1, sizeof *c->tlen);
    if (c->text == NULL || c->tlen == NULL)
        return CLI_FAIL;
    for (size_t i = 0; i < n; i++) {
        if (varint(c, &pos, &len) != 0 || len > c->len - pos) {
            fprintf(stderr, "grpo bench tokenize: %s: record %zu is malformed\n", path, i);
            return CLI_FAIL;
        }
        c->text[i] = c->buf + pos;
        c->tlen[i] = len;
        pos += len;
    }
    c->n = n;
    return CLI_OK;
}

/* CPU seconds of this process: the machine may be shared, and both sides run one thread. */
static double
cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* One pass over the corpus; returns CPU seconds, total tokens in *ntok. */
static double
pass(const grpo_tokenizer *tok, const corpus *c, size_t *ntok)
{
    size_t total = 0;
    double t0 = cpu_now();
    for (size_t i = 0; i < c->n; i++) {
        int32_t *ids;
        size_t n;
        if (grpo_tokenizer_encode(tok, c->text[i], c->tlen[i], GRPO_TOK_PARSE_SPECIAL, &ids, &n) !=
            GRPO_OK)
            return -1;
        total += n;
        free(ids);
    }
    *ntok = total;
    return cpu_now() - t0;
}

static void
row(const char *name, double sec, size_t bytes, size_t tokens)
{
    printf("  %-34s %8.3f s cpu %9.2f MB/s %12.0f tokens/s\n", name, sec, bytes / sec / 1e6,
           tokens / sec);
}

static int
run_hf(const char *tokenizer, const char *corpus_path, int repeat, double *best_mbs, size_t *ntok)
{
    char script[4096], cmd[16384];
    snprintf(script, sizeof script, "%s/tools/bench_hf_tokenizers.py", GRPO_SOURCE_DIR);
    if (access(script, R_OK) != 0) {
        printf("HF tokenizers: not run (%s is missing)\n", script);
        return -1;
    }
    snprintf(cmd, sizeof cmd,
             "RAYON_NUM_THREADS=1 python3 '%s' --tokenizer '%s' --corpus '%s' --repeat %d "
             "2>/dev/null",
             script, tokenizer, corpus_path, repeat);
    FILE *p = popen(cmd, "r");
    char line[4096] = {0};
    if (p == NULL || fgets(line, sizeof line, p) == NULL) {
        if (p != NULL)
            pclose(p);
        printf("HF tokenizers: not run (python3 or the tokenizers package is unavailable)\n");
        return -1;
    }
    pclose(p);
    cJSON *j = cJSON_Parse(line);
    if (j == NULL) {
        printf("HF tokenizers: not run (unreadable output: %.200s)\n", line);
        return -1;
    }
    const cJSON *ver = cJSON_GetObjectItem(j, "version");
    *ntok = (size_t)cJSON_GetObjectItem(j, "tokens")->valuedouble;
    double bytes = cJSON_GetObjectItem(j, "bytes")->valuedouble;
    printf("HF tokenizers %s (python3 tools/bench_hf_tokenizers.py, RAYON_NUM_THREADS=1):\n",
           cJSON_IsString(ver) ? ver->valuestring : "?");
    const char *modes[2] = {"batch", "loop"};
    const char *names[2] = {"encode_batch, best of N", "encode() per string, best of N"};
    for (int m = 0; m < 2; m++) {
        const cJSON *o = cJSON_GetObjectItem(j, modes[m]);
        double sec = cJSON_GetObjectItem(o, "seconds")->valuedouble;
        row(names[m], sec, (size_t)bytes, *ntok);
        if (bytes / sec / 1e6 > *best_mbs)
            *best_mbs = bytes / sec / 1e6; /* compare against HF's faster mode */
    }
    cJSON_Delete(j);
    return 0;
}

int
grpo_bench_tokenize(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        fputs(USAGE, stdout);
        return CLI_OK;
    }
    char deftok[4096], defcorpus[4096];
    snprintf(deftok, sizeof deftok, "%s/data/deepseek-v3-tokenizer/tokenizer.json",
             GRPO_SOURCE_DIR);
    snprintf(defcorpus, sizeof defcorpus, "%s/tests/data/tokenizer/corpus.bin", GRPO_SOURCE_DIR);
    const char *tokp = deftok, *corp = defcorpus;
    int repeat = 5, hf = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--tokenizer") == 0 && i + 1 < argc)
            tokp = argv[++i];
        else if (strcmp(argv[i], "--corpus") == 0 && i + 1 < argc)
            corp = argv[++i];
        else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc)
            repeat = atoi(argv[++i]);
        else if (strcmp(argv[i], "--no-hf") == 0)
            hf = 0;
        else
            return cli_usage("bench tokenize", "unknown or incomplete option \"%s\"", argv[i]);
    }
    if (repeat < 1)
        return cli_usage("bench tokenize", "--repeat must be at least 1");
    corpus c;
    int rc = read_corpus(&c, corp);
    grpo_tokenizer *tok = NULL, *nocache = NULL;
    grpo_tokenizer_opts o = {0};
    if (rc == CLI_OK && grpo_tokenizer_load(&tok, tokp, NULL) != GRPO_OK)
        rc = cli_fail("bench tokenize");
    o.cache_entries = -1;
    if (rc == CLI_OK && grpo_tokenizer_load(&nocache, tokp, &o) != GRPO_OK)
        rc = cli_fail("bench tokenize");
    size_t bytes = 0, ntok = 0, hftok = 0;
    for (size_t i = 0; rc == CLI_OK && i < c.n; i++)
        bytes += c.tlen[i];
    if (rc == CLI_OK) {
        printf("corpus %s: %zu strings, %zu bytes; tokenizer %s; one thread\n", corp, c.n, bytes,
               tokp);
        printf("grpo:\n");
        double first = pass(tok, &c, &ntok), best = first, nc = -1;
        for (int r = 1; r < repeat; r++) {
            double t = pass(tok, &c, &ntok);
            best = t < best ? t : best;
        }
        for (int r = 0; r < repeat; r++) {
            double t = pass(nocache, &c, &ntok);
            nc = nc < 0 || t < nc ? t : nc;
        }
        if (first < 0 || nc < 0)
            rc = cli_fail("bench tokenize");
        else {
            row("first pass (empty cache)", first, bytes, ntok);
            row("best of N (warm cache)", best, bytes, ntok);
            row("best of N, cache off", nc, bytes, ntok);
            double hf_mbs = 0;
            if (hf && run_hf(tokp, corp, repeat, &hf_mbs, &hftok) == 0) {
                printf("ratio grpo/HF (best of N each, HF's faster mode): %.2fx%s\n",
                       (bytes / best / 1e6) / hf_mbs,
                       hftok == ntok ? "" : "  (WARNING: token counts differ)");
            }
        }
    }
    grpo_tokenizer_destroy(tok);
    grpo_tokenizer_destroy(nocache);
    free(c.text);
    free(c.tlen);
    free(c.buf);
    return rc;
}
