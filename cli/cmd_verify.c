/* `grpo verify`: placeholder until issues 6 and 7 lands. */
#include "cli/cli.h"

int
grpo_cmd_verify(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_not_built("verify", "issues 6 and 7");
}
