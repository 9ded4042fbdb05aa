/* Weight updates: checking a safetensors file (sha256 and a well-formed header) before the engine
 * is told about it. */
#include "trainer_bridge/bridge_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

static grpo_err
read_header(FILE *f, const char *path, uint64_t size, char **json, uint64_t *hl)
{
    uint8_t n8[8];
    *json = NULL;
    if (size < 8 || fread(n8, 1, 8, f) != 8)
        return grpo__fail(GRPO_EFORMAT, "%s: too short for safetensors", path);
    *hl = grpo_bridge__get_u64(n8);
    if (*hl > GRPO_BATCH_MAX_HEADER * 8 || *hl > size - 8)
        return grpo__fail(GRPO_EFORMAT, "%s: header length %llu is larger than the file", path,
                          (unsigned long long)*hl);
    *json = malloc(*hl ? *hl : 1);
    if (*json == NULL)
        return grpo__fail(GRPO_ENOMEM, "%s: out of memory", path);
    if (fread(*json, 1, *hl, f) != *hl)
        return grpo__fail(GRPO_EIO, "%s: short read of the header", path);
    return GRPO_OK;
}

grpo_err
grpo_bridge_weights_verify(const char *path, const char *sha256_hex, uint64_t *bytes_out)
{
    grpo_err err;
    struct stat st;
    char *json = NULL, hex[65];
    uint64_t hl = 0;
    st_file sf;
    if (stat(path, &st) != 0)
        return grpo__fail_errno(grpo__err_from_errno(errno), errno, "weights %s", path);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return grpo__fail_errno(grpo__err_from_errno(errno), errno, "weights %s", path);
    err = read_header(f, path, (uint64_t)st.st_size, &json, &hl);
    fclose(f);
    if (err != GRPO_OK)
        goto done;
    if ((err = grpo_bridge__st_parse_header(json, (size_t)hl, (uint64_t)st.st_size - 8 - hl, path,
                                            &sf)) != GRPO_OK)
        goto done;
    grpo_bridge__st_free(&sf);
    if (sha256_hex != NULL) {
        if ((err = grpo_sha256_file(path, hex)) != GRPO_OK)
            goto done;
        if (strcasecmp(hex, sha256_hex) != 0) {
            err = grpo__fail(GRPO_EFORMAT, "weights %s: sha256 is %s; expected %s", path, hex,
                             sha256_hex);
            goto done;
        }
    }
    if (bytes_out)
        *bytes_out = (uint64_t)st.st_size;
done:
    free(json);
    return err;
}
