/* `grpo replay`: placeholder until issue 5 lands. */
#include "cli/cli.h"

int
grpo_cmd_replay(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_not_built("replay", "issue 5");
}
