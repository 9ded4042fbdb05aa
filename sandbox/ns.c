/* Namespaces: the clone flags for an isolation set, the uid/gid maps written by the parent (the
 * sandbox runs as uid 1000 inside, mapped to an unprivileged host uid: SBX_HOST_UID_ROOT when we
 * are root, our own uid otherwise), and the probe that finds what this kernel allows. */
#include "sandbox/sandbox_int.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

unsigned long
sbx_ns_clone_flags(uint32_t iso)
{
    unsigned long f = 0;
    if (iso & GRPO_SANDBOX_ISO_USER)
        f |= CLONE_NEWUSER;
    if (iso & GRPO_SANDBOX_ISO_PID)
        f |= CLONE_NEWPID;
    if (iso & GRPO_SANDBOX_ISO_NET)
        f |= CLONE_NEWNET;
    if (iso & GRPO_SANDBOX_ISO_MOUNT)
        f |= CLONE_NEWNS;
    if (iso & GRPO_SANDBOX_ISO_IPC)
        f |= CLONE_NEWIPC;
    if (iso & GRPO_SANDBOX_ISO_UTS)
        f |= CLONE_NEWUTS;
    return f;
}

pid_t
sbx_clone(unsigned long flags)
{
    /* The raw syscall with no new stack behaves like fork(): the child continues here. */
    return (pid_t)syscall(SYS_clone, flags | SIGCHLD, 0, 0, 0, 0);
}

uid_t
sbx_ns_host_uid(void)
{
    return geteuid() == 0 ? (uid_t)SBX_HOST_UID_ROOT : geteuid();
}

uint32_t
grpo_sandbox_host_uid(void)
{
    return (uint32_t)sbx_ns_host_uid();
}

static int
write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    ssize_t n, len = (ssize_t)strlen(text);
    if (fd < 0)
        return -errno;
    n = write(fd, text, (size_t)len);
    int e = errno;
    close(fd);
    return n == len ? 0 : -(n < 0 ? e : EIO);
}

grpo_err
sbx_ns_write_maps(pid_t pid)
{
    char path[64], map[64];
    int rc;
    uid_t host_uid = sbx_ns_host_uid();
    gid_t host_gid = geteuid() == 0 ? (gid_t)SBX_HOST_UID_ROOT : getegid();
    if (geteuid() != 0) { /* unprivileged: gid_map needs setgroups denied */
        snprintf(path, sizeof path, "/proc/%d/setgroups", (int)pid);
        if ((rc = write_file(path, "deny")) != 0 && rc != -ENOENT)
            return grpo__fail_errno(GRPO_ESYS, -rc, "sandbox: writing %s", path);
    }
    snprintf(path, sizeof path, "/proc/%d/uid_map", (int)pid);
    snprintf(map, sizeof map, "%d %u 1\n", SBX_UID_INSIDE, (unsigned)host_uid);
    if ((rc = write_file(path, map)) != 0)
        return grpo__fail_errno(GRPO_ESYS, -rc, "sandbox: writing %s", path);
    snprintf(path, sizeof path, "/proc/%d/gid_map", (int)pid);
    snprintf(map, sizeof map, "%d %u 1\n", SBX_UID_INSIDE, (unsigned)host_gid);
    if ((rc = write_file(path, map)) != 0)
        return grpo__fail_errno(GRPO_ESYS, -rc, "sandbox: writing %s", path);
    return GRPO_OK;
}

/* Tries clone with exactly `flags` (the child exits at once). */
static bool
try_clone(unsigned long flags)
{
    int st = 0;
    pid_t pid = sbx_clone(flags);
    if (pid == 0)
        _exit(0);
    if (pid < 0)
        return false;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* Seccomp and no_new_privs: install a trivial allow-all filter in a child. */
static bool
try_seccomp(void)
{
    int st = 0;
    pid_t pid = fork();
    if (pid == 0) {
        sbx_filter f;
        struct sock_filter allow = BPF_STMT(BPF_RET | BPF_K, 0x7fff0000u /* ALLOW */);
        f.insns = &allow;
        f.len = 1;
        _exit(sbx_seccomp_install(&f) == 0 ? 0 : 1);
    }
    if (pid < 0)
        return false;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* $GRPO_SANDBOX_DISABLE="net,ipc": facilities not to use even where the kernel has them (for a
 * kernel where one misbehaves, and to test the refusal path). */
/* GRPO_SANDBOX_ISO_* bit i is named iso_names[i] (0x100 is not a facility). */
static const char *const iso_names[10] = {"user", "pid",     "net", "mount", "ipc",
                                          "uts",  "seccomp", "nnp", NULL,    "memcg"};

uint32_t
sbx_iso_disabled_by_env(void)
{
    const char *v = getenv("GRPO_SANDBOX_DISABLE");
    uint32_t bits = 0;
    if (v == NULL)
        return 0;
    for (int i = 0; i < 10; i++) {
        if (iso_names[i] == NULL)
            continue;
        size_t n = strlen(iso_names[i]);
        for (const char *p = v; (p = strstr(p, iso_names[i])) != NULL; p += n)
            if ((p == v || p[-1] == ',') && (p[n] == '\0' || p[n] == ','))
                bits |= 1u << i;
    }
    return bits;
}

uint32_t
sbx_probe_here(void)
{
    static uint32_t cached;
    static bool done;
    uint32_t bits = 0;
    if (done)
        return cached;
    if (try_clone(CLONE_NEWUSER)) {
        bits |= GRPO_SANDBOX_ISO_USER;
        /* The others are tried together with a user namespace, as they will be used. */
        static const struct {
            unsigned long f;
            uint32_t bit;
        } each[] = {{CLONE_NEWPID, GRPO_SANDBOX_ISO_PID},
                    {CLONE_NEWNET, GRPO_SANDBOX_ISO_NET},
                    {CLONE_NEWNS, GRPO_SANDBOX_ISO_MOUNT},
                    {CLONE_NEWIPC, GRPO_SANDBOX_ISO_IPC},
                    {CLONE_NEWUTS, GRPO_SANDBOX_ISO_UTS}};
        for (size_t i = 0; i < sizeof each / sizeof each[0]; i++)
            if (try_clone(CLONE_NEWUSER | each[i].f))
                bits |= each[i].bit;
    }
    if (try_seccomp())
        bits |= GRPO_SANDBOX_ISO_SECCOMP | GRPO_SANDBOX_ISO_NNP;
    if (sbx_cg_probe())
        bits |= GRPO_SANDBOX_ISO_MEMCG;
    cached = bits;
    done = true;
    return bits;
}

const char *
grpo_sandbox_iso_str(uint32_t bits, char *buf, size_t n)
{
    size_t off = 0;
    if (n == 0)
        return buf;
    buf[0] = '\0';
    for (int i = 0; i < 10; i++) {
        if (!(bits & (1u << i)) || iso_names[i] == NULL)
            continue;
        int k = snprintf(buf + off, n - off, "%s%s", off ? "," : "", iso_names[i]);
        if (k < 0 || (size_t)k >= n - off)
            break;
        off += (size_t)k;
    }
    if (off == 0)
        snprintf(buf, n, "none");
    return buf;
}
