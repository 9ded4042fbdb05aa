/* Private declarations shared by the files of env/ (and its tests): the table every environment
 * implements behind grpo_env (include/grpo/env.h). */
#ifndef GRPO_ENV_INT_H
#define GRPO_ENV_INT_H

#include "common/common_int.h"
#include "grpo/env.h"

typedef struct grpo_env_ops {
    /* Fills *ep (an episode object the environment allocates; it must start with a
     * grpo_env_episode header, see below). */
    grpo_err (*reset)(grpo_env *e, const char *record_json, grpo_env_episode **ep);
    grpo_err (*step)(grpo_env_episode *ep, int marker, const char *action, size_t len,
                     grpo_env_result *out);
    void (*close)(grpo_env_episode *ep);
    void (*destroy)(grpo_env *e);
} grpo_env_ops;

/* The common head of every environment; an implementation embeds it first. */
struct grpo_env {
    const grpo_env_ops *ops;
    char name[64];
    grpo_env_marker markers[GRPO_ENV_MAX_MARKERS];
    int n_markers;
};

/* The common head of every episode; an implementation embeds it first. */
struct grpo_env_episode {
    grpo_env *env;
};

/* Sets label (truncated to fit) on a step. */
void grpo_env__label(grpo_env_result *s, const char *label);

#endif
