/* `grpo generate`: placeholder until issue 3 lands. */
#include "cli/cli.h"

int
grpo_cmd_generate(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_not_built("generate", "issue 3");
}
