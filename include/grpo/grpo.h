/* grpo/grpo.h: the whole public API. */
#ifndef GRPO_GRPO_H
#define GRPO_GRPO_H

#include "grpo/common.h"
#include "grpo/model.h"
#include "grpo/tokenizer.h"
#include "grpo/rollout.h"
#include "grpo/sandbox.h"
#include "grpo/verifier.h"
#include "grpo/verify.h"
#include "grpo/bridge.h"
#include "grpo/store.h"
#include "grpo/workers.h"
#include "grpo/run.h"

#endif
