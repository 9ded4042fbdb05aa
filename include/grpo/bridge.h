/* grpo/bridge.h: advantages, KL, loss terms, batches and the NNG transport (issue 8). */
#ifndef GRPO_BRIDGE_H
#define GRPO_BRIDGE_H

#include "grpo/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif
#endif
