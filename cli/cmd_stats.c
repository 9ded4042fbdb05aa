/* `grpo stats`: placeholder until issue 2 lands. */
#include "cli/cli.h"

int
grpo_cmd_stats(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_not_built("stats", "issue 2");
}
