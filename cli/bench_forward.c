/* `grpo bench forward`: prefill and decode tokens/s at several batch sizes, the weight bytes read
 * per decode step turned into an achieved bandwidth, and this machine's memcpy bandwidth measured
 * in the same run (the physical limit of small-batch decode). */
#include "cli/cli.h"
#include "grpo/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void
usage(FILE *f)
{
    fprintf(f,
            "usage: grpo bench forward --model DIR [options]\n\n"
            "For each batch size B: B sequences of P prompt tokens prefilled in one forward call\n"
            "(prefill tok/s), then S decode steps of B single tokens (decode tok/s). Weight\n"
            "bandwidth = weight bytes one decode step reads (attention, dense layers, lm_head and\n"
            "the expected number of distinct routed experts for B tokens) / step time.\n\n"
            "  --model DIR        model directory (required)\n"
            "  --batches LIST     comma-separated batch sizes (default 1,8,64)\n"
            "  --prompt-len P     prompt tokens per sequence (default 64)\n"
            "  --steps S          decode steps per batch size (default 8)\n"
            "  --threads N        CPU threads (default: all)\n"
            "  --memcpy-mb M      buffer size for the memcpy measurement (default 256)\n"
            "  --numerics N       exact (default: fp32, matches transformers), q8 (int8\n"
            "                     weights per 32 columns, int16 activations) or fp8 (E4M3\n"
            "                     activations per 128 columns at FP8 weights; docs/model.md);\n"
            "                     with q8 or fp8, also its accuracy against the exact path\n"
            "  --kv-dtype D       KV cache rows: f32 (default), bf16 or fp8 (grpo rollout\n"
            "                     --help); with bf16 or fp8, also the KV bytes and the\n"
            "                     accuracy against exact numerics with an f32 cache\n"
            "  --profile          after each phase, the time per op of the kernel table and\n"
            "                     the calling thread's wait at the thread pool's barriers\n");
}

typedef struct {
    char *dst;
    const char *src;
    size_t n;
} cp_ctx;

static void
cp_range(void *vctx, size_t b, size_t e, int worker)
{
    (void)worker;
    cp_ctx *c = vctx;
    memcpy(c->dst + b * 4096, c->src + b * 4096, (e - b) * 4096);
}

/* Best of 5 copies of mb MiB with `threads` threads; GB/s counting bytes read + written. */
static double
memcpy_gbps(size_t mb, int threads)
{
    size_t n = mb << 20;
    char *a = malloc(n), *b = malloc(n);
    grpo_pool *p = NULL;
    if (a == NULL || b == NULL || grpo_pool_create(&p, threads) != GRPO_OK) {
        free(a);
        free(b);
        return 0;
    }
    memset(a, 1, n);
    memset(b, 2, n);
    cp_ctx c = {b, a, n};
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double t = grpo_now();
        grpo_pool_parallel_for(p, n / 4096, cp_range, &c);
        t = grpo_now() - t;
        best = t < best ? t : best;
    }
    grpo_pool_destroy(p);
    free(a);
    free(b);
    return 2.0 * (double)n / best / 1e9;
}

/* Bytes of routed-expert weights read by a decode step of B tokens: E * (1 - (1 - k/E)^B)
 * distinct experts expected under uniform routing, per MoE layer. */
static double
step_bytes(grpo_model *m, int B)
{
    const grpo_model_config *c = grpo_model_get_config(m);
    double per_tok = grpo_model_bytes_per_token(m);
    if (c->n_routed_experts == 0 || c->n_moe_layers == 0)
        return per_tok;
    double E = c->n_routed_experts, k = c->num_experts_per_tok;
    double eb = 3.0 * c->moe_intermediate_size * (double)c->hidden_size *
                (c->fp8 ? 1.0 + 4.0 / (c->fp8_block[0] * (double)c->fp8_block[1]) : 2.0);
    double distinct = E * (1.0 - pow(1.0 - k / E, B));
    return per_tok + c->n_moe_layers * (distinct - k) * eb;
}

/* The per-op table of one phase (--profile): each op's share of the phase's wall time. */
static void
print_profile(grpo_model *m, const char *phase, int B, double wall)
{
    grpo_model_profile p;
    grpo_model_get_profile(m, &p);
    printf("\n  batch %d %s: %.1f ms; the calling thread waited %.1f ms (%.1f%%) at %llu pool "
           "barriers\n",
           B, phase, wall * 1e3, p.pool_wait_s * 1e3, 100 * p.pool_wait_s / wall,
           (unsigned long long)p.pool_calls);
    printf("  %-24s %9s %10s %7s\n", "op", "calls", "ms", "share");
    double sum = 0;
    for (int i = 0; i < p.n_ops; i++) {
        sum += p.seconds[i];
        if (p.calls[i] > 0)
            printf("  %-24s %9llu %10.2f %6.1f%%\n", p.op[i], (unsigned long long)p.calls[i],
                   p.seconds[i] * 1e3, 100 * p.seconds[i] / wall);
    }
    printf("  %-24s %9s %10.2f %6.1f%%\n", "(outside the ops)", "", (wall - sum) * 1e3,
           100 * (wall - sum) / wall);
}

/* A KV pool for B sequences of n tokens, or NULL. */
static grpo_kv *
kv_for(const grpo_model *m, int B, int n)
{
    const grpo_model_config *c = grpo_model_get_config(m);
    int dt = grpo_model_kv_dtype(m);
    size_t page = (size_t)GRPO_KV_PAGE * c->num_hidden_layers * (size_t)grpo_kv_row_bytes(c, dt);
    size_t pages = (size_t)B * ((size_t)n / GRPO_KV_PAGE + 2);
    grpo_kv *kv = NULL;
    return grpo_kv_create_for(&kv, m, pages * page) == GRPO_OK ? kv : NULL;
}

static int
bench_batch(grpo_model *m, int B, int P, int S, int prof, double *pre_tps, double *dec_tps)
{
    const grpo_model_config *c = grpo_model_get_config(m);
    grpo_kv *kv = kv_for(m, B, P + S);
    if (kv == NULL)
        return -1;
    int32_t *tok = malloc((size_t)B * (P + S) * sizeof *tok);
    grpo_fwd_item *it = malloc((size_t)B * sizeof *it);
    float *lg = malloc((size_t)B * c->vocab_size * sizeof *lg);
    int rc = -1;
    if (tok == NULL || it == NULL || lg == NULL)
        goto done;
    uint64_t r = 88172645463325252ull;
    for (int i = 0; i < B * (P + S); i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        tok[i] = (int32_t)(r % (uint64_t)c->vocab_size);
    }
    for (int b = 0; b < B; b++) {
        int32_t s;
        if (grpo_kv_seq_new(kv, &s) != GRPO_OK)
            goto done;
        it[b] = (grpo_fwd_item){s, 0, P, tok + (size_t)b * (P + S)};
    }
    if (prof && grpo_model_set_profile(m, 1) != GRPO_OK)
        goto done;
    double t = grpo_now();
    if (grpo_model_forward(m, kv, it, B, lg) != GRPO_OK)
        goto done;
    double pre = grpo_now() - t;
    *pre_tps = (double)B * P / pre;
    if (prof) {
        grpo_model_set_profile(m, 0);
        print_profile(m, "prefill", B, pre);
        grpo_model_set_profile(m, 1);
    }
    t = grpo_now();
    for (int s = 0; s < S; s++) {
        for (int b = 0; b < B; b++)
            it[b] = (grpo_fwd_item){it[b].seq, P + s, 1, tok + (size_t)b * (P + S) + P + s};
        if (grpo_model_forward(m, kv, it, B, lg) != GRPO_OK)
            goto done;
    }
    double dec = grpo_now() - t;
    *dec_tps = (double)B * S / dec;
    if (prof) {
        grpo_model_set_profile(m, 0);
        print_profile(m, "decode", B, dec);
        printf("\n");
    }
    rc = 0;
done:
    free(tok);
    free(it);
    free(lg);
    grpo_kv_destroy(kv);
    return rc;
}

/* log-softmax of n logits into lp (double). */
static void
log_softmax(const float *l, int n, double *lp)
{
    double mx = -INFINITY, z = 0;
    for (int i = 0; i < n; i++)
        mx = l[i] > mx ? l[i] : mx;
    for (int i = 0; i < n; i++)
        z += exp(l[i] - mx);
    for (int i = 0; i < n; i++)
        lp[i] = l[i] - mx - log(z);
}

typedef struct {
    double kl, max_dlp, sum_dlp, top1;
    int n;
} acc_stats;

/* One position: KL(exact || other), |dlogprob| of the exact argmax, argmax agreement. */
static void
acc_add(acc_stats *a, const float *le, const float *lo, int V, double *pe, double *po)
{
    log_softmax(le, V, pe);
    log_softmax(lo, V, po);
    int ae = 0, ao = 0;
    double kl = 0;
    for (int i = 0; i < V; i++) {
        kl += exp(pe[i]) * (pe[i] - po[i]);
        ae = pe[i] > pe[ae] ? i : ae;
        ao = po[i] > po[ao] ? i : ao;
    }
    double d = fabs(pe[ae] - po[ae]);
    a->kl += kl;
    a->max_dlp = d > a->max_dlp ? d : a->max_dlp;
    a->sum_dlp += d;
    a->top1 += ae == ao;
    a->n++;
}

/* Teacher-forced on the same random tokens: a P-token prefill and S decode steps of one sequence
 * on the model as loaded (m) and on the exact path (loaded again), logits compared per position.
 */
static int
accuracy(grpo_model *m, const char *dir, int threads, int P, int S)
{
    grpo_model *e = NULL;
    grpo_model_opts eo = {threads, 0, 0, GRPO_NUMERICS_EXACT, GRPO_KV_F32};
    if (grpo_model_load(&e, dir, &eo) != GRPO_OK)
        return -1;
    const grpo_model_config *c = grpo_model_get_config(m);
    int V = c->vocab_size, rc = -1;
    grpo_kv *ke = kv_for(e, 1, P + S), *ko = kv_for(m, 1, P + S);
    int32_t *tok = malloc((size_t)(P + S) * sizeof *tok);
    float *le = malloc((size_t)V * sizeof *le), *lo = malloc((size_t)V * sizeof *lo);
    double *pe = malloc((size_t)V * sizeof *pe), *po = malloc((size_t)V * sizeof *po);
    acc_stats a = {0};
    int32_t se, so;
    if (ke == NULL || ko == NULL || tok == NULL || le == NULL || lo == NULL || pe == NULL ||
        po == NULL || grpo_kv_seq_new(ke, &se) != GRPO_OK || grpo_kv_seq_new(ko, &so) != GRPO_OK)
        goto done;
    uint64_t r = 0x2545f4914f6cdd1dull;
    for (int i = 0; i < P + S; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        tok[i] = (int32_t)(r % (uint64_t)V);
    }
    for (int s = 0; s <= S; s++) {
        int pos = s == 0 ? 0 : P + s - 1, n = s == 0 ? P : 1;
        grpo_fwd_item ie = {se, pos, n, tok + pos}, io = {so, pos, n, tok + pos};
        if (grpo_model_forward(e, ke, &ie, 1, le) != GRPO_OK ||
            grpo_model_forward(m, ko, &io, 1, lo) != GRPO_OK)
            goto done;
        acc_add(&a, le, lo, V, pe, po);
    }
    const char *nm = grpo_model_numerics(m) != GRPO_NUMERICS_EXACT
                         ? grpo_numerics_name(grpo_model_numerics(m))
                         : grpo_kv_dtype_name(grpo_model_kv_dtype(m));
    printf("\naccuracy of numerics %s, kv dtype %s against exact with an f32 cache, %d positions "
           "(a %d-token prompt, then %d decode steps, teacher-forced):\n  mean KL(exact || %s) "
           "%.3g nats, top-1 agreement %.1f%%, |d logprob| of exact's top token: largest %.3g, "
           "mean %.3g\n",
           grpo_numerics_name(grpo_model_numerics(m)), grpo_kv_dtype_name(grpo_model_kv_dtype(m)),
           a.n, P, S, nm, a.kl / a.n, 100.0 * a.top1 / a.n, a.max_dlp, a.sum_dlp / a.n);
    rc = 0;
done:
    free(tok), free(le), free(lo), free(pe), free(po);
    grpo_kv_destroy(ke);
    grpo_kv_destroy(ko);
    grpo_model_destroy(e);
    return rc;
}

typedef struct {
    const char *model, *batches;
    long P, S, threads, mb;
    int prof, numerics, kv_dtype;
} fwd_args;

/* Flags into *x; returns 0, or the usage error's exit code. */
static int
parse_args(fwd_args *x, int argc, char **argv)
{
    *x = (fwd_args){NULL, "1,8,64", 64, 8, 0, 256, 0, GRPO_NUMERICS_EXACT, GRPO_KV_F32};
    static const char *const known[] = {"--model",   "--batches",   "--prompt-len", "--steps",
                                        "--threads", "--memcpy-mb", "--numerics",   "--kv-dtype"};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--profile") == 0) {
            x->prof = 1;
            continue;
        }
        size_t k = 0;
        while (k < sizeof known / sizeof known[0] && strcmp(argv[i], known[k]) != 0)
            k++;
        if (k == sizeof known / sizeof known[0])
            return cli_usage("bench forward", "unknown option \"%s\"", argv[i]);
        if (i + 1 >= argc)
            return cli_usage("bench forward", "%s needs a value", argv[i]);
        const char *a = argv[i], *v = argv[++i];
        char *end = NULL;
        if (strcmp(a, "--model") == 0)
            x->model = v;
        else if (strcmp(a, "--batches") == 0)
            x->batches = v;
        else if (strcmp(a, "--prompt-len") == 0 && (x->P = strtol(v, &end, 10)) > 0 && !*end)
            continue;
        else if (strcmp(a, "--steps") == 0 && (x->S = strtol(v, &end, 10)) > 0 && !*end)
            continue;
        else if (strcmp(a, "--threads") == 0 && (x->threads = strtol(v, &end, 10)) >= 0 &&
                 x->threads <= 1024 && end != v && !*end)
            continue;
        else if (strcmp(a, "--memcpy-mb") == 0 && (x->mb = strtol(v, &end, 10)) > 0 && !*end)
            continue;
        else if (strcmp(a, "--numerics") == 0) {
            if (cli_numerics_opt("bench forward", v, &x->numerics) != 0)
                return CLI_USAGE;
        } else if (strcmp(a, "--kv-dtype") == 0) {
            if (cli_kv_dtype_opt("bench forward", v, &x->kv_dtype) != 0)
                return CLI_USAGE;
        } else
            return cli_usage("bench forward", "bad option or value: %s %s", a, v);
    }
    return x->model == NULL ? cli_usage("bench forward", "--model DIR is required") : 0;
}

int
grpo_bench_forward(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return CLI_OK;
    }
    fwd_args x;
    int rc = parse_args(&x, argc, argv);
    if (rc != 0)
        return rc;
    const char *model = x.model, *batches = x.batches;
    long P = x.P, S = x.S, threads = x.threads, mb = x.mb;
    int prof = x.prof;
    grpo_model *m = NULL;
    grpo_model_opts mo = {(int)threads, 0, 0, x.numerics, x.kv_dtype};
    double tl = grpo_now();
    if (grpo_model_load(&m, model, &mo) != GRPO_OK)
        return cli_fail("bench forward");
    tl = grpo_now() - tl;
    int nt = threads > 0 ? (int)threads : grpo_cpu_count();
    double bw1 = memcpy_gbps((size_t)mb, 1), bwn = memcpy_gbps((size_t)mb, nt);
    const grpo_model_config *c = grpo_model_get_config(m);
    printf("model %s: %s, %d layers, hidden %d, %d experts top-%d, %s, numerics %s; loaded in "
           "%.2f s\n",
           model, grpo_model_type_name(c), c->num_hidden_layers, c->hidden_size,
           c->n_routed_experts, c->num_experts_per_tok, c->fp8 ? "FP8" : "BF16/F32",
           grpo_numerics_name(x.numerics), tl);
    printf("KV cache %s: %.0f B per token per layer, %.0f B per token (%d layers)\n",
           grpo_kv_dtype_name(x.kv_dtype), grpo_kv_row_bytes(c, x.kv_dtype),
           grpo_kv_row_bytes(c, x.kv_dtype) * c->num_hidden_layers, c->num_hidden_layers);
    printf("threads %d; memcpy (read+write) %.2f GB/s with 1 thread, %.2f GB/s with %d\n", nt, bw1,
           bwn, nt);
    printf("prompt %ld tokens, %ld decode steps\n\n", P, S);
    printf("%6s %14s %14s %16s %12s\n", "batch", "prefill tok/s", "decode tok/s", "weights/step MB",
           "weight GB/s");
    const char *p = batches;
    rc = CLI_OK;
    while (*p) {
        char *end;
        long B = strtol(p, &end, 10);
        if (end == p || B <= 0) {
            rc = cli_usage("bench forward", "--batches: bad list \"%s\"", batches);
            break;
        }
        double pre = 0, dec = 0;
        if (bench_batch(m, (int)B, (int)P, (int)S, prof, &pre, &dec) != 0) {
            rc = cli_fail("bench forward");
            break;
        }
        double sb = step_bytes(m, (int)B);
        printf("%6ld %14.1f %14.2f %16.1f %12.2f\n", B, pre, dec, sb / 1e6, sb * (dec / B) / 1e9);
        fflush(stdout);
        p = *end == ',' ? end + 1 : end;
    }
    if (rc == CLI_OK && (x.numerics != GRPO_NUMERICS_EXACT || x.kv_dtype != GRPO_KV_F32) &&
        accuracy(m, model, (int)threads, (int)P, (int)S) != 0)
        rc = cli_fail("bench forward");
    grpo_model_destroy(m);
    return rc;
}
