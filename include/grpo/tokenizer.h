/* grpo/tokenizer.h: byte-level BPE tokenizer and chat templates (issue 4). */
#ifndef GRPO_TOKENIZER_H
#define GRPO_TOKENIZER_H

#include "grpo/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif
#endif
