/* `grpo worker`: placeholder until issue 11 lands. */
#include "cli/cli.h"

int
grpo_cmd_worker(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_not_built("worker", "issue 11");
}
