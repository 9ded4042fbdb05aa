/* The framing of transport messages (a 32-byte header, JSON, payload) and the one place where
 * NNG error codes become grpo_err. */
#include "trainer_bridge/bridge_int.h"

#include <nng/nng.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define HUGE_HINT_BYTES ((size_t)4 << 20) /* two 2 MiB pages: smaller bodies stay as they are */

void
grpo_bridge__msg_header(uint8_t hdr[GRPB_HDR], int type, int64_t a, int64_t b, size_t json_len)
{
    memset(hdr, 0, GRPB_HDR);
    memcpy(hdr, GRPB_MAGIC, 4);
    hdr[4] = GRPB_VERSION;
    hdr[5] = (uint8_t)type;
    grpo_bridge__put_u64(hdr + 8, (uint64_t)a);
    grpo_bridge__put_u64(hdr + 16, (uint64_t)b);
    for (int i = 0; i < 4; i++)
        hdr[24 + i] = (uint8_t)((uint32_t)json_len >> (8 * i));
}

void
grpo_bridge__hint_huge(void *p, size_t len)
{
    if (p == NULL || len < HUGE_HINT_BYTES)
        return;
    /* only whole pages inside [p, p + len): the hint never reaches memory that is not ours */
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)p, hi = lo + len;
    lo = (lo + pg - 1) / pg * pg;
    hi = hi / pg * pg;
    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE); /* a hint: refused is fine */
}

int
grpo_bridge__msg_alloc(nng_msg **m, size_t len)
{
    int rv = nng_msg_alloc(m, len);
    if (rv == 0)
        grpo_bridge__hint_huge(nng_msg_body(*m), len);
    return rv;
}

grpo_err
grpo_bridge__msg_parse(const void *buf, size_t len, grpb_msg *m)
{
    const uint8_t *p = buf;
    memset(m, 0, sizeof *m);
    if (len < GRPB_HDR || memcmp(p, GRPB_MAGIC, 4) != 0)
        return grpo__fail(GRPO_EFORMAT, "bridge: message of %zu bytes without the GRPB header",
                          len);
    if (p[4] != GRPB_VERSION)
        return grpo__fail(GRPO_EVERSION, "bridge: peer speaks protocol %u; this build speaks %d",
                          p[4], GRPB_VERSION);
    uint32_t jl = 0;
    for (int i = 0; i < 4; i++)
        jl |= (uint32_t)p[24 + i] << (8 * i);
    if (jl > len - GRPB_HDR)
        return grpo__fail(GRPO_EFORMAT, "bridge: JSON length %u exceeds the message", jl);
    m->type = p[5];
    m->a = (int64_t)grpo_bridge__get_u64(p + 8);
    m->b = (int64_t)grpo_bridge__get_u64(p + 16);
    m->json = (const char *)p + GRPB_HDR;
    m->json_len = jl;
    m->payload = p + GRPB_HDR + jl;
    m->payload_len = len - GRPB_HDR - jl;
    return GRPO_OK;
}

grpo_err
grpo_bridge__nng_fail(int rv, const char *what, const char *url)
{
    grpo_err code = rv == NNG_ETIMEDOUT ? GRPO_ETIMEOUT
                    : rv == NNG_ECLOSED ? GRPO_ECANCELED
                                        : GRPO_ENET;
    return grpo__fail(code, "bridge %s: %s: %s", url ? url : "", what, nng_strerror(rv));
}
