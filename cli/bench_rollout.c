/* `grpo bench rollout`: placeholder until issue 5 lands. */
#include "cli/cli.h"

int
grpo_bench_rollout(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_not_built("bench rollout", "issue 5");
}
