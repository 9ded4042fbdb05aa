/* The `grpo` command: one entry point per subcommand and per benchmark, and the few helpers they
 * share. Exit codes: 0 success, 1 runtime failure, 2 usage error. */
#ifndef GRPO_CLI_H
#define GRPO_CLI_H

#include "grpo/grpo.h"

#define CLI_OK 0
#define CLI_FAIL 1
#define CLI_USAGE 2

int grpo_cmd_rollout(int argc, char **argv);
int grpo_cmd_verify(int argc, char **argv);
int grpo_cmd_stats(int argc, char **argv);
int grpo_cmd_generate(int argc, char **argv);
int grpo_cmd_tokenize(int argc, char **argv);
int grpo_cmd_serve(int argc, char **argv);
int grpo_cmd_worker(int argc, char **argv);
int grpo_cmd_replay(int argc, char **argv);
int grpo_cmd_bench(int argc, char **argv);
int grpo_cmd_plan(int argc, char **argv);

int grpo_bench_store(int argc, char **argv);
int grpo_bench_forward(int argc, char **argv);
int grpo_bench_gemm(int argc, char **argv);
int grpo_bench_tokenize(int argc, char **argv);
int grpo_bench_rollout(int argc, char **argv);
int grpo_bench_sandbox(int argc, char **argv);
int grpo_bench_verify(int argc, char **argv);
int grpo_bench_bridge(int argc, char **argv);
int grpo_bench_run(int argc, char **argv);

/* Prints "grpo CMD: message" to stderr and returns CLI_USAGE. */
int cli_usage(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Prints "grpo CMD: <grpo_error_last()>" to stderr and returns CLI_FAIL. */
int cli_fail(const char *cmd);
/* For subcommands whose issue has not landed yet. */
int cli_not_built(const char *cmd, const char *issue);
/* True when argv holds -h or --help. */
int cli_wants_help(int argc, char **argv);
/* Parses a size like "4096", "64K", "2G" (bytes, powers of 1024). Returns 0 on success. */
int cli_parse_size(const char *s, uint64_t *out);
/* --gpu N of a command that loads a model: refuses it with --threads (want_threads > 0) or in a
 * build without the CUDA backend, else pins the device (CUDA_VISIBLE_DEVICES=N, before anything
 * initialises CUDA) so that the model's CUDA backend (device 0 as visible) runs on it. Returns 0
 * or CLI_USAGE (with the message printed). gpu < 0: nothing to do. */
int cli_select_gpu(const char *cmd, int gpu, int want_threads);

/* --numerics and --kv-dtype of cmd: v into *out (grpo_numerics_parse, grpo_kv_dtype_parse); 0,
 * or the usage error naming the accepted values. */
int cli_numerics_opt(const char *cmd, const char *v, int *out);
int cli_kv_dtype_opt(const char *cmd, const char *v, int *out);
/* --deterministic on|off of cmd: *det = 1 or 0 (it starts at -1, not given). Then, once every
 * option is parsed, cli_deterministic_apply: off turns --numerics fp8 into fp8-nondet; off with
 * exact or q8 (always deterministic), and on with fp8-nondet, are usage errors. */
int cli_deterministic_opt(const char *cmd, const char *v, int *det);
int cli_deterministic_apply(const char *cmd, int det, int *numerics);
#define CLI_HELP_DETERMINISTIC                                                                     \
    "  --deterministic on|off\n"                                                                   \
    "                       on (default): a sample's tokens never depend on what shares\n"         \
    "                       its batch. Only --numerics fp8 with --gpu has a batch-\n"              \
    "                       dependent variant: off selects it (cuBLASLt's GEMMs, which\n"          \
    "                       choose their algorithm from the batch size; recorded as\n"             \
    "                       numerics fp8-nondet); not for RL\n"

#endif
