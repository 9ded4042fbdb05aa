/* tests/gpu/cjson_min/cjson/cJSON.h: a small JSON reader with the subset of the cJSON API that
 * common/json.c, the model loader and the model tests use. Written for this project (not cJSON's
 * code); built only in GRPO_GPU_ONLY builds on hosts without libcjson-dev (GPU test machines), so
 * the model loader and cuda_model_test exist there. Same names, types and ownership as cJSON. */
#ifndef GRPO_CJSON_MIN_H
#define GRPO_CJSON_MIN_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define cJSON_Invalid (0)
#define cJSON_False (1 << 0)
#define cJSON_True (1 << 1)
#define cJSON_NULL (1 << 2)
#define cJSON_Number (1 << 3)
#define cJSON_String (1 << 4)
#define cJSON_Array (1 << 5)
#define cJSON_Object (1 << 6)

typedef int cJSON_bool;

typedef struct cJSON {
    struct cJSON *next, *prev, *child;
    int type;
    char *valuestring;
    int valueint;
    double valuedouble;
    char *string; /* key, when a member of an object */
} cJSON;

cJSON *cJSON_ParseWithLengthOpts(const char *value, size_t buffer_length,
                                 const char **return_parse_end, cJSON_bool require_null_terminated);
cJSON *cJSON_Parse(const char *value);
void cJSON_Delete(cJSON *item);
char *cJSON_PrintUnformatted(const cJSON *item); /* caller frees with free() */
int cJSON_GetArraySize(const cJSON *array);
cJSON *cJSON_GetArrayItem(const cJSON *array, int index);
cJSON *cJSON_GetObjectItem(const cJSON *object, const char *string);
cJSON *cJSON_GetObjectItemCaseSensitive(const cJSON *object, const char *string);
cJSON_bool cJSON_IsInvalid(const cJSON *item);
cJSON_bool cJSON_IsFalse(const cJSON *item);
cJSON_bool cJSON_IsTrue(const cJSON *item);
cJSON_bool cJSON_IsBool(const cJSON *item);
cJSON_bool cJSON_IsNull(const cJSON *item);
cJSON_bool cJSON_IsNumber(const cJSON *item);
cJSON_bool cJSON_IsString(const cJSON *item);
cJSON_bool cJSON_IsArray(const cJSON *item);
cJSON_bool cJSON_IsObject(const cJSON *item);

#define cJSON_ArrayForEach(element, array)                                                         \
    for (element = (array != NULL) ? (array)->child : NULL; element != NULL; element = element->next)

#ifdef __cplusplus
}
#endif

#endif
