/* grpo/verify.h: the built-in verifiers (math, format, code), the plugin host, and reward
 * composition over them. Each verifier is a grpo_verifier_api table (grpo/verifier.h). */
#ifndef GRPO_VERIFY_H
#define GRPO_VERIFY_H

#include "grpo/common.h"
#include "grpo/verifier.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Built-in verifier tables (static; never freed). */
const grpo_verifier_api *grpo_verifier_math(void);   /* verifiers/math (issue 7) */
const grpo_verifier_api *grpo_verifier_format(void); /* verifiers/format.c (issue 7) */
const grpo_verifier_api *grpo_verifier_code(void);   /* verifiers/code (issue 6) */

/* A verifier plugin loaded from a shared object. By default it runs in a sandboxed worker
 * process, so a crash, a hang or a leak is contained and reported as a verdict; in_process = 1
 * calls it directly (trusted, fast plugins). grpo_plugin_api() gives a table with the same shape
 * as the plugin's own whose calls go through the worker. */
typedef struct grpo_plugin grpo_plugin;
grpo_err grpo_plugin_load(grpo_plugin **out, const char *path, int in_process); /* issue 6 */
const grpo_verifier_api *grpo_plugin_api(grpo_plugin *p);
void grpo_plugin_destroy(grpo_plugin *p);

#ifdef __cplusplus
}
#endif
#endif
