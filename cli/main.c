/* `grpo`: dispatches to one subcommand. Every subcommand parses its own flags and explains them
 * under --help. */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *what;
} subcommand;

static const subcommand subcommands[] = {
    {"rollout", grpo_cmd_rollout, "sample G completions per prompt, verify, record, publish"},
    {"verify", grpo_cmd_verify, "score completions from a JSONL file with the verifiers"},
    {"stats", grpo_cmd_stats, "reward, length and latency statistics from a run's store"},
    {"generate", grpo_cmd_generate, "generate from a model for a quick look"},
    {"tokenize", grpo_cmd_tokenize, "encode or decode text with a tokenizer.json"},
    {"serve", grpo_cmd_serve, "coordinate rollout workers over NNG"},
    {"worker", grpo_cmd_worker, "a rollout worker that pulls prompt groups from `grpo serve`"},
    {"plan", grpo_cmd_plan, "how a model fits on a set of GPUs: weights, KV cache, groups"},
    {"replay", grpo_cmd_replay, "regenerate a recorded completion and check it is bit-identical"},
    {"bench", grpo_cmd_bench,
     "benchmarks: store, forward, tokenize, rollout, sandbox, verify, bridge, run"},
};
#define N_SUB (sizeof subcommands / sizeof subcommands[0])

static void
usage(FILE *f)
{
    fprintf(f, "grpo %s: a GRPO rollout and verification engine\n\n"
               "usage: grpo <command> [options]    (grpo <command> --help for its options)\n\n"
               "commands:\n",
            grpo_version());
    for (size_t i = 0; i < N_SUB; i++)
        fprintf(f, "  %-10s %s\n", subcommands[i].name, subcommands[i].what);
    fprintf(f, "\n  --version  print the version and the build's features\n"
               "  --help     this text\n\n"
               "exit codes: 0 success, 1 runtime failure, 2 usage error\n");
}

int
main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return CLI_OK;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("grpo %s (%s)\n", grpo_version(), grpo_build_features());
        return CLI_OK;
    }
    /* Fork safety (DESIGN.md): commands that may run sandboxed work start the sandbox service
     * now, before anything initialises CUDA or starts threads; workers are forked from it. */
    static const char *const sandboxed[] = {"rollout", "serve", "worker", "verify"};
    for (size_t i = 0; i < sizeof sandboxed / sizeof sandboxed[0]; i++)
        if (strcmp(argv[1], sandboxed[i]) == 0 && !cli_wants_help(argc, argv) &&
            grpo_sandbox_service_start() != GRPO_OK)
            grpo_log(GRPO_LOG_WARN, "sandbox service: %s (workers will be forked directly)",
                     grpo_error_last());
    for (size_t i = 0; i < N_SUB; i++)
        if (strcmp(argv[1], subcommands[i].name) == 0)
            return subcommands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "grpo: unknown command \"%s\" (see grpo --help)\n", argv[1]);
    return CLI_USAGE;
}
