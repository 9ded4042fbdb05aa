/* Private declarations of the code verifier (verifiers/code): extraction, test parsing, output
 * comparison, the embedded Python harness, and the plugin host. */
#ifndef GRPO_VERIFY_CODE_INT_H
#define GRPO_VERIFY_CODE_INT_H

#include "common/common_int.h"
#include "grpo/sandbox.h"
#include "grpo/verify.h"
#include <cjson/cJSON.h>
#include <stdbool.h>

typedef enum code_lang { CODE_PY = 0, CODE_C = 1, CODE_CPP = 2 } code_lang;
/* "python"/"py"/NULL -> PY, "c" -> C, "cpp"/"c++"/"cxx" -> CPP; -1 when unknown. */
int grpo_code__lang(const char *name);
const char *grpo_code__lang_name(code_lang l);

/* The last fenced block of the language after "</think>" (or anywhere when there is no think
 * block and the prompt did not open one). An untagged block is used only when no tagged block
 * of the language exists. Returns a malloc'd string, or NULL when there is none. */
char *grpo_code__extract(const char *completion, size_t len, code_lang lang, bool think_open);

/* A parsed `tests` field (APPS input_output convention). */
typedef struct code_tests {
    cJSON *root;
    int n;
    bool call_based;
    const char *fn_name;
    char **inputs;          /* stdin text per test (stdio) */
    char **outputs;         /* expected stdout per test (stdio) */
    const cJSON **args;     /* argument list per test (call-based) */
    const cJSON **expected; /* expected return per test (call-based) */
} code_tests;
grpo_err grpo_code__tests_parse(const char *json, code_tests *t);
void grpo_code__tests_fini(code_tests *t);

/* LiveCodeBench-style stdout comparison: both stripped, split in lines, each line stripped;
 * equal lines pass, else the whitespace-separated tokens must be equal as strings or as
 * numbers within tol (absolute, or relative to the expected value). */
bool grpo_code__stdout_match(const char *got, size_t got_len, const char *want, double tol);
/* Structural JSON equality (types must match; numbers within tol unless both integral). */
bool grpo_code__json_equal(const cJSON *a, const cJSON *b, double tol);

/* The harness preloaded into the Python zygote (harness_py.c). */
extern const char grpo_code__harness_py[];

#endif
