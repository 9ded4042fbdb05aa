/* grpo/sandbox.h: running untrusted programs (issue 6). */
#ifndef GRPO_SANDBOX_H
#define GRPO_SANDBOX_H

#include "grpo/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif
#endif
