/* `grpo bench store`: placeholder until issue 2 lands. */
#include "cli/cli.h"

int
grpo_bench_store(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_not_built("bench store", "issue 2");
}
