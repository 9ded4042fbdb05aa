/* The environment interface: dispatch to each environment's table (env/env_int.h). */
#include "env/env_int.h"

#include <stdlib.h>
#include <string.h>

void
grpo_env__label(grpo_env_result *s, const char *label)
{
    size_t n = strlen(label);
    if (n >= sizeof s->label)
        n = sizeof s->label - 1;
    memcpy(s->label, label, n);
    s->label[n] = '\0';
}

void
grpo_env_result_fini(grpo_env_result *s)
{
    if (s == NULL)
        return;
    free(s->observation), free(s->info_json);
    memset(s, 0, sizeof *s);
}

const char *
grpo_env_name(const grpo_env *e)
{
    return e->name;
}

int
grpo_env_markers(const grpo_env *e, const grpo_env_marker **out)
{
    *out = e->markers;
    return e->n_markers;
}

grpo_err
grpo_env_reset(grpo_env *e, const char *record_json, grpo_env_episode **out)
{
    *out = NULL;
    grpo_err err = e->ops->reset(e, record_json, out);
    if (err == GRPO_OK)
        (*out)->env = e;
    return err;
}

grpo_err
grpo_env_step(grpo_env_episode *ep, int marker, const char *action, size_t len,
              grpo_env_result *out)
{
    memset(out, 0, sizeof *out);
    double t0 = grpo_now();
    grpo_err err = ep->env->ops->step(ep, marker, action, len, out);
    out->wall_ms = (grpo_now() - t0) * 1e3;
    return err;
}

void
grpo_env_episode_close(grpo_env_episode *ep)
{
    if (ep != NULL)
        ep->env->ops->close(ep);
}

void
grpo_env_destroy(grpo_env *e)
{
    if (e != NULL)
        e->ops->destroy(e);
}
