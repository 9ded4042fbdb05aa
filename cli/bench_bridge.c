/* `grpo bench bridge`: placeholder until issue 8 lands. */
#include "cli/cli.h"

int
grpo_bench_bridge(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_not_built("bench bridge", "issue 8");
}
