/* A file spool implementing grpo_bridge_persist: one file per unacknowledged batch
 * (dir/<id>.batch, written atomically) and an empty dir/<id>.ack marker once acknowledged.
 * For tests and single-host runs; the CLI wires the SQLite store into the same interface. */
#include "trainer_bridge/bridge_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct grpo_bridge_spool {
    char *dir;
};

static void
spool_path(const grpo_bridge_spool *s, int64_t id, const char *ext, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%020" PRId64 ".%s", s->dir, id, ext);
}

grpo_err
grpo_bridge_spool_open(grpo_bridge_spool **out, const char *dir)
{
    *out = NULL;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return grpo__fail_errno(grpo__err_from_errno(errno), errno, "spool %s: mkdir", dir);
    grpo_bridge_spool *s = calloc(1, sizeof *s);
    if (s == NULL || (s->dir = strdup(dir)) == NULL) {
        free(s);
        return grpo__fail(GRPO_ENOMEM, "spool: out of memory");
    }
    *out = s;
    return GRPO_OK;
}

void
grpo_bridge_spool_close(grpo_bridge_spool *s)
{
    if (s == NULL)
        return;
    free(s->dir);
    free(s);
}

static int
sp_is_acked(void *ctx, int64_t id)
{
    char p[4096];
    spool_path(ctx, id, "ack", p, sizeof p);
    return access(p, F_OK) == 0;
}

static grpo_err
sp_put(void *ctx, int64_t id, const void *bytes, size_t len)
{
    char p[4096];
    if (sp_is_acked(ctx, id))
        return GRPO_OK;
    spool_path(ctx, id, "batch", p, sizeof p);
    return grpo__write_file_atomic(p, bytes, len);
}

static grpo_err
sp_ack(void *ctx, int64_t id)
{
    char a[4096], b[4096];
    spool_path(ctx, id, "ack", a, sizeof a);
    spool_path(ctx, id, "batch", b, sizeof b);
    int fd = open(a, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0)
        return grpo__fail_errno(grpo__err_from_errno(errno), errno, "spool %s: create", a);
    fsync(fd);
    close(fd);
    if (unlink(b) != 0 && errno != ENOENT)
        return grpo__fail_errno(grpo__err_from_errno(errno), errno, "spool %s: unlink", b);
    return GRPO_OK;
}

/* Ids of the files with extension ext, sorted. */
static grpo_err
scan(const grpo_bridge_spool *s, const char *ext, int64_t **ids, size_t *n)
{
    DIR *d = opendir(s->dir);
    size_t cap = 0;
    *ids = NULL;
    *n = 0;
    if (d == NULL)
        return grpo__fail_errno(grpo__err_from_errno(errno), errno, "spool %s: opendir", s->dir);
    struct dirent *e;
    size_t el = strlen(ext);
    while ((e = readdir(d)) != NULL) {
        size_t nl = strlen(e->d_name);
        char *end = NULL;
        if (nl != 21 + el || strcmp(e->d_name + 21, ext) != 0 || e->d_name[20] != '.')
            continue;
        long long v = strtoll(e->d_name, &end, 10);
        if (end != e->d_name + 20)
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            int64_t *t = realloc(*ids, cap * sizeof *t);
            if (t == NULL) {
                closedir(d);
                return grpo__fail(GRPO_ENOMEM, "spool: out of memory");
            }
            *ids = t;
        }
        (*ids)[(*n)++] = v;
    }
    closedir(d);
    for (size_t i = 1; i < *n; i++) /* insertion sort: spools hold a window of batches */
        for (size_t j = i; j > 0 && (*ids)[j - 1] > (*ids)[j]; j--) {
            int64_t t = (*ids)[j];
            (*ids)[j] = (*ids)[j - 1];
            (*ids)[j - 1] = t;
        }
    return GRPO_OK;
}

static grpo_err
sp_list(void *ctx, grpo_bridge_unacked_fn fn, void *arg)
{
    int64_t *ids;
    size_t n;
    grpo_err err = scan(ctx, "batch", &ids, &n);
    for (size_t i = 0; i < n && err == GRPO_OK; i++) {
        char p[4096], *buf = NULL;
        size_t len = 0;
        if (sp_is_acked(ctx, ids[i]))
            continue;
        spool_path(ctx, ids[i], "batch", p, sizeof p);
        if ((err = grpo__read_file(p, 0, &buf, &len)) == GRPO_OK)
            err = fn(arg, ids[i], buf, len);
        free(buf);
    }
    free(ids);
    return err;
}

void
grpo_bridge_spool_persist(grpo_bridge_spool *s, grpo_bridge_persist *p)
{
    memset(p, 0, sizeof *p);
    p->ctx = s;
    p->put = sp_put;
    p->ack = sp_ack;
    p->list_unacked = sp_list;
    p->is_acked = sp_is_acked;
}

int64_t
grpo_bridge_spool_max_id(grpo_bridge_spool *s)
{
    int64_t mx = -1, *ids;
    size_t n;
    const char *exts[2] = {"batch", "ack"};
    for (int k = 0; k < 2; k++) {
        if (scan(s, exts[k], &ids, &n) != GRPO_OK)
            continue;
        if (n && ids[n - 1] > mx)
            mx = ids[n - 1];
        free(ids);
    }
    return mx;
}
