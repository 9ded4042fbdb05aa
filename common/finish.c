/* The names of the one finish-reason enum (grpo_finish), as the store and the JSONL write them. */
#include "grpo/common.h"

#include <string.h>

static const char *const names[] = {"running", "eos", "stop", "length", "abort"};

const char *
grpo_finish_name(grpo_finish f)
{
    return f >= GRPO_FINISH_EOS && f <= GRPO_FINISH_ABORT ? names[f] : names[0];
}

grpo_finish
grpo_finish_parse(const char *name)
{
    for (int f = GRPO_FINISH_EOS; name && f <= GRPO_FINISH_ABORT; f++)
        if (strcmp(name, names[f]) == 0)
            return (grpo_finish)f;
    return GRPO_FINISH_NONE;
}
