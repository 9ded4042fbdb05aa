/* Mounts: the sandbox's whole filesystem. A small tmpfs becomes the new root (pivot_root); the
 * host's /usr (and /bin, /lib*, /sbin as symlinks or read-only binds), a few /etc files, four
 * /dev nodes and the configured paths are bind-mounted read-only; /tmp is a private size-capped
 * tmpfs owned by the sandbox uid; the old root is detached and the new root remounted read-only.
 * Runs in the child, inside its new user + mount namespaces. */
#include "sandbox/sandbox_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#define OLD "/oldroot"

static const char *const default_ro[] = {"/usr",   "/bin",   "/sbin",   "/lib",
                                         "/lib32", "/lib64", "/libx32", NULL};
static const char *const etc_files[] = {"/etc/ld.so.cache", "/etc/alternatives", "/etc/localtime",
                                        NULL};
static const char *const dev_nodes[] = {"null", "zero", "full", "random", "urandom", NULL};

static int
fail(char *msg, size_t n, int e, const char *fmt, ...)
{
    va_list ap;
    size_t off;
    va_start(ap, fmt);
    vsnprintf(msg, n, fmt, ap);
    va_end(ap);
    off = strlen(msg);
    snprintf(msg + off, n - off, ": %s", strerror(e));
    return -e;
}

/* mkdir -p, inside the new root. */
static int
mkdirs(const char *path, mode_t mode)
{
    char tmp[PATH_MAX];
    size_t n = strlen(path);
    if (n >= sizeof tmp)
        return -ENAMETOOLONG;
    memcpy(tmp, path, n + 1);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(tmp, mode) != 0 && errno != EEXIST)
        return -errno;
    return 0;
}

static unsigned long
locked_flags(const char *path)
{
    struct statvfs sv;
    unsigned long f = 0;
    if (statvfs(path, &sv) != 0)
        return 0;
    if (sv.f_flag & ST_NODEV)
        f |= MS_NODEV;
    if (sv.f_flag & ST_NOEXEC)
        f |= MS_NOEXEC;
    if (sv.f_flag & ST_NOATIME)
        f |= MS_NOATIME;
    if (sv.f_flag & ST_NODIRATIME)
        f |= MS_NODIRATIME;
    if (sv.f_flag & ST_RELATIME)
        f |= MS_RELATIME;
    return f;
}

/* Host paths opened (O_PATH) while the child still had its host identity, so a path under a
 * directory only root may enter (e.g. a plugin under /root) can be bound after we became uid 1000:
 * mounting from /proc/self/fd/N does not walk the original path again. */
#define MAX_PRE 80
static struct {
    const char *path;
    int fd;
} pre[MAX_PRE];
static int n_pre;

static void
pre_open(const char *path, int flags)
{
    if (path == NULL || n_pre == MAX_PRE)
        return;
    int fd = open(path, O_PATH | O_CLOEXEC | flags);
    if (fd >= 0)
        pre[n_pre++] = (typeof(pre[0])){path, fd};
}

void
sbx_mounts_prepare(const sbx_spec *s, char *const *ro_paths)
{
    for (int i = 0; ro_paths && ro_paths[i]; i++)
        pre_open(ro_paths[i], O_NOFOLLOW);
    for (int i = 0; i < s->n_binds; i++)
        pre_open(s->bind_src[i], 0);
}

/* The path to mount from and its stat (no symlink following), by the prepared fd if any. */
static int
source(const char *src, char *from, size_t n, struct stat *st)
{
    for (int i = 0; i < n_pre; i++)
        if (strcmp(pre[i].path, src) == 0) {
            snprintf(from, n, OLD "/proc/self/fd/%d", pre[i].fd);
            return fstat(pre[i].fd, st) == 0 ? 0 : -errno;
        }
    snprintf(from, n, OLD "%s", src);
    return lstat(from, st) == 0 ? 0 : -errno;
}

/* Binds OLD/src onto dst (made to exist as the same kind), read-only unless rw. */
static int
bind(const char *src, const char *dst, bool rw, char *msg, size_t n)
{
    char from[PATH_MAX];
    struct stat st;
    int rc;
    if ((rc = source(src, from, sizeof from, &st)) != 0)
        return fail(msg, n, -rc, "sandbox: bind source %s", src);
    if (S_ISLNK(st.st_mode) && stat(from, &st) != 0)
        return fail(msg, n, errno, "sandbox: bind source %s", src);
    if (S_ISDIR(st.st_mode)) {
        if ((rc = mkdirs(dst, 0755)) != 0)
            return fail(msg, n, -rc, "sandbox: creating mount point %s", dst);
    } else {
        char parent[PATH_MAX];
        snprintf(parent, sizeof parent, "%s", dst);
        char *slash = strrchr(parent, '/');
        if (slash && slash != parent) {
            *slash = '\0';
            if ((rc = mkdirs(parent, 0755)) != 0)
                return fail(msg, n, -rc, "sandbox: creating %s", parent);
        }
        int fd = open(dst, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
        if (fd < 0 && errno != EEXIST)
            return fail(msg, n, errno, "sandbox: creating mount point %s", dst);
        if (fd >= 0)
            close(fd);
    }
    if (mount(from, dst, NULL, MS_BIND | MS_REC, NULL) != 0)
        return fail(msg, n, errno, "sandbox: bind %s -> %s", src, dst);
    unsigned long fl = MS_REMOUNT | MS_BIND | MS_NOSUID | locked_flags(dst) | (rw ? 0 : MS_RDONLY);
    if (mount(NULL, dst, NULL, fl, NULL) != 0)
        return fail(msg, n, errno, "sandbox: remount %s read-only", dst);
    return 0;
}

/* A host path: a symlink is recreated (e.g. /lib -> usr/lib), a directory or file bound. */
static int
show_path(const char *path, char *msg, size_t n)
{
    char from[PATH_MAX], target[PATH_MAX];
    struct stat st;
    if (source(path, from, sizeof from, &st) != 0)
        return 0; /* absent on this host: fine */
    if (S_ISLNK(st.st_mode)) {
        /* from is the link itself, or /proc/self/fd/N of an O_PATH|O_NOFOLLOW fd of it */
        ssize_t k = strncmp(from, OLD "/proc/self/fd/", strlen(OLD "/proc/self/fd/")) == 0
                        ? readlinkat(atoi(from + strlen(OLD "/proc/self/fd/")), "", target,
                                     sizeof target - 1)
                        : readlink(from, target, sizeof target - 1);
        if (k < 0)
            return fail(msg, n, errno, "sandbox: readlink %s", path);
        target[k] = '\0';
        if (symlink(target, path) != 0 && errno != EEXIST)
            return fail(msg, n, errno, "sandbox: symlink %s", path);
        return 0;
    }
    return bind(path, path, false, msg, n);
}

static int
setup_dev(char *msg, size_t n)
{
    char src[64], dst[64];
    int rc;
    if (mkdir("/dev", 0755) != 0)
        return fail(msg, n, errno, "sandbox: mkdir /dev");
    for (int i = 0; dev_nodes[i]; i++) {
        snprintf(src, sizeof src, "/dev/%s", dev_nodes[i]);
        snprintf(dst, sizeof dst, "/dev/%s", dev_nodes[i]);
        if ((rc = bind(src, dst, true, msg, n)) != 0)
            return rc;
    }
    if (symlink("/proc/self/fd", "/dev/fd") != 0 || symlink("/proc/self/fd/0", "/dev/stdin") != 0 ||
        symlink("/proc/self/fd/1", "/dev/stdout") != 0 ||
        symlink("/proc/self/fd/2", "/dev/stderr") != 0)
        return fail(msg, n, errno, "sandbox: /dev symlinks");
    return 0;
}

static int
setup_tmp(const sbx_spec *s, char *msg, size_t n)
{
    char opts[128];
    uint64_t size = s->lim.tmp_bytes ? s->lim.tmp_bytes : (64u << 20);
    /* Files in /tmp are memory the address-space limit does not see: at most an eighth of it. */
    if (s->lim.mem_bytes && size > s->lim.mem_bytes / 8)
        size = s->lim.mem_bytes / 8 > (1u << 20) ? s->lim.mem_bytes / 8 : (1u << 20);
    if (mkdir("/tmp", 0755) != 0)
        return fail(msg, n, errno, "sandbox: mkdir /tmp");
    snprintf(opts, sizeof opts, "size=%llu,nr_inodes=4096,mode=0700,uid=%d,gid=%d",
             (unsigned long long)size, SBX_UID_INSIDE, SBX_UID_INSIDE);
    if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0)
        return fail(msg, n, errno, "sandbox: mount tmpfs on /tmp");
    for (int i = 0; i < s->n_files; i++) {
        char path[PATH_MAX];
        const char *name = s->file_names[i];
        if (name == NULL || name[0] == '\0' || strchr(name, '/') || strcmp(name, "..") == 0 ||
            strcmp(name, ".") == 0)
            return fail(msg, n, EINVAL, "sandbox: bad file name \"%s\"", name ? name : "");
        snprintf(path, sizeof path, "/tmp/%s", name);
        int fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, s->file_modes[i] & 0777);
        if (fd < 0)
            return fail(msg, n, errno, "sandbox: creating /tmp/%s", name);
        const char *p = s->file_data[i];
        size_t left = s->file_lens[i];
        while (left > 0) {
            ssize_t k = write(fd, p, left);
            if (k <= 0) {
                int e = k < 0 ? errno : EIO;
                close(fd);
                return fail(msg, n, e, "sandbox: writing /tmp/%s", name);
            }
            p += k;
            left -= (size_t)k;
        }
        close(fd);
    }
    return 0;
}

int
sbx_mounts_setup(const sbx_spec *s, char *const *ro_paths, char *msg, size_t msg_n)
{
    int rc;
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        return fail(msg, msg_n, errno, "sandbox: making / private");
    /* Any directory will do as the mount point of the new root: it is moved by pivot_root. */
    if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=512,mode=0755") !=
        0)
        return fail(msg, msg_n, errno, "sandbox: mount tmpfs root");
    if (chdir("/tmp") != 0 || mkdir("oldroot", 0700) != 0)
        return fail(msg, msg_n, errno, "sandbox: preparing the new root");
    if (syscall(SYS_pivot_root, ".", "oldroot") != 0)
        return fail(msg, msg_n, errno, "sandbox: pivot_root");
    if (chdir("/") != 0)
        return fail(msg, msg_n, errno, "sandbox: chdir /");
    for (int i = 0; default_ro[i]; i++)
        if ((rc = show_path(default_ro[i], msg, msg_n)) != 0)
            return rc;
    for (int i = 0; ro_paths && ro_paths[i]; i++)
        if ((rc = show_path(ro_paths[i], msg, msg_n)) != 0)
            return rc;
    if (mkdir("/etc", 0755) != 0 && errno != EEXIST)
        return fail(msg, msg_n, errno, "sandbox: mkdir /etc");
    for (int i = 0; etc_files[i]; i++) {
        struct stat st;
        char from[PATH_MAX];
        snprintf(from, sizeof from, OLD "%s", etc_files[i]);
        if (stat(from, &st) == 0 && (rc = bind(etc_files[i], etc_files[i], false, msg, msg_n)) != 0)
            return rc;
    }
    if ((rc = setup_dev(msg, msg_n)) != 0 || (rc = setup_tmp(s, msg, msg_n)) != 0)
        return rc;
    for (int i = 0; i < s->n_binds; i++) {
        const char *dst = s->bind_dst[i] ? s->bind_dst[i] : s->bind_src[i];
        if (s->bind_src[i] == NULL || s->bind_src[i][0] != '/' || dst[0] != '/' ||
            strstr(dst, "..") != NULL || strncmp(dst, OLD, strlen(OLD)) == 0)
            return fail(msg, msg_n, EINVAL, "sandbox: bad bind %s", s->bind_src[i]);
        if ((rc = bind(s->bind_src[i], dst, s->bind_rw[i] != 0, msg, msg_n)) != 0)
            return rc;
    }
    if (mkdir("/proc", 0555) != 0)
        return fail(msg, msg_n, errno, "sandbox: mkdir /proc");
    if (s->mount_proc &&
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2") != 0 &&
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
        return fail(msg, msg_n, errno, "sandbox: mount /proc");
    if (umount2(OLD, MNT_DETACH) != 0 || rmdir(OLD) != 0)
        return fail(msg, msg_n, errno, "sandbox: detaching the old root");
    if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) != 0)
        return fail(msg, msg_n, errno, "sandbox: remount / read-only");
    return 0;
}
