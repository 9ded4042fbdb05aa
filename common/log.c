/* Leveled logging to stderr; the level comes from GRPO_LOG unless set explicitly. */
#include "common/common_int.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int log_level = -1;
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;

static int
level_from_env(void)
{
    const char *e = getenv("GRPO_LOG");
    if (e == NULL)
        return GRPO_LOG_INFO;
    if (strcmp(e, "error") == 0)
        return GRPO_LOG_ERROR;
    if (strcmp(e, "warn") == 0)
        return GRPO_LOG_WARN;
    if (strcmp(e, "debug") == 0)
        return GRPO_LOG_DEBUG;
    return GRPO_LOG_INFO;
}

void
grpo_log_set_level(grpo_log_level level)
{
    __atomic_store_n(&log_level, (int)level, __ATOMIC_RELAXED);
}

grpo_log_level
grpo_log_get_level(void)
{
    int l = __atomic_load_n(&log_level, __ATOMIC_RELAXED);
    if (l < 0) {
        l = level_from_env();
        __atomic_store_n(&log_level, l, __ATOMIC_RELAXED);
    }
    return (grpo_log_level)l;
}

void
grpo_log(grpo_log_level level, const char *fmt, ...)
{
    static const char *const tags[] = {"error", "warn", "info", "debug"};
    if ((int)level > (int)grpo_log_get_level())
        return;
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&log_mu);
    fprintf(stderr, "grpo: %s: %s\n", tags[level], line);
    pthread_mutex_unlock(&log_mu);
}

double
grpo_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
