/* `grpo rollout`: placeholder until issue 5 lands. */
#include "cli/cli.h"

int
grpo_cmd_rollout(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_not_built("rollout", "issue 5");
}
