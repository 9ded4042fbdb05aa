/* `grpo bench sandbox`: placeholder until issue 6 lands. */
#include "cli/cli.h"

int
grpo_bench_sandbox(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_not_built("bench sandbox", "issue 6");
}
