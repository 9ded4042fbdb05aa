/* `grpo bench run --tools`: run A's tool calls kept by (prompt, sample), and the turns hook that
 * answers run B's at once with them (cli/bench_tools.c). */
#ifndef GRPO_CLI_BENCH_TOOLS_H
#define GRPO_CLI_BENCH_TOOLS_H

#include "common/common_int.h"
#include "grpo/run.h"

#include <pthread.h>

typedef struct bench_tools bench_tools;

/* A table for the prompts of ps and G samples each. The caller owns *out (also on failure). */
grpo_err bench_tools_create(bench_tools **out, const grpo_prompt_set *ps, int32_t G);
void bench_tools_destroy(bench_tools *b);
/* Keeps the turns of g's samples not kept yet (A's score step; thread-safe). */
grpo_err bench_tools_keep(bench_tools *b, const grpo_run_group *g);
/* The hook for run B, reset to the first turn of every sample (valid while b lives). */
const grpo_rollout_turns *bench_tools_hook(bench_tools *b);

#endif
