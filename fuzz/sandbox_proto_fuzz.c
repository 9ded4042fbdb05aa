/* libFuzzer: the sandbox worker protocol decoders (sandbox/proto.c) on arbitrary bytes. The
 * first byte picks the frame: a RUN/SPAWN command spec (what a worker decodes) or a result (what
 * the client decodes from a worker). A decode either fails with a message (a spec is then freed
 * by sbx_spec_fini, as the worker does; a result holds nothing) or yields one whose strings and
 * arrays are all readable up to their counts. */
#include "sandbox/sandbox_int.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t sink;

static void
touch(const char *s)
{
    if (s != NULL)
        sink += strlen(s);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    grpo_rd r = {(const char *)data + 1, size - 1, 0, false};
    if (data[0] & 1) {
        grpo_sandbox_result res;
        if (sbx_result_decode(&r, &res) != GRPO_OK) {
            if (grpo_error_last()[0] == 0)
                abort();
            return 0;
        }
        touch(grpo_sandbox_status_name(res.status));
        if (res.out_len > 0)
            sink += (unsigned char)res.out[res.out_len - 1];
        if (res.err_len > 0)
            sink += (unsigned char)res.err[res.err_len - 1];
        grpo_sandbox_result_fini(&res);
        return 0;
    }
    sbx_spec s;
    if (sbx_spec_decode(&r, &s) != GRPO_OK) {
        if (grpo_error_last()[0] == 0)
            abort();
        sbx_spec_fini(&s);
        return 0;
    }
    for (char **v = s.argv; v != NULL && *v != NULL; v++)
        touch(*v);
    for (char **v = s.envp; v != NULL && *v != NULL; v++)
        touch(*v);
    touch(s.cwd);
    for (int i = 0; i < s.n_files; i++) {
        touch(s.file_names[i]);
        if (s.file_lens[i] > 0)
            sink += (unsigned char)s.file_data[i][s.file_lens[i] - 1];
    }
    for (int i = 0; i < s.n_binds; i++)
        touch(s.bind_src[i]), touch(s.bind_dst[i]);
    if (s.stdin_len > 0)
        sink += (unsigned char)s.stdin_data[s.stdin_len - 1];
    if (s.fn_arg_len > 0)
        sink += (unsigned char)s.fn_arg[s.fn_arg_len - 1];
    sbx_spec_fini(&s);
    return 0;
}
