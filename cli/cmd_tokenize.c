/* `grpo tokenize`: placeholder until issue 4 lands. */
#include "cli/cli.h"

int
grpo_cmd_tokenize(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_not_built("tokenize", "issue 4");
}
