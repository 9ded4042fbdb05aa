/* grpo/verify.h: built-in verifiers, plugin host and reward composition (issues 6 and 7). */
#ifndef GRPO_VERIFY_H
#define GRPO_VERIFY_H

#include "grpo/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif
#endif
