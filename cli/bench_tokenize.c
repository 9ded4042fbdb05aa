/* `grpo bench tokenize`: placeholder until issue 4 lands. */
#include "cli/cli.h"

int
grpo_bench_tokenize(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_not_built("bench tokenize", "issue 4");
}
