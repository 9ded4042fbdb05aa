/* What `grpo rollout`, `grpo serve` and `grpo worker` share on the command line: the generation
 * flags (parsing and --help text; they fill a grpo_run_gen) and the bundled-model lookup. The
 * steps of a run are in run/ (grpo/run.h). */
#ifndef GRPO_CLI_RUN_COMMON_H
#define GRPO_CLI_RUN_COMMON_H

#include "grpo/run.h"

#include <getopt.h>
#include <stdio.h>

/* ---- generation flags: --group --max-new-tokens --temperature --top-p --top-k --min-p --seed
 * --stop --stop-id --logprobs --on-bad-line ---- */

/* getopt_long values of the generation flags (a command's own options stay below 1000). */
enum {
    CLI_O_GROUP = 1000,
    CLI_O_MAXNEW,
    CLI_O_TEMP,
    CLI_O_TOPP,
    CLI_O_TOPK,
    CLI_O_MINP,
    CLI_O_SEED,
    CLI_O_STOP,
    CLI_O_STOPID,
    CLI_O_LOGPROBS,
    CLI_O_BADLINE,
    CLI_O_SPEC,
    CLI_O_GEN_END
};

/* The struct option rows of the generation flags, for a command's long_opts[]. */
#define CLI_GEN_LONG_OPTS                                                                          \
    {"group", required_argument, 0, CLI_O_GROUP},                                                  \
        {"max-new-tokens", required_argument, 0, CLI_O_MAXNEW},                                    \
        {"temperature", required_argument, 0, CLI_O_TEMP},                                         \
        {"top-p", required_argument, 0, CLI_O_TOPP}, {"top-k", required_argument, 0, CLI_O_TOPK},  \
        {"min-p", required_argument, 0, CLI_O_MINP}, {"seed", required_argument, 0, CLI_O_SEED},   \
        {"stop", required_argument, 0, CLI_O_STOP},                                                \
        {"stop-id", required_argument, 0, CLI_O_STOPID},                                           \
        {"logprobs", required_argument, 0, CLI_O_LOGPROBS},                                        \
        {"speculative", required_argument, 0, CLI_O_SPEC},                                         \
    {                                                                                              \
        "on-bad-line", required_argument, 0, CLI_O_BADLINE                                         \
    }

/* True when getopt_long's c is one of the generation flags. */
int cli_gen_is_opt(int c);
/* Parses one generation flag; 0, or CLI_USAGE after "grpo CMD: --flag VALUE: ..." on stderr. */
int cli_gen_parse_opt(const char *cmd, grpo_run_gen *g, int c, const char *v);
/* Help lines: --group .. --min-p, then (after the command's own --seed lines) --stop, --stop-id;
 * --logprobs and --on-bad-line. */
void cli_gen_help_sampling(FILE *f);
void cli_gen_help_stops(FILE *f);
void cli_gen_help_logprobs(FILE *f);

/* ---- tool flags: --tools --max-tool-calls --max-turns --max-obs-tokens --tool-time
 * --tool-threads --tools-in-process (they fill a grpo_run_tools) ---- */

enum {
    CLI_O_TOOLS = 1100,
    CLI_O_MAXCALLS,
    CLI_O_MAXTURNS,
    CLI_O_MAXOBS,
    CLI_O_TOOLTIME,
    CLI_O_TOOLTHREADS,
    CLI_O_TOOLSINPROC,
    CLI_O_TOOLS_END
};

#define CLI_TOOLS_LONG_OPTS                                                                        \
    {"tools", required_argument, 0, CLI_O_TOOLS},                                                  \
        {"max-tool-calls", required_argument, 0, CLI_O_MAXCALLS},                                  \
        {"max-turns", required_argument, 0, CLI_O_MAXTURNS},                                       \
        {"max-obs-tokens", required_argument, 0, CLI_O_MAXOBS},                                    \
        {"tool-time", required_argument, 0, CLI_O_TOOLTIME},                                       \
        {"tool-threads", required_argument, 0, CLI_O_TOOLTHREADS},                                 \
    {                                                                                              \
        "tools-in-process", no_argument, 0, CLI_O_TOOLSINPROC                                      \
    }

int cli_tools_is_opt(int c);
/* Parses one tool flag; 0, or CLI_USAGE after "grpo CMD: --flag VALUE: ..." on stderr. */
int cli_tools_parse_opt(const char *cmd, grpo_run_tools *t, int c, const char *v);
void cli_tools_help(FILE *f);

/* Runs getopt_long over argv (argv[0] the subcommand) with opts, calling opt(ctx, c, optarg) for
 * each option; an unknown option, a missing value or a positional argument is a usage error.
 * Returns 0, or the first nonzero opt() result, or CLI_USAGE. */
int cli_getopt(const char *cmd, int argc, char **argv, const struct option *opts,
               int (*opt)(void *ctx, int c, const char *v), void *ctx);
/* Parses a base-10 integer in [lo, hi]; 0, or -1 when s is not one. */
int cli_parse_long(const char *s, long lo, long hi, long *out);
/* "grpo ARGV..." (argv without the program name), for a run's command line; NULL on ENOMEM. */
char *cli_join_argv(int argc, char **argv);
/* Finds the bundled path rel (a model directory holding config.json when want_dir) under the
 * working directory, then the source tree; 1 with its path in out, else 0. */
int cli_bundled(const char *rel, char *out, size_t cap, int want_dir);

#endif
