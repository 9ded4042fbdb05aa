/* Language names of the code verifier. */
#include "verifiers/code/code_int.h"

#include <string.h>
#include <strings.h>

int
grpo_code__lang(const char *name)
{
    if (name == NULL || name[0] == '\0' || strcasecmp(name, "python") == 0 ||
        strcasecmp(name, "python3") == 0 || strcasecmp(name, "py") == 0)
        return CODE_PY;
    if (strcasecmp(name, "c") == 0)
        return CODE_C;
    if (strcasecmp(name, "cpp") == 0 || strcasecmp(name, "c++") == 0 ||
        strcasecmp(name, "cxx") == 0 || strcasecmp(name, "cc") == 0)
        return CODE_CPP;
    return -1;
}

const char *
grpo_code__lang_name(code_lang l)
{
    return l == CODE_C ? "c" : l == CODE_CPP ? "cpp" : "python";
}
