/* `grpo serve`: placeholder until issue 11 lands. */
#include "cli/cli.h"

int
grpo_cmd_serve(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_not_built("serve", "issue 11");
}
