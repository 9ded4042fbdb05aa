/* `grpo plan`: how a model fits on a set of GPUs (grpo_plan_compute), from config.json alone. */
#include "cli/cli.h"
#include "common/common_int.h"
#include "grpo/model.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMD "plan"

static void
usage(FILE *f)
{
    fprintf(
        f,
        "usage: grpo plan (--model DIR | --config config.json) [options]\n\n"
        "Capacity of a set of GPUs for a model of any family grpo loads (deepseek_v3/v2, qwen2,\n"
        "llama, qwen3, qwen3_moe), from its config.json: weight bytes per GPU with the routed\n"
        "experts split over the GPUs (expert parallel) and the rest replicated on each\n"
        "(data-parallel attention; a dense model whole on each), KV cache bytes per token (MLA's\n"
        "latent row, or GQA's keys and values), how many tokens and groups of G samples fit at a\n"
        "context length, and the longest context per sample when one group has a GPU to itself.\n\n"
        "  --model DIR        a model directory (its config.json is read; no weights)\n"
        "  --config FILE      a config.json\n"
        "  --gpus N           GPUs (default 8)\n"
        "  --gpu-mem GIB      memory per GPU in GiB (default 140.4: an H200's 143,771 MiB)\n"
        "  --mem-fraction F   share of it for weights + KV cache (default 0.90; the rest is\n"
        "                     left to activations, CUDA graphs and NCCL buffers)\n"
        "  --kv-dtype D       f32, bf16 (default) or fp8 (MLA: E4M3 latent, fp32 scale per 128,\n"
        "                     BF16 rope key; GQA: E4M3 keys and values, fp32 scale per head)\n"
        "  --group G          samples per prompt (default 64)\n"
        "  --ctx L            tokens per sample, prompt included (default 32768)\n"
        "  --prompt P         tokens of the context shared by a group's samples (default 0)\n"
        "  --mtp              count the checkpoint's MTP modules on every GPU\n"
        "  --json             one JSON object instead of the table\n"
        "  --help             this text\n\n"
        "exit codes: 0 success, 1 runtime failure (unreadable config), 2 usage error\n");
}

typedef struct {
    const char *model, *config;
    int json;
    grpo_plan_opts o;
} plan_args;

static int
parse_num(const char *flag, const char *v, double lo, double hi, double *out)
{
    char *end = NULL;
    double d = strtod(v, &end);
    if (end == v || *end || !(d >= lo && d <= hi))
        return cli_usage(CMD, "--%s %s: expected a number in [%g, %g]", flag, v, lo, hi);
    *out = d;
    return 0;
}

static int
parse_args(plan_args *a, int argc, char **argv)
{
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"config", required_argument, 0, 'c'},
                                         {"gpus", required_argument, 0, 'g'},
                                         {"gpu-mem", required_argument, 0, 'M'},
                                         {"mem-fraction", required_argument, 0, 'f'},
                                         {"kv-dtype", required_argument, 0, 'k'},
                                         {"group", required_argument, 0, 'G'},
                                         {"ctx", required_argument, 0, 'L'},
                                         {"prompt", required_argument, 0, 'P'},
                                         {"mtp", no_argument, 0, 't'},
                                         {"json", no_argument, 0, 'j'},
                                         {0, 0, 0, 0}};
    memset(a, 0, sizeof *a);
    grpo_plan_opts_default(&a->o);
    int c, rc = 0;
    double d;
    optind = 1;
    opterr = 0;
    while (rc == 0 && (c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        const char *n = c == '?' || c == ':' ? NULL : opts[0].name;
        for (size_t i = 0; opts[i].name && n; i++)
            if (opts[i].val == c)
                n = opts[i].name;
        if (c == 'm')
            a->model = optarg;
        else if (c == 'c')
            a->config = optarg;
        else if (c == 't')
            a->o.mtp = 1;
        else if (c == 'j')
            a->json = 1;
        else if (c == 'k') {
            int dt = 0;
            if (grpo_kv_dtype_parse(optarg, &dt) != GRPO_OK)
                rc = cli_usage(CMD, "--kv-dtype %s: expected f32, bf16 or fp8", optarg);
            a->o.kv_dtype = dt;
        } else if (c == 'M') {
            if ((rc = parse_num(n, optarg, 0.001, 1e6, &d)) == 0)
                a->o.gpu_mem_bytes = d * 1073741824.0;
        } else if (c == 'f') {
            if ((rc = parse_num(n, optarg, 0.01, 1, &d)) == 0)
                a->o.mem_fraction = d;
        } else if (c == 'g' || c == 'G' || c == 'L' || c == 'P') {
            double hi = c == 'g' ? 65536 : c == 'G' ? 1 << 20 : 1e12;
            if ((rc = parse_num(n, optarg, c == 'P' ? 0 : 1, hi, &d)) == 0 && d != (int64_t)d)
                rc = cli_usage(CMD, "--%s %s: expected a whole number", n, optarg);
            if (rc == 0 && c == 'g')
                a->o.gpus = (int32_t)d;
            else if (rc == 0 && c == 'G')
                a->o.group = (int32_t)d;
            else if (rc == 0)
                *(c == 'L' ? &a->o.ctx : &a->o.prompt) = (int64_t)d;
        } else
            rc = cli_usage(CMD, "unknown option or missing value: %s", argv[optind - 1]);
    }
    if (rc == 0 && (a->model == NULL) == (a->config == NULL))
        rc = cli_usage(CMD, "give exactly one of --model DIR and --config FILE");
    if (rc == 0 && a->o.prompt >= a->o.ctx)
        rc = cli_usage(CMD, "--prompt %lld: must be below --ctx %lld", (long long)a->o.prompt,
                       (long long)a->o.ctx);
    return rc;
}

static void
print_plan(const plan_args *a, const grpo_model_config *c, const grpo_plan *p)
{
    const grpo_plan_opts *o = &a->o;
    double G9 = 1e9;
    if (a->json) {
        printf("{\"gpus\":%d,\"params\":%.0f,\"params_mtp\":%.0f,\"weights_bytes\":%.0f,"
               "\"weights_mtp_bytes\":%.0f,\"weights_per_gpu_bytes\":%.0f,\"experts_per_gpu\":%d,"
               "\"kv_dtype\":\"%s\",\"kv_bytes_per_token\":%.0f,\"fits\":%s,"
               "\"kv_bytes_per_gpu\":%.0f,\"tokens_per_gpu\":%lld,\"tokens_total\":%lld,"
               "\"tokens_per_group\":%lld,\"groups_per_gpu\":%lld,\"groups_total\":%lld,"
               "\"max_ctx_at_group\":%lld}\n",
               o->gpus, p->params_total, p->params_mtp, p->weights_total, p->weights_mtp,
               p->weights_per_gpu, p->experts_per_gpu, grpo_kv_dtype_name(o->kv_dtype),
               p->kv_bytes_per_token, p->fits ? "true" : "false", p->kv_bytes_per_gpu,
               (long long)p->tokens_per_gpu, (long long)p->tokens_total,
               (long long)p->tokens_per_group, (long long)p->groups_per_gpu,
               (long long)p->groups_total, (long long)p->max_ctx_at_group);
        return;
    }
    printf("model: %d layers, hidden %d, %d routed experts (top-%d), %s weights\n",
           c->num_hidden_layers, c->hidden_size, c->n_routed_experts, c->num_experts_per_tok,
           c->fp8 ? "FP8 block-scaled" : "BF16");
    printf("parameters       %.1f B (+ %.1f B in MTP modules)\n", p->params_total / G9,
           p->params_mtp / G9);
    printf("weights          %.1f GB (+ %.1f GB MTP)\n", p->weights_total / G9,
           p->weights_mtp / G9);
    printf("per GPU (x %d)    %.1f GB: %.1f GB replicated + %d of %d experts per MoE layer%s\n",
           o->gpus, p->weights_per_gpu / G9, p->weights_replicated / G9, p->experts_per_gpu,
           c->n_routed_experts, o->mtp ? " + MTP" : "");
    printf("KV cache         %s: %.0f B per token (%d layers)\n", grpo_kv_dtype_name(o->kv_dtype),
           p->kv_bytes_per_token, c->num_hidden_layers);
    if (!p->fits) {
        printf("does not fit: %.1f GB of weights per GPU exceed %.2f x %.1f GB\n",
               p->weights_per_gpu / G9, o->mem_fraction, o->gpu_mem_bytes / G9);
        return;
    }
    printf("KV memory        %.1f GB per GPU: %lld tokens per GPU, %lld in all\n",
           p->kv_bytes_per_gpu / G9, (long long)p->tokens_per_gpu, (long long)p->tokens_total);
    printf("groups           G = %d at %lld tokens per sample (%lld shared): %lld tokens each; "
           "%lld per GPU, %lld in all\n",
           o->group, (long long)o->ctx, (long long)o->prompt, (long long)p->tokens_per_group,
           (long long)p->groups_per_gpu, (long long)p->groups_total);
    printf("longest context  %lld tokens per sample with one group of %d on a GPU\n",
           (long long)p->max_ctx_at_group, o->group);
}

int
grpo_cmd_plan(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return CLI_OK;
    }
    plan_args a;
    int rc = parse_args(&a, argc, argv);
    if (rc != 0)
        return rc;
    char path[4096];
    if (a.model)
        snprintf(path, sizeof path, "%s/config.json", a.model);
    else
        snprintf(path, sizeof path, "%s", a.config);
    char *text = NULL;
    size_t len = 0;
    grpo_model_config c;
    grpo_plan p;
    grpo_err err = grpo__read_file(path, 4u << 20, &text, &len);
    if (err == GRPO_OK)
        err = grpo_model_config_parse(&c, text, len, path);
    free(text);
    if (err == GRPO_OK)
        err = grpo_plan_compute(&c, &a.o, &p);
    if (err != GRPO_OK)
        return cli_fail(CMD);
    print_plan(&a, &c, &p);
    return CLI_OK;
}
