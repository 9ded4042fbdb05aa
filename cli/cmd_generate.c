/* `grpo generate`: loads a model and continues a prompt, for a quick look. Greedy at temperature 0;
 * otherwise the rollout sampler with the counter-based RNG (seed, sample 0, position). */
#include "cli/cli.h"
#include "grpo/model.h"
#include "grpo/rollout.h"
#include "grpo/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void
usage(FILE *f)
{
    fprintf(
        f, "usage: grpo generate --model DIR (--prompt-ids \"1 2 3\" | --prompt TEXT) [options]\n\n"
           "Continues a prompt with a DeepSeek-V3 architecture model on the CPU and prints the\n"
           "new token ids (one line; the text with --prompt) on stdout and timings on stderr.\n\n"
           "  --model DIR          directory with config.json and *.safetensors (required)\n"
           "  --prompt-ids IDS     prompt token ids separated by spaces or commas\n"
           "  --prompt TEXT        prompt text, encoded with the tokenizer (BOS prepended);\n"
           "                       give exactly one of --prompt and --prompt-ids\n"
           "  --tokenizer PATH     tokenizer.json or its directory for --prompt (default: DIR)\n"
           "  --chat NAME          with --prompt: render it as one user turn of that chat\n"
           "                       template, generation prompt included (v3, r1, r1-distill,\n"
           "                       qwen2.5, qwen3, qwen3-nothink, llama3, llama3.1)\n"
           "  --max-new-tokens N   tokens to generate (default 32; prompt + N must fit the\n"
           "                       model's max_position_embeddings)\n"
           "  --temperature T      0 = greedy (default 0)\n"
           "  --top-p P            nucleus sampling mass in (0, 1] (default 1)\n"
           "  --seed S             RNG seed for sampling (default 0)\n"
           "  --threads N          CPU threads, 1..1024 (default: all)\n"
           "  --kv-dtype D         KV cache rows: f32 (default), bf16 or fp8 (grpo rollout\n"
           "                       --help)\n"
           "  --no-eos-stop        keep going after the model's EOS token\n"
           "  --logits-out FILE    also write every step's logits (float32, steps x vocab)\n"
           "  --help               this text\n\n"
           "exit codes: 0 success, 1 runtime failure, 2 usage error\n");
}

static int
parse_ids(const char *s, int32_t **out, int *n)
{
    int cap = 16, k = 0;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    if (v == NULL)
        return -1;
    while (*s) {
        while (*s == ' ' || *s == ',' || *s == '\t')
            s++;
        if (*s == 0)
            break;
        char *end;
        errno = 0;
        long x = strtol(s, &end, 10);
        if (end == s || errno != 0 || x < 0 || x > INT32_MAX) {
            free(v);
            return -1;
        }
        if (k == cap) {
            int32_t *w = realloc(v, (size_t)(cap *= 2) * sizeof *v);
            if (w == NULL) {
                free(v);
                return -1;
            }
            v = w;
        }
        v[k++] = (int32_t)x;
        s = end;
    }
    *out = v;
    *n = k;
    return 0;
}

typedef struct {
    const char *model, *ids, *prompt, *logits_out, *tokenizer, *chat;
    long max_new, threads;
    double temperature, top_p;
    unsigned long long seed;
    int eos_stop, kv_dtype;
} opts;

static int
parse_args(int argc, char **argv, opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_new = 32;
    o->top_p = 1.0;
    o->eos_stop = 1;
    static const char *const known[] = {"--model",          "--prompt-ids", "--prompt",
                                        "--tokenizer",      "--chat",       "--logits-out",
                                        "--max-new-tokens", "--threads",    "--temperature",
                                        "--top-p",          "--seed",       "--kv-dtype"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (strcmp(a, "--no-eos-stop") == 0) {
            o->eos_stop = 0;
            continue;
        }
        size_t k = 0;
        while (k < sizeof known / sizeof known[0] && strcmp(a, known[k]) != 0)
            k++;
        if (k == sizeof known / sizeof known[0])
            return cli_usage("generate", "unknown option \"%s\"", a);
        if (v == NULL)
            return cli_usage("generate", "%s needs a value", a);
        i++;
        errno = 0;
        if (strcmp(a, "--model") == 0)
            o->model = v;
        else if (strcmp(a, "--prompt-ids") == 0)
            o->ids = v;
        else if (strcmp(a, "--prompt") == 0)
            o->prompt = v;
        else if (strcmp(a, "--tokenizer") == 0)
            o->tokenizer = v;
        else if (strcmp(a, "--chat") == 0)
            o->chat = v;
        else if (strcmp(a, "--kv-dtype") == 0) {
            if (cli_kv_dtype_opt("generate", v, &o->kv_dtype) != 0)
                return CLI_USAGE;
        } else if (strcmp(a, "--logits-out") == 0)
            o->logits_out = v;
        else if (strcmp(a, "--max-new-tokens") == 0 && (o->max_new = strtol(v, &end, 10)) >= 0 &&
                 o->max_new <= INT32_MAX && end != v && *end == 0 && errno == 0)
            continue;
        else if (strcmp(a, "--threads") == 0 && (o->threads = strtol(v, &end, 10)) >= 0 &&
                 o->threads <= 1024 && end != v && *end == 0)
            continue;
        else if (strcmp(a, "--temperature") == 0 && (o->temperature = strtod(v, &end)) >= 0 &&
                 o->temperature <= 100 && end != v && *end == 0)
            continue;
        else if (strcmp(a, "--top-p") == 0 && (o->top_p = strtod(v, &end)) > 0 && o->top_p <= 1 &&
                 end != v && *end == 0)
            continue;
        else if (strcmp(a, "--seed") == 0 && v[0] != '-' &&
                 (o->seed = strtoull(v, &end, 10), end != v && *end == 0 && errno == 0))
            continue;
        else
            return cli_usage("generate", "bad option or value: %s %s", a, v);
    }
    if (o->model == NULL)
        return cli_usage("generate", "--model DIR is required");
    if ((o->prompt == NULL) == (o->ids == NULL))
        return cli_usage("generate", "give exactly one of --prompt TEXT and --prompt-ids IDS");
    if (o->chat != NULL && (o->prompt == NULL || grpo_chat_family_parse(o->chat) < 0))
        return cli_usage("generate", "--chat takes a template name (v3, r1, r1-distill, qwen2.5, "
                                     "qwen3, qwen3-nothink, llama3, llama3.1) and needs --prompt");
    return CLI_OK;
}

/* One generation: the KV pool and sequence, the logits row, the --logits-out file and the
 * incremental detokenizer (with a tokenizer; else token ids are printed). */
typedef struct gen {
    const opts *o;
    grpo_model *m;
    const grpo_model_config *c;
    const grpo_tokenizer *tk;
    grpo_kv *kv;
    float *lg; /* (V) */
    FILE *lf;
    grpo_detok dt;
    int32_t seq;
} gen;

/* Sets g up for np prompt tokens; returns CLI_OK or the exit code with the message printed. */
static int
gen_open(gen *g, int np)
{
    const grpo_model_config *c = g->c;
    if ((long)np + g->o->max_new > (long)c->max_position_embeddings)
        return cli_usage("generate",
                         "%d prompt tokens + --max-new-tokens %ld exceed the model's "
                         "max_position_embeddings (%d)",
                         np, g->o->max_new, (int)c->max_position_embeddings);
    int dt = grpo_model_kv_dtype(g->m);
    size_t page = (size_t)GRPO_KV_PAGE * c->num_hidden_layers * (size_t)grpo_kv_row_bytes(c, dt);
    size_t pages = (size_t)(np + g->o->max_new) / GRPO_KV_PAGE + 2;
    if (grpo_kv_create_for(&g->kv, g->m, pages * page) != GRPO_OK)
        return cli_fail("generate");
    if (g->tk != NULL)
        grpo_detok_init(&g->dt, g->tk, 0);
    if (g->o->logits_out && (g->lf = fopen(g->o->logits_out, "wb")) == NULL) {
        fprintf(stderr, "grpo generate: %s: cannot open for writing: %s\n", g->o->logits_out,
                strerror(errno));
        return CLI_FAIL;
    }
    if ((g->lg = malloc((size_t)c->vocab_size * sizeof *g->lg)) == NULL ||
        grpo_kv_seq_new(g->kv, &g->seq) != GRPO_OK) {
        fprintf(stderr, "grpo generate: cannot set up (out of memory)\n");
        return CLI_FAIL;
    }
    return CLI_OK;
}

static void
emit(gen *g, long i, int32_t tok)
{
    if (g->tk != NULL) {
        const char *txt;
        size_t tl;
        if (grpo_detok_feed(&g->dt, tok, &txt, &tl) == GRPO_OK)
            fwrite(txt, 1, tl, stdout);
    } else {
        printf("%s%d", i ? " " : "", tok);
    }
    fflush(stdout);
}

/* Prefill, then sample and decode token by token; *forwards counts the forwards run; t[0] is
 * when the prefill began and t[1] when it ended. */
static int
decode(gen *g, const int32_t *prompt, int np, long *forwards, double t[2])
{
    const opts *o = g->o;
    int V = g->c->vocab_size;
    grpo_sampling sp = {(float)o->temperature, (float)o->top_p, 0, 0.0f};
    int32_t tok;
    grpo_fwd_item it = {g->seq, 0, np, prompt};
    t[0] = t[1] = grpo_now();
    for (long i = 0; i < o->max_new; i++) {
        if (grpo_model_forward(g->m, g->kv, &it, 1, g->lg) != GRPO_OK)
            return cli_fail("generate");
        if (++*forwards == 1)
            t[1] = grpo_now();
        if (g->lf != NULL && fwrite(g->lg, sizeof *g->lg, (size_t)V, g->lf) != (size_t)V) {
            fprintf(stderr, "grpo generate: %s: write failed after %ld steps: %s\n", o->logits_out,
                    i, strerror(errno));
            return CLI_FAIL;
        }
        grpo_rng_key key = {o->seed, 0, 0, (uint32_t)i};
        if ((tok = grpo_sample(g->lg, V, &sp, key, NULL, NULL)) < 0)
            return cli_fail("generate");
        emit(g, i, tok);
        if (o->eos_stop && tok == g->c->eos_token_id)
            break;
        it.pos0 += it.n;
        it.n = 1;
        it.tokens = &tok;
    }
    return CLI_OK;
}

static int
run(const opts *o, grpo_model *m, const grpo_tokenizer *tk, const int32_t *prompt, int np)
{
    gen g = {.o = o, .m = m, .c = grpo_model_get_config(m), .tk = tk};
    long forwards = 0;
    double t[2] = {0, 0};
    int rc = gen_open(&g, np);
    if (rc == CLI_OK)
        rc = decode(&g, prompt, np, &forwards, t);
    if (g.kv != NULL && tk != NULL) { /* the detokenizer was set up: flush or drop its tail */
        const char *txt = NULL;
        size_t tl = 0;
        grpo_detok_fini(&g.dt, rc == CLI_OK ? &txt : NULL, rc == CLI_OK ? &tl : NULL);
        if (txt != NULL)
            fwrite(txt, 1, tl, stdout);
    }
    if (rc == CLI_OK) {
        printf("\n");
        fflush(stdout);
        double t2 = grpo_now();
        long steps = forwards > 0 ? forwards - 1 : 0; /* decode forwards after the prefill */
        fprintf(stderr, "prefill %d tokens in %.3f s; %ld decode steps in %.3f s (%.2f tok/s)\n",
                np, t[1] - t[0], steps, t2 - t[1], t2 > t[1] ? (double)steps / (t2 - t[1]) : 0.0);
    }
    if (g.lf != NULL && fclose(g.lf) != 0 && rc == CLI_OK) {
        fprintf(stderr, "grpo generate: %s: write failed: %s\n", o->logits_out, strerror(errno));
        rc = CLI_FAIL;
    }
    free(g.lg);
    grpo_kv_destroy(g.kv);
    return rc;
}

/* --prompt: loads the tokenizer and encodes the text (as a chat turn with --chat). */
static int
tokenize(const opts *o, grpo_tokenizer **tk, int32_t **ids, int *n)
{
    const char *path = o->tokenizer != NULL ? o->tokenizer : o->model;
    if (grpo_tokenizer_load(tk, path, NULL) != GRPO_OK)
        return cli_fail("generate");
    size_t k = 0;
    grpo_err err;
    if (o->chat != NULL) {
        grpo_chat_message msg = {"user", o->prompt, NULL, 0};
        err = grpo_chat_encode(*tk, (grpo_chat_family)grpo_chat_family_parse(o->chat), &msg, 1, 1,
                               ids, &k);
    } else {
        err = grpo_tokenizer_encode(*tk, o->prompt, strlen(o->prompt), GRPO_TOK_ADD_BOS, ids, &k);
    }
    if (err != GRPO_OK || k == 0) {
        grpo_tokenizer_destroy(*tk);
        *tk = NULL;
        free(*ids);
        *ids = NULL;
        return err != GRPO_OK ? cli_fail("generate")
                              : cli_usage("generate", "--prompt encodes to no tokens");
    }
    *n = (int)k;
    return CLI_OK;
}

int
grpo_cmd_generate(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return CLI_OK;
    }
    opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc != CLI_OK)
        return rc;
    int32_t *ids = NULL;
    int n = 0;
    grpo_tokenizer *tk = NULL;
    if (o.ids != NULL && (parse_ids(o.ids, &ids, &n) != 0 || n == 0))
        return cli_usage("generate", "--prompt-ids: expected non-negative integers, got \"%s\"",
                         o.ids);
    if (o.prompt != NULL && (rc = tokenize(&o, &tk, &ids, &n)) != CLI_OK)
        return rc;
    grpo_model *m = NULL;
    grpo_model_opts mo = {(int)o.threads, 0, 0, 0, o.kv_dtype};
    if (grpo_model_load(&m, o.model, &mo) != GRPO_OK) {
        free(ids);
        grpo_tokenizer_destroy(tk);
        return cli_fail("generate");
    }
    const grpo_model_config *c = grpo_model_get_config(m);
    for (int i = 0; i < n; i++)
        if (ids[i] >= c->vocab_size) {
            int32_t bad = ids[i], vocab = c->vocab_size;
            grpo_model_destroy(m);
            grpo_tokenizer_destroy(tk);
            free(ids);
            return cli_usage("generate", "prompt id %d is outside the model's vocabulary (%d)", bad,
                             vocab);
        }
    rc = run(&o, m, tk, ids, n);
    grpo_model_destroy(m);
    grpo_tokenizer_destroy(tk);
    free(ids);
    return rc;
}
