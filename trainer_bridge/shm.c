/* Same-host payloads: over ipc:// a batch's bytes can travel through a memfd of the publisher
 * that the trainer opens as /proc/PID/fd/FD and reads with one pread, instead of inside NNG
 * messages (NNG 1.5 allocates and zero-fills every message, and each reply costs a copy into it,
 * a copy into the socket and one out of it). The slot's file lives only as long as the
 * publisher's process, so nothing is left behind in /dev/shm when it dies.
 *
 * A slot file is a 64-byte header, then the payload:
 *   0  16-byte random token (the slot's, chosen when it was opened)
 *   16 u64 generation: odd while the publisher rewrites the slot, even when it is stable
 *   24 u64 payload length     32..63 zero
 * The reply names (pid, fd, token, gen, len). The reader checks token, gen and len before its
 * read and gen again after it (a sequence lock): a slot reused for a later batch while a slow
 * second trainer was reading it is detected, never handed out. */
#include "trainer_bridge/bridge_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <stdint.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHM_HDR 64

grpo_err
grpo_bridge__shm_open(grpo_bridge__shm_slot *s)
{
    memset(s, 0, sizeof *s);
    s->fd = memfd_create("grpo-bridge-batch", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (s->fd < 0)
        return grpo__fail_errno(GRPO_ESYS, errno, "bridge: memfd_create");
    /* never smaller: a trainer may then map it without a SIGBUS past a shrunk end */
    if (fcntl(s->fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0) {
        int e = errno;
        close(s->fd);
        s->fd = -1;
        return grpo__fail_errno(GRPO_ESYS, e, "bridge: sealing a batch memfd");
    }
    if (getrandom(s->token, sizeof s->token, 0) != (ssize_t)sizeof s->token) {
        close(s->fd);
        s->fd = -1;
        return grpo__fail_errno(GRPO_ESYS, errno, "bridge: getrandom");
    }
    return GRPO_OK;
}

void
grpo_bridge__shm_close(grpo_bridge__shm_slot *s)
{
    if (s->map != NULL)
        munmap(s->map, s->map_len);
    if (s->fd >= 0)
        close(s->fd);
    s->map = NULL;
    s->map_len = 0;
    s->fd = -1;
}

static void
store_u64(uint8_t *p, uint64_t v)
{
    __atomic_store_n((uint64_t *)(void *)p, v, __ATOMIC_RELEASE); /* little-endian hosts */
}

grpo_err
grpo_bridge__shm_begin(grpo_bridge__shm_slot *s, size_t len, uint8_t **dst)
{
    if (len > SIZE_MAX / 2 - SHM_HDR)
        return grpo__fail(GRPO_ENOMEM, "bridge: a batch of %zu bytes", len);
    size_t need = SHM_HDR + len;
    if (need > s->map_len) { /* grows (by half again) and never shrinks: the pages stay in */
        size_t pg = (size_t)sysconf(_SC_PAGESIZE), cap = s->map_len + s->map_len / 2;
        cap = (cap > need ? cap : need) + pg - 1;
        cap -= cap % pg;
        if (ftruncate(s->fd, (off_t)cap) != 0)
            return grpo__fail_errno(GRPO_ENOMEM, errno, "bridge: growing a batch memfd to %zu",
                                    cap);
        void *m = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
        if (m == MAP_FAILED)
            return grpo__fail_errno(GRPO_ENOMEM, errno, "bridge: mapping a batch memfd");
        if (s->map != NULL)
            munmap(s->map, s->map_len);
        s->map = m;
        s->map_len = cap;
        memcpy(s->map, s->token, 16);
    }
    /* odd: a reader of the previous contents sees the change (its check after the read) */
    store_u64(s->map + 16, s->gen | 1);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    *dst = s->map + SHM_HDR;
    return GRPO_OK;
}

void
grpo_bridge__shm_commit(grpo_bridge__shm_slot *s, size_t len)
{
    s->gen = (s->gen | 1) + 1;
    s->len = len;
    store_u64(s->map + 24, len);
    store_u64(s->map + 16, s->gen); /* after the payload and the length (release stores) */
}

grpo_err
grpo_bridge__shm_write(grpo_bridge__shm_slot *s, const void *bytes, size_t len)
{
    uint8_t *dst = NULL;
    grpo_err err = grpo_bridge__shm_begin(s, len, &dst);
    if (err != GRPO_OK)
        return err;
    if (len)
        memcpy(dst, bytes, len);
    grpo_bridge__shm_commit(s, len);
    return GRPO_OK;
}

const void *
grpo_bridge__shm_payload(const grpo_bridge__shm_slot *s)
{
    return s->map ? s->map + SHM_HDR : NULL;
}

void
grpo_bridge__shm_ref(const grpo_bridge__shm_slot *s, char *json, size_t cap)
{
    char hex[33];
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", s->token[i]);
    snprintf(json, cap,
             "{\"shm\":{\"pid\":%d,\"fd\":%d,\"token\":\"%s\",\"gen\":%" PRIu64 ",\"len\":%zu}}",
             (int)getpid(), s->fd, hex, s->gen, s->len);
}

/* Reads the reference out of a reply's JSON; 0 when it has none (an in-band reply). */
static int
parse_ref(const char *json, size_t jl, int *pid, int *fd, uint8_t token[16], uint64_t *gen,
          uint64_t *len)
{
    cJSON *j = jl ? cJSON_ParseWithLength(json, jl) : NULL;
    const cJSON *r = j ? cJSON_GetObjectItemCaseSensitive(j, "shm") : NULL;
    const cJSON *p = r ? cJSON_GetObjectItemCaseSensitive(r, "pid") : NULL;
    const cJSON *f = r ? cJSON_GetObjectItemCaseSensitive(r, "fd") : NULL;
    const cJSON *t = r ? cJSON_GetObjectItemCaseSensitive(r, "token") : NULL;
    const cJSON *g = r ? cJSON_GetObjectItemCaseSensitive(r, "gen") : NULL;
    const cJSON *l = r ? cJSON_GetObjectItemCaseSensitive(r, "len") : NULL;
    int ok = cJSON_IsNumber(p) && cJSON_IsNumber(f) && cJSON_IsString(t) && cJSON_IsNumber(g) &&
             cJSON_IsNumber(l) && strlen(t->valuestring) == 32 && p->valuedouble >= 1 &&
             p->valuedouble < 4194305 && f->valuedouble >= 0 && f->valuedouble < 1 << 30 &&
             g->valuedouble >= 0 && g->valuedouble < 9e15 && l->valuedouble >= 0 &&
             l->valuedouble < 9e15;
    for (int i = 0; ok && i < 16; i++) {
        unsigned v;
        ok = sscanf(t->valuestring + 2 * i, "%2x", &v) == 1;
        token[i] = (uint8_t)v;
    }
    if (ok) {
        *pid = (int)p->valuedouble;
        *fd = (int)f->valuedouble;
        *gen = (uint64_t)g->valuedouble;
        *len = (uint64_t)l->valuedouble;
    }
    int had = r != NULL;
    cJSON_Delete(j);
    return ok ? 1 : had ? -1 : 0;
}

static int
pread_full(int fd, void *buf, size_t n, off_t off)
{
    for (size_t got = 0; got < n;) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, off + (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

static int
hdr_matches(const uint8_t h[SHM_HDR], const uint8_t token[16], uint64_t gen, uint64_t len)
{
    return memcmp(h, token, 16) == 0 && grpo_bridge__get_u64(h + 16) == gen &&
           grpo_bridge__get_u64(h + 24) == len;
}

/* The mapping kept in maps of the slot (pid, fd, token), or NULL (a batch's copy then comes out
 * of memory already mapped, where a pread looks every 4 KiB page up in the file). */
static grpo_bridge__shm_map *
map_find(grpo_bridge__shm_maps *maps, int pid, int fd, const uint8_t token[16])
{
    for (int i = 0; i < GRPO_BRIDGE__SHM_MAPS; i++) {
        grpo_bridge__shm_map *e = &maps->m[i];
        if (e->map && e->pid == pid && e->fd == fd && memcmp(e->token, token, 16) == 0)
            return e;
    }
    return NULL;
}

/* Maps the slot open as f (at least SHM_HDR + len bytes) into m (that slot's entry, mapped too
 * short before) or into the entry next in turn; NULL for a file not sealed against shrinking
 * (read it with pread). */
static grpo_bridge__shm_map *
map_new(grpo_bridge__shm_maps *maps, grpo_bridge__shm_map *m, int pid, int fd, int f,
        const uint8_t token[16], uint64_t len)
{
    struct stat st;
    int seals = fcntl(f, F_GET_SEALS);
    if (seals < 0 || !(seals & F_SEAL_SHRINK) || fstat(f, &st) != 0 ||
        (uint64_t)st.st_size < SHM_HDR + len)
        return NULL;
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, f, 0);
    if (p == MAP_FAILED)
        return NULL;
    if (m == NULL) /* the entries in turn: the free ones come first */
        m = &maps->m[maps->next++ % GRPO_BRIDGE__SHM_MAPS];
    if (m->map)
        munmap(m->map, m->len);
    m->map = p;
    m->len = (size_t)st.st_size;
    m->pid = pid;
    m->fd = fd;
    memcpy(m->token, token, 16);
    return m;
}

void
grpo_bridge__shm_maps_fini(grpo_bridge__shm_maps *maps)
{
    for (int i = 0; i < GRPO_BRIDGE__SHM_MAPS; i++)
        if (maps->m[i].map)
            munmap(maps->m[i].map, maps->m[i].len);
    memset(maps, 0, sizeof *maps);
}

static uint64_t
load_u64(const uint8_t *p)
{
    return __atomic_load_n((const uint64_t *)(const void *)p, __ATOMIC_ACQUIRE);
}

/* The sequence-locked read out of a mapping: header, payload, header again. */
static grpo_err
read_mapped(const grpo_bridge__shm_map *m, const uint8_t token[16], uint64_t gen, uint64_t len,
            grpo_buf *out)
{
    if (memcmp(m->map, token, 16) != 0)
        return grpo__fail(GRPO_EIO, "bridge: a mapped slot is not the publisher's batch file");
    if (load_u64(m->map + 16) != gen || load_u64(m->map + 24) != len)
        return grpo__fail(GRPO_ESTATE, "bridge: the shared batch changed before it was read");
    grpo_err err = grpo__buf_reserve(out, (size_t)len ? (size_t)len : 1);
    if (err != GRPO_OK)
        return err;
    memcpy(out->data, m->map + SHM_HDR, (size_t)len);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (load_u64(m->map + 16) != gen || load_u64(m->map + 24) != len)
        return grpo__fail(GRPO_ESTATE, "bridge: the shared batch changed while it was read");
    out->len = (size_t)len;
    return GRPO_OK;
}

grpo_err
grpo_bridge__shm_read(const char *json, size_t json_len, size_t max_len,
                      grpo_bridge__shm_maps *maps, grpo_buf *out, int *referenced)
{
    int pid = 0, fd = -1;
    uint8_t token[16], h[SHM_HDR];
    uint64_t gen = 0, len = 0;
    int r = parse_ref(json, json_len, &pid, &fd, token, &gen, &len);
    *referenced = r != 0;
    if (r == 0)
        return GRPO_OK;
    if (r < 0)
        return grpo__fail(GRPO_EFORMAT, "bridge: malformed shared-memory reference");
    if (max_len && len > max_len)
        return grpo__fail(GRPO_EFORMAT, "bridge: shared batch of %" PRIu64 " bytes (max %zu)", len,
                          max_len);
    out->len = 0;
    grpo_bridge__shm_map *m = maps ? map_find(maps, pid, fd, token) : NULL;
    if (m != NULL && m->len >= SHM_HDR + len) /* mapped already: nothing to open */
        return read_mapped(m, token, gen, len, out);
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, fd);
    int f = open(path, O_RDONLY | O_CLOEXEC);
    if (f < 0)
        return grpo__fail_errno(GRPO_EIO, errno, "bridge: opening the publisher's batch (%s)",
                                path);
    grpo_err err = GRPO_OK;
    if (maps != NULL && (m = map_new(maps, m, pid, fd, f, token, len)) != NULL) {
        close(f);
        return read_mapped(m, token, gen, len, out);
    }
    if (pread_full(f, h, SHM_HDR, 0) != 0 || memcmp(h, token, 16) != 0)
        err = grpo__fail(GRPO_EIO, "bridge: %s is not the publisher's batch file", path);
    else if (!hdr_matches(h, token, gen, len))
        err = grpo__fail(GRPO_ESTATE, "bridge: the shared batch changed before it was read");
    else if ((err = grpo__buf_reserve(out, (size_t)len ? (size_t)len : 1)) == GRPO_OK) {
        if (len && pread_full(f, out->data, (size_t)len, SHM_HDR) != 0)
            err = grpo__fail_errno(GRPO_EIO, errno, "bridge: reading %s", path);
        else if (pread_full(f, h, SHM_HDR, 0) != 0 || !hdr_matches(h, token, gen, len))
            err = grpo__fail(GRPO_ESTATE, "bridge: the shared batch changed while it was read");
        else
            out->len = (size_t)len;
    }
    close(f);
    return err;
}
