/* A hostile verifier plugin for tests/plugin_host_test.c. The config string picks what score()
 * does: "ok", "segv", "loop", "leak" (64 MiB per call, never freed), "exit", "escape" (tries the
 * host's files and network and reports what worked). Built three ways (tests/sandbox.cmake):
 * normal, with ABI major 2 (EVIL_ABI_MAJOR) and without the entry symbol (EVIL_NO_ENTRY). */
#include "grpo/verifier.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef EVIL_ABI_MAJOR
#define EVIL_ABI_MAJOR GRPO_VERIFIER_ABI_MAJOR
#endif

static void *volatile leaked;

static int
evil_init(const char *config, void **state, char **err)
{
    (void)err;
    *state = strdup(config ? config : "ok");
    return *state ? 0 : 1;
}

static int
evil_score(void *state, const grpo_verifier_sample *s, grpo_verdict *out)
{
    const char *mode = state;
    char details[512];
    memset(out, 0, sizeof *out);
    if (strcmp(mode, "segv") == 0) {
        volatile int *p = NULL;
        *p = 1;
    } else if (strcmp(mode, "loop") == 0) {
        for (volatile unsigned x = 0;; x++) { /* unsigned: wraps, no UB under UBSan */
        }
    } else if (strcmp(mode, "leak") == 0) {
        char *p = malloc(64u << 20);
        if (p == NULL)
            abort();
        memset(p, 1, 64u << 20);
        leaked = p; /* escapes: the compiler may not drop the allocation */
    } else if (strcmp(mode, "exit") == 0) {
        exit(0);
    } else if (strcmp(mode, "abort") == 0) {
        abort();
    } else if (strcmp(mode, "escape") == 0) {
        /* the test passes the canary path and a port in the sample's answer: "path port" */
        char path[256] = "", buf[64] = "";
        int port = 0, read_ok = 0, write_ok = 0, conn_ok = 0;
        if (s->answer)
            sscanf(s->answer, "%255s %d", path, &port);
        int fd = open(path, O_RDONLY);
        if (fd >= 0 && read(fd, buf, sizeof buf - 1) > 0)
            read_ok = 1;
        if (fd >= 0)
            close(fd);
        fd = open("/tmp/../usr/plugin_escape", O_CREAT | O_WRONLY, 0644);
        if (fd >= 0) {
            write_ok = 1;
            close(fd);
        }
        int so = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {0};
        sa.sin_family = AF_INET;
        sa.sin_port = htons((unsigned short)port);
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (so >= 0 && connect(so, (struct sockaddr *)&sa, sizeof sa) == 0)
            conn_ok = 1;
        snprintf(details, sizeof details, "{\"read\":%d,\"write\":%d,\"connect\":%d,\"kill\":%d}",
                 read_ok, write_ok, conn_ok, kill(-1, 0) == 0 && getppid() > 1);
        out->details_json = strdup(details);
    }
    out->kind = GRPO_VERDICT_PASS;
    if (strcmp(mode, "badkind") == 0)
        out->kind = (grpo_verdict_kind)99;              /* a kind the host does not know */
    out->score = (double)(s->completion_len % 7) / 7.0; /* something that depends on the input */
    snprintf(out->label, sizeof out->label, "evil-%s", mode);
    if (strncmp(mode, "score:", 6) == 0) /* "score:1e300", "score:nan", ...: that score */
        out->score = strtod(mode + 6, NULL);
    if (strcmp(mode, "badlabel") == 0) /* raw bytes that are not UTF-8 */
        snprintf(out->label, sizeof out->label, "bad\xff\xfe\xc0\xafz\xe2\x82");
    return 0;
}

static void
evil_fini(void *state)
{
    free(state);
}

static const grpo_verifier_api evil_api = {
    EVIL_ABI_MAJOR, 0, sizeof(grpo_verifier_api), "evil", "0.0.1", evil_init, evil_score, evil_fini,
};

#ifndef EVIL_NO_ENTRY
__attribute__((visibility("default"))) const grpo_verifier_api *
grpo_verifier_entry(void)
{
    return &evil_api;
}
#else
__attribute__((visibility("default"))) const grpo_verifier_api *
not_the_entry(void)
{
    return &evil_api;
}
#endif
