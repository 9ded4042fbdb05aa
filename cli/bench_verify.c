/* `grpo bench verify`: placeholder until issue 7 lands. */
#include "cli/cli.h"

int
grpo_bench_verify(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_not_built("bench verify", "issue 7");
}
