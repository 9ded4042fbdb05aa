/* grpo/rollout.h: sampler and the rollout scheduler (issue 5). */
#ifndef GRPO_ROLLOUT_H
#define GRPO_ROLLOUT_H

#include "grpo/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif
#endif
