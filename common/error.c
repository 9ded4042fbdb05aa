/* Error codes and the per-thread message behind grpo_error_last(). */
#include "common/common_int.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

static _Thread_local char last_msg[2048];

const char *
grpo_error_last(void)
{
    return last_msg;
}

void
grpo_error_clear(void)
{
    last_msg[0] = '\0';
}

grpo_err
grpo__fail(grpo_err code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_msg, sizeof last_msg, fmt, ap);
    va_end(ap);
    return code;
}

grpo_err
grpo__fail_errno(grpo_err code, int errno_value, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(last_msg, sizeof last_msg, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof last_msg)
        snprintf(last_msg + n, sizeof last_msg - (size_t)n, ": %s", strerror(errno_value));
    return code;
}

grpo_err
grpo__err_from_errno(int e)
{
    switch (e) {
    case ENOMEM:
        return GRPO_ENOMEM;
    case ENOENT:
    case ENOTDIR:
        return GRPO_ENOTFOUND;
    case EACCES:
    case EPERM:
    case EROFS:
        return GRPO_EPERM;
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
        return GRPO_EFULL;
    case EINVAL:
        return GRPO_EINVAL;
    case ETIMEDOUT:
        return GRPO_ETIMEOUT;
    default:
        return GRPO_EIO;
    }
}

const char *
grpo_err_name(grpo_err err)
{
    static const char *const names[] = {
        "OK",     "EINVAL", "ENOMEM",   "EIO",  "EFORMAT", "ENOTFOUND",  "EUNSUPPORTED",
        "ETIMEOUT", "ESTATE", "EDB",    "ENET", "EVERSION", "EFULL",     "EPERM",
        "ECANCELED", "ESYS", "EINTERNAL"};
    int i = -(int)err;
    if (i < 0 || i >= (int)(sizeof names / sizeof names[0]))
        return "EUNKNOWN";
    return names[i];
}
