/* `grpo bench NAME`: dispatches to one benchmark. Benchmarks print tables and compare against a
 * peer measured in the same run; they never decide pass/fail. */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *what;
} bench;

static const bench benches[] = {
    {"store", grpo_bench_store, "store inserts/s and `grpo stats` time on a 1M-completion db"},
    {"forward", grpo_bench_forward, "prefill and decode tokens/s, weight-read bandwidth"},
    {"gemm", grpo_bench_gemm, "the CPU GEMM (FP8/BF16/F32 weights) against OpenBLAS sgemm"},
    {"tokenize", grpo_bench_tokenize, "encode throughput against HF tokenizers"},
    {"rollout", grpo_bench_rollout,
     "1 prompt x G=64 vs 64 prompts vs batch-1 decoding vs transformers generate"},
    {"sandbox", grpo_bench_sandbox, "sandboxed runs/s and latency against bubblewrap"},
    {"verify", grpo_bench_verify, "math checks/s against math-verify"},
    {"bridge", grpo_bench_bridge, "batches/s and GB/s over ipc and tcp against a plain socket"},
    {"run", grpo_bench_run, "a whole rollout with its verifiers vs the same run verified at once"},
};

int
grpo_cmd_bench(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        FILE *f = argc < 2 ? stderr : stdout;
        fprintf(f, "usage: grpo bench <name> [options]    (grpo bench <name> --help)\n\n");
        for (size_t i = 0; i < sizeof benches / sizeof benches[0]; i++)
            fprintf(f, "  %-9s %s\n", benches[i].name, benches[i].what);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    for (size_t i = 0; i < sizeof benches / sizeof benches[0]; i++)
        if (strcmp(argv[1], benches[i].name) == 0)
            return benches[i].fn(argc - 1, argv + 1);
    return cli_usage("bench", "unknown benchmark \"%s\"", argv[1]);
}
