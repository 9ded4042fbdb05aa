/* `grpo bench forward`: placeholder until issue 3 lands. */
#include "cli/cli.h"

int
grpo_bench_forward(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_not_built("bench forward", "issue 3");
}
