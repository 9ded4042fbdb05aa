/* Memory cgroups: where the host lets us create a child cgroup with the memory controller - cgroup
 * v2 with `memory` delegated to our cgroup, or the v1 memory hierarchy - every sandbox with a
 * memory limit gets a cgroup of its own, created by the worker (outside the sandbox) and joined by
 * the child before it is released. The limit then covers everything the tree holds: every
 * process's pages, memfd and tmpfs pages, pipe and socket buffers, page tables; swap is not
 * allowed. An OOM kill inside the cgroup is the exact "memory-limit" signal. Where no cgroup can
 * be had, the seccomp denials and tmpfs caps stand alone (docs/sandbox.md). */
#include "sandbox/sandbox_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static struct {
    int version;              /* 0: none usable, 1 or 2 */
    char base[PATH_MAX - 64]; /* room for our child cgroups' names */
} g;
static unsigned seq;

static int
write_file(const char *dir, const char *name, const char *text)
{
    char path[PATH_MAX + 64];
    int rc = 0;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t n = strlen(text);
    if (write(fd, text, n) != (ssize_t)n)
        rc = -errno;
    close(fd);
    return rc;
}

/* Reads a small file into buf (NUL-terminated); false when absent. */
static bool
read_file(const char *dir, const char *name, char *buf, size_t n)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t k = read(fd, buf, n - 1);
    close(fd);
    buf[k > 0 ? k : 0] = '\0';
    return k >= 0;
}

static bool
has_word(const char *list, const char *word, char sep)
{
    size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)) != NULL; p += n)
        if ((p == list || p[-1] == sep || p[-1] == ' ') &&
            (p[n] == '\0' || p[n] == sep || p[n] == ' ' || p[n] == '\n'))
            return true;
    return false;
}

/* Our cgroup path in the hierarchy that has `want` ("" for v2, else a v1 controller). */
static bool
own_path(const char *want, char *path, size_t n)
{
    char line[PATH_MAX + 128];
    bool found = false;
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (f == NULL)
        return false;
    while (!found && fgets(line, sizeof line, f)) {
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (c2 == NULL)
            continue;
        *c2 = '\0';
        bool match = want[0] ? has_word(c1 + 1, want, ',')
                             : (c1 == line + 1 && line[0] == '0' && c1[1] == '\0');
        if (match) {
            c2[1 + strcspn(c2 + 1, "\n")] = '\0';
            snprintf(path, n, "%s", c2 + 1);
            found = true;
        }
    }
    fclose(f);
    return found;
}

/* The directory of our own cgroup: the mount of fstype (with super option `opt` for v1) plus our
 * path below the mount's root. */
static bool
own_dir(const char *fstype, const char *opt, const char *path, char *dir, size_t n)
{
    char line[2 * PATH_MAX];
    bool found = false;
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (f == NULL)
        return false;
    while (!found && fgets(line, sizeof line, f)) {
        char root[PATH_MAX], mnt[PATH_MAX], type[64], super[512];
        char *dash = strstr(line, " - ");
        if (dash == NULL || sscanf(line, "%*s %*s %*s %4095s %4095s", root, mnt) != 2 ||
            sscanf(dash + 3, "%63s %*s %511s", type, super) != 2 || strcmp(type, fstype) != 0 ||
            (opt && !has_word(super, opt, ',')))
            continue;
        size_t rl = strcmp(root, "/") == 0 ? 0 : strlen(root);
        if (strncmp(path, root, rl) != 0)
            continue;
        found = snprintf(dir, n, "%s%s", mnt, path + rl) < (int)n;
    }
    fclose(f);
    return found;
}

/* rmdir of a cgroup the kernel may still be tearing down (or bringing up): a few tries. */
static void
rmdir_retry(const char *path)
{
    for (int i = 0; i < 200 && rmdir(path) != 0 && errno == EBUSY; i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

/* Can we make a child cgroup under dir and set its memory limit? */
static bool
try_child(const char *dir, int version)
{
    char probe[PATH_MAX];
    bool ok;
    snprintf(probe, sizeof probe, "%s/grpo-probe-%d", dir, (int)getpid());
    if (mkdir(probe, 0700) != 0 && errno != EEXIST)
        return false;
    ok = write_file(probe, version == 2 ? "memory.max" : "memory.limit_in_bytes", "67108864") == 0;
    rmdir_retry(probe);
    return ok;
}

static bool
probe_v2(void)
{
    char path[PATH_MAX], buf[512];
    if (!own_path("", path, sizeof path) || !own_dir("cgroup2", NULL, path, g.base, sizeof g.base))
        return false;
    if (!read_file(g.base, "cgroup.controllers", buf, sizeof buf) || !has_word(buf, "memory", ' '))
        return false;
    if (!read_file(g.base, "cgroup.subtree_control", buf, sizeof buf) ||
        !has_word(buf, "memory", ' '))
        if (write_file(g.base, "cgroup.subtree_control", "+memory") != 0)
            return false; /* e.g. our cgroup holds processes and is not the root */
    return try_child(g.base, 2);
}

static bool
probe_v1(void)
{
    char path[PATH_MAX];
    return own_path("memory", path, sizeof path) &&
           own_dir("cgroup", "memory", path, g.base, sizeof g.base) && try_child(g.base, 1);
}

bool
sbx_cg_probe(void)
{
    g.version = probe_v2() ? 2 : probe_v1() ? 1 : 0;
    if (g.version == 0)
        g.base[0] = '\0';
    return g.version != 0;
}

grpo_err
sbx_cg_create(sbx_cg *cg, uint64_t limit)
{
    char num[32];
    int rc;
    cg->path[0] = '\0';
    if (g.version == 0 || limit == 0)
        return GRPO_OK;
    snprintf(cg->path, sizeof cg->path, "%s/grpo-%d-%u", g.base, (int)getpid(), ++seq);
    if (mkdir(cg->path, 0700) != 0) {
        rc = errno;
        cg->path[0] = '\0';
        return grpo__fail_errno(GRPO_ESYS, rc, "sandbox: creating a memory cgroup under %s",
                                g.base);
    }
    snprintf(num, sizeof num, "%llu", (unsigned long long)limit);
    if (g.version == 2) {
        rc = write_file(cg->path, "memory.max", num);
        if (rc == 0 && write_file(cg->path, "memory.swap.max", "0") == -EACCES)
            rc = -EACCES;
    } else {
        rc = write_file(cg->path, "memory.limit_in_bytes", num);
        if (rc == 0 && write_file(cg->path, "memory.memsw.limit_in_bytes", num) == -EACCES)
            rc = -EACCES; /* absent without swap accounting: fine */
    }
    if (rc != 0) {
        sbx_cg_destroy(cg);
        return grpo__fail_errno(GRPO_ESYS, -rc, "sandbox: setting a memory cgroup's limit");
    }
    return GRPO_OK;
}

grpo_err
sbx_cg_attach(const sbx_cg *cg, pid_t pid)
{
    char num[32];
    int rc;
    if (cg->path[0] == '\0')
        return GRPO_OK;
    snprintf(num, sizeof num, "%d", (int)pid);
    if ((rc = write_file(cg->path, "cgroup.procs", num)) != 0)
        return grpo__fail_errno(GRPO_ESYS, -rc, "sandbox: moving the child into its cgroup");
    return GRPO_OK;
}

/* The number of OOM kills in the cgroup so far. */
static long
oom_kills(const sbx_cg *cg)
{
    char buf[1024];
    const char *p;
    if (!read_file(cg->path, g.version == 2 ? "memory.events" : "memory.oom_control", buf,
                   sizeof buf))
        return 0;
    p = strstr(buf, "oom_kill ");
    return p ? atol(p + 9) : 0;
}

bool
sbx_cg_oom(const sbx_cg *cg)
{
    return cg->path[0] != '\0' && oom_kills(cg) > 0;
}

void
sbx_cg_destroy(sbx_cg *cg)
{
    if (cg->path[0] == '\0')
        return;
    if (g.version == 2)
        write_file(cg->path, "cgroup.kill", "1");
    rmdir_retry(cg->path); /* the tree is gone once its init is reaped */
    cg->path[0] = '\0';
}
