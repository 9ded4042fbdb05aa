/* rlimits: CPU, address space, file size, open files, processes, and no core dumps. Applied in
 * the child as late as possible (after the last allocation), because a lowered RLIMIT_AS would
 * make our own allocator fail. RLIMIT_NPROC counts processes per (user namespace, uid) since
 * Linux 5.14 (ucounts), and the sandbox runs as a non-root host uid in its own user namespace, so
 * the limit is per sandbox and is not bypassed the way it is for host root. */
#include "sandbox/sandbox_int.h"

#include <errno.h>
#include <sys/resource.h>

static int
set(int res, uint64_t soft, uint64_t hard)
{
    struct rlimit rl = {(rlim_t)soft, (rlim_t)hard};
    if (soft == 0 && hard == 0)
        return 0; /* 0 = leave as is */
    return setrlimit(res, &rl) == 0 ? 0 : -errno;
}

int
sbx_rlimits_apply(const grpo_sandbox_limits *l, bool for_fn)
{
    int rc;
    uint64_t cpu_s = l->cpu_ms ? (l->cpu_ms + 999) / 1000 : 0;
    struct rlimit zero = {0, 0};
    if (setrlimit(RLIMIT_CORE, &zero) != 0)
        return -errno;
    if (cpu_s && (rc = set(RLIMIT_CPU, cpu_s, cpu_s + 1)) != 0)
        return rc;
    if (l->fsize_bytes && (rc = set(RLIMIT_FSIZE, l->fsize_bytes, l->fsize_bytes)) != 0)
        return rc;
    if (l->nofile && (rc = set(RLIMIT_NOFILE, l->nofile, l->nofile)) != 0)
        return rc;
    if (l->nproc && (rc = set(RLIMIT_NPROC, l->nproc, l->nproc)) != 0)
        return rc;
    if ((rc = set(RLIMIT_MEMLOCK, 0, 0)) != 0)
        return rc;
    /* ASan reserves terabytes of shadow address space: an in-process function (plugin worker)
     * cannot run under RLIMIT_AS there; exec'd programs can. */
    if (l->mem_bytes && !(for_fn && SBX_ASAN) &&
        (rc = set(RLIMIT_AS, l->mem_bytes, l->mem_bytes)) != 0)
        return rc;
    return 0;
}
