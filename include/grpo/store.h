/* grpo/store.h: the SQLite provenance store and stats queries (issue 2). */
#ifndef GRPO_STORE_H
#define GRPO_STORE_H

#include "grpo/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif
#endif
