/* The one mapping from the engine's finish reason (grpo_rollout_finish) to the store's
 * (grpo_finish_reason), shared by rollout, replay and serve. */
#include "cli/cli.h"

int
cli_store_finish(int32_t rollout_finish)
{
    switch (rollout_finish) {
    case GRPO_ROLLOUT_FINISH_EOS:
        return GRPO_FINISH_EOS;
    case GRPO_ROLLOUT_FINISH_STOP:
        return GRPO_FINISH_STOP;
    case GRPO_ROLLOUT_FINISH_LENGTH:
        return GRPO_FINISH_LENGTH;
    default: /* ABORT, and NONE (never finished) */
        return GRPO_FINISH_ABORT;
    }
}
