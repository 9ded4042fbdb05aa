/* grpo_model_load: config.json, the safetensors files (single or sharded with an index), the
 * tensor table, the weights, the rope frequencies and the backend. */
#include "rollout/model/model_int.h"
#include "common/json.h"
#ifdef GRPO_MODEL_CUDA
#include "kernels/cuda/cuda_backend.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <unistd.h>
#endif

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int
cmp_tensor(const void *a, const void *b)
{
    return strcmp((*(grpo_st_tensor *const *)a)->name, (*(grpo_st_tensor *const *)b)->name);
}

static int
cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *
join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p != NULL)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int
exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Shard names from the index's weight_map (basenames only), sorted and unique. */
static grpo_err
index_files(const cJSON *idx, const char *where, char ***out, int *n_out)
{
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(idx, "weight_map");
    if (!cJSON_IsObject(wm))
        return grpo__fail(GRPO_EFORMAT, "%s: \"weight_map\" is missing or not an object", where);
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, wm) n++;
    char **v = calloc((size_t)(n > 0 ? n : 1), sizeof *v);
    if (v == NULL)
        return grpo__fail(GRPO_ENOMEM, "%s: out of memory", where);
    int k = 0;
    cJSON_ArrayForEach(e, wm)
    {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/') != NULL || e->valuestring[0] == '.' ||
            e->valuestring[0] == 0) {
            free(v);
            return grpo__fail(GRPO_EFORMAT,
                              "%s: weight_map[\"%s\"] is not a file name in the "
                              "model directory",
                              where, e->string);
        }
        v[k++] = e->valuestring;
    }
    qsort(v, (size_t)k, sizeof *v, cmp_str);
    int u = 0;
    for (int i = 0; i < k; i++)
        if (u == 0 || strcmp(v[u - 1], v[i]) != 0)
            v[u++] = v[i];
    *out = v;
    *n_out = u;
    return GRPO_OK;
}

static grpo_err
open_files(grpo_model *m, char **names, int n)
{
    m->files = calloc((size_t)n, sizeof *m->files);
    if (m->files == NULL)
        return grpo__fail(GRPO_ENOMEM, "model: out of memory");
    for (int i = 0; i < n; i++) {
        char *p = join(m->dir, names[i]);
        if (p == NULL)
            return grpo__fail(GRPO_ENOMEM, "model: out of memory");
        grpo_err err = grpo_model__st_open(&m->files[i], p);
        m->n_files = i + 1;
        free(p);
        if (err != GRPO_OK)
            return err;
    }
    return GRPO_OK;
}

static grpo_err
build_table(grpo_model *m)
{
    int n = 0;
    for (int f = 0; f < m->n_files; f++)
        n += m->files[f].h.n;
    m->by_name = calloc((size_t)(n > 0 ? n : 1), sizeof *m->by_name);
    if (m->by_name == NULL)
        return grpo__fail(GRPO_ENOMEM, "model: out of memory");
    for (int f = 0; f < m->n_files; f++)
        for (int i = 0; i < m->files[f].h.n; i++) {
            m->files[f].h.t[i].file = f;
            m->by_name[m->n_tensors++] = &m->files[f].h.t[i];
        }
    qsort(m->by_name, (size_t)n, sizeof *m->by_name, cmp_tensor);
    for (int i = 1; i < n; i++)
        if (strcmp(m->by_name[i]->name, m->by_name[i - 1]->name) == 0)
            return grpo__fail(GRPO_EFORMAT, "%s: tensor \"%s\" appears twice (also in %s)",
                              m->files[m->by_name[i]->file].path, m->by_name[i]->name,
                              m->files[m->by_name[i - 1]->file].path);
    return GRPO_OK;
}

/* Every weight_map entry must be in the shard it names. */
static grpo_err
check_index(grpo_model *m, const cJSON *idx, const char *where)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(idx, "weight_map"))
    {
        grpo_st_tensor key = {.name = e->string}, *kp = &key;
        grpo_st_tensor **hit =
            bsearch(&kp, m->by_name, (size_t)m->n_tensors, sizeof kp, cmp_tensor);
        if (hit == NULL ||
            strcmp(strrchr(m->files[(*hit)->file].path, '/') + 1, e->valuestring) != 0)
            return grpo__fail(GRPO_ENOTFOUND, "%s: tensor \"%s\" is not in %s/%s", where, e->string,
                              m->dir, e->valuestring);
    }
    return GRPO_OK;
}

static grpo_err
load_files(grpo_model *m)
{
    char *ipath = join(m->dir, "model.safetensors.index.json");
    cJSON *idx = NULL;
    char **names = NULL;
    int n = 0;
    grpo_err err = GRPO_OK;
    if (ipath == NULL)
        return grpo__fail(GRPO_ENOMEM, "model: out of memory");
    if (exists(ipath)) {
        if ((err = grpo__json_parse_file(ipath, 256u << 20, &idx)) != GRPO_OK ||
            (err = index_files(idx, ipath, &names, &n)) != GRPO_OK ||
            (err = open_files(m, names, n)) != GRPO_OK || (err = build_table(m)) != GRPO_OK ||
            (err = check_index(m, idx, ipath)) != GRPO_OK)
            goto done;
    } else {
        char *one = "model.safetensors";
        if ((err = open_files(m, &one, 1)) != GRPO_OK || (err = build_table(m)) != GRPO_OK)
            goto done;
    }
done:
    free(names);
    cJSON_Delete(idx);
    free(ipath);
    return err;
}

/* transformers' _compute_llama3_parameters, in its float32 arithmetic: long wavelengths divided
 * by factor, short ones kept, a smooth blend between. */
static float
llama3_freq(const grpo_model_config *c, float f)
{
    float factor = (float)c->llama3_factor, lo = (float)c->llama3_low_freq_factor;
    float hi = (float)c->llama3_high_freq_factor, old = (float)c->llama3_original_max_position;
    float wavelen = (float)(2 * M_PI) / f;
    double low_wl = (double)c->llama3_original_max_position / c->llama3_low_freq_factor;
    double high_wl = (double)c->llama3_original_max_position / c->llama3_high_freq_factor;
    if (wavelen < high_wl)
        return f;
    if (wavelen > low_wl)
        return f / factor;
    float smooth = (old / wavelen - lo) / (hi - lo);
    return (1 - smooth) * f / factor + smooth * f;
}

/* Rope inverse frequencies, YaRN-corrected as DeepSeek's reference and transformers do (MLA), or
 * over the whole head (GQA), llama3-scaled when configured. */
static grpo_err
rope_init(grpo_model *m)
{
    const grpo_model_config *c = &m->cfg;
    int dim = grpo_model__is_mla(c) ? c->qk_rope_head_dim : c->head_dim, half = dim / 2;
    m->inv_freq = grpo_model__own(m, (size_t)half * sizeof(float));
    if (m->inv_freq == NULL)
        return grpo__fail(GRPO_ENOMEM, "model: out of memory");
    double base = c->rope_theta, low = 0, high = 0;
    if (c->rope_yarn) {
        double orig = c->yarn_original_max_position;
        low = floor(dim * log(orig / (c->yarn_beta_fast * 2 * M_PI)) / (2 * log(base)));
        high = ceil(dim * log(orig / (c->yarn_beta_slow * 2 * M_PI)) / (2 * log(base)));
        low = low < 0 ? 0 : low;
        high = high > dim - 1 ? dim - 1 : high;
        if (low == high)
            high += 0.001;
    }
    for (int i = 0; i < half; i++) {
        float pf = powf((float)base, (float)(2 * i) / (float)dim);
        float extra = 1.0f / pf;
        if (!c->rope_yarn) {
            m->inv_freq[i] = c->rope_llama3 ? llama3_freq(c, extra) : extra;
            continue;
        }
        float inter = 1.0f / ((float)c->yarn_factor * pf);
        float ramp = (float)(((double)i - low) / (high - low));
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        float ef = 1.0f - ramp;
        m->inv_freq[i] = inter * (1.0f - ef) + extra * ef;
    }
    return GRPO_OK;
}

#ifdef GRPO_MODEL_CUDA
static const grpo_cuda_module *cuda_mod;
static char cuda_mod_err[512];

static const grpo_cuda_module *
try_module(const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        snprintf(cuda_mod_err, sizeof cuda_mod_err, "%s", dlerror());
        return NULL;
    }
    const grpo_cuda_module *(*entry)(void) =
        (const grpo_cuda_module *(*)(void))dlsym(h, GRPO_CUDA_MODULE_SYMBOL);
    const grpo_cuda_module *m = entry ? entry() : NULL;
    if (m == NULL || m->abi != GRPO_CUDA_MODULE_ABI || m->table_size != sizeof(grpo_kernels)) {
        snprintf(cuda_mod_err, sizeof cuda_mod_err, "%s: not a CUDA backend module of this build",
                 path);
        dlclose(h);
        return NULL;
    }
    return m; /* kept loaded for the life of the process */
}

/* $GRPO_CUDA_MODULE, else libgrpo_cuda.so beside the running executable, else where the build
 * put it. */
static void
load_module(void)
{
    char exe[PATH_MAX], path[PATH_MAX + 32];
    const char *env = getenv("GRPO_CUDA_MODULE");
    if (env && env[0] && (cuda_mod = try_module(env)) != NULL)
        return;
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = 0;
        snprintf(path, sizeof path, "%s/libgrpo_cuda.so", exe);
        if (access(path, F_OK) == 0 && (cuda_mod = try_module(path)) != NULL)
            return;
    }
    cuda_mod = try_module(GRPO_CUDA_MODULE_PATH);
}

static const grpo_cuda_module *
cuda_module(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, load_module);
    return cuda_mod;
}

grpo_err
grpo_model__backend_status(grpo_model *m)
{
    if (!m->k_cuda)
        return GRPO_OK;
    grpo_err err = cuda_module()->status(m->k);
    return err == GRPO_OK ? GRPO_OK
                          : grpo__fail(err, "model: CUDA backend: %s", cuda_module()->error_last());
}
#else
grpo_err
grpo_model__backend_status(grpo_model *m)
{
    (void)m;
    return GRPO_OK;
}
#endif

grpo_err
grpo_model_backend_check(int backend)
{
    if (backend == 0)
        return GRPO_OK;
    if (backend != 1 && backend != 2)
        return grpo__fail(GRPO_EINVAL, "model: unknown backend %d", backend);
#ifdef GRPO_MODEL_CUDA
    const grpo_cuda_module *cm = cuda_module();
    if (cm == NULL)
        return grpo__fail(GRPO_EUNSUPPORTED, "model: cannot load the CUDA backend: %s",
                          cuda_mod_err);
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (cm->device_count() < 1)
        return grpo__fail(GRPO_EUNSUPPORTED, "model: CUDA backend: no CUDA device is visible%s%s%s",
                          vis ? " (CUDA_VISIBLE_DEVICES=" : "", vis ? vis : "", vis ? ")" : "");
    return GRPO_OK;
#else
    return grpo__fail(GRPO_EUNSUPPORTED, "model: the CUDA backend is not built");
#endif
}

/* The op table: the CPU backend, or the CUDA kernels with the exact GEMM policy (so that a group's
 * completions do not depend on the backend that made them; the fast one for numerics fp8) in
 * staged mode (backend 1: each op copies its operands to the device and back; weights uploaded
 * once; MLA models only) or device-resident (backend 2: op memory on the device; the weights are
 * uploaded at the end of the load). On the CPU, numerics fp8 sets the table's act_round. */
static grpo_err
open_kernels(grpo_model *m, const grpo_model_opts *opts)
{
    if (opts->backend == 0) {
        grpo_err err = grpo_kernels_cpu_create(&m->k, opts->n_threads);
        if (err == GRPO_OK) /* --numerics fp8: the CUDA fast GEMMs' roundings, exact kernels */
            m->k->act_round =
                opts->numerics == GRPO_NUMERICS_FP8 || opts->numerics == GRPO_NUMERICS_FP8_NONDET;
        return err;
    }
#ifdef GRPO_MODEL_CUDA
    if (opts->backend == 1 && !grpo_model__is_mla(&m->cfg))
        return grpo__fail(GRPO_EUNSUPPORTED,
                          "%s: the staged CUDA table (backend 1) has no GQA attention (model_type "
                          "%s): use the device-resident one (backend 2, what --gpu runs)",
                          m->dir, grpo_model_type_name(&m->cfg));
    grpo_err err = grpo_model_backend_check(opts->backend);
    if (err != GRPO_OK)
        return err;
    const grpo_cuda_module *cm = cuda_module();
    int policy = opts->numerics == GRPO_NUMERICS_FP8          ? GRPO_CUDA_GEMM_FAST_DET
                 : opts->numerics == GRPO_NUMERICS_FP8_NONDET ? GRPO_CUDA_GEMM_FAST
                                                              : GRPO_CUDA_GEMM_EXACT;
    err = cm->create(&m->k, 0, opts->backend == 2 ? GRPO_CUDA_DEVICE : GRPO_CUDA_STAGED, policy);
    if (err != GRPO_OK)
        return grpo__fail(err, "model: CUDA backend: %s", cm->error_last());
    m->k_cuda = 1;
    return GRPO_OK;
#else
    return grpo__fail(GRPO_EUNSUPPORTED, "model: the CUDA backend is not built");
#endif
}

grpo_err
grpo_model_load(grpo_model **out, const char *dir, const grpo_model_opts *opts)
{
    grpo_model_opts defaults = {0, 0, 1, 0, 0};
    if (opts == NULL)
        opts = &defaults;
    *out = NULL;
#ifndef GRPO_MODEL_CUDA
    if (opts->backend != 0)
        return grpo__fail(GRPO_EUNSUPPORTED,
                          "model: backend %d: the CUDA backend is not built (CPU only)",
                          opts->backend);
#endif
    if (opts->backend < 0 || opts->backend > 2)
        return grpo__fail(GRPO_EINVAL, "model: unknown backend %d", opts->backend);
    if (opts->numerics < GRPO_NUMERICS_EXACT || opts->numerics > GRPO_NUMERICS_FP8_NONDET)
        return grpo__fail(GRPO_EINVAL, "model: unknown numerics %d", opts->numerics);
    if (opts->numerics == GRPO_NUMERICS_Q8 && opts->backend != 0)
        return grpo__fail(GRPO_EUNSUPPORTED, "model: numerics q8 is a CPU backend option");
    if (opts->kv_dtype < GRPO_KV_F32 || opts->kv_dtype > GRPO_KV_FP8)
        return grpo__fail(GRPO_EINVAL, "model: unknown kv dtype %d", opts->kv_dtype);
    if (opts->kv_dtype != GRPO_KV_F32 && opts->backend == 1)
        return grpo__fail(GRPO_EUNSUPPORTED,
                          "model: kv dtype %s: the staged CUDA table reads f32 caches only (the "
                          "device-resident model, backend 2, takes every dtype)",
                          grpo_kv_dtype_name(opts->kv_dtype));
    grpo_model *m = calloc(1, sizeof *m);
    if (m == NULL || (m->dir = strdup(dir)) == NULL) {
        free(m);
        return grpo__fail(GRPO_ENOMEM, "model: out of memory");
    }
    char *cpath = join(dir, "config.json");
    cJSON *cj = NULL;
    grpo_err err = GRPO_OK;
    if (cpath == NULL) {
        err = grpo__fail(GRPO_ENOMEM, "model: out of memory");
        goto done;
    }
    if ((err = grpo__json_parse_file(cpath, 4u << 20, &cj)) != GRPO_OK ||
        (err = grpo_model__config_from_json(&m->cfg, cj, cpath)) != GRPO_OK ||
        (err = load_files(m)) != GRPO_OK ||
        (err = grpo_model__bind_weights(m, opts->load_mtp)) != GRPO_OK ||
        (err = rope_init(m)) != GRPO_OK || (err = open_kernels(m, opts)) != GRPO_OK)
        goto done;
    m->numerics = opts->numerics;
    m->kv_dtype = opts->kv_dtype;
    const char *gr = getenv("GRPO_CUDA_GRAPHS"); /* 0: decode steps without CUDA graphs */
    m->graphs_off = gr != NULL && strcmp(gr, "0") == 0;
    if (m->numerics == GRPO_NUMERICS_Q8)
        err = grpo_model__requant_q8(m);
    if (err == GRPO_OK)
        err = grpo_model__weights_to_op_memory(m); /* backend 2; the CPU's huge pages */
done:
    cJSON_Delete(cj);
    free(cpath);
    if (err != GRPO_OK) {
        grpo_model_destroy(m);
        m = NULL;
    }
    *out = m;
    return err;
}

grpo_err
grpo_model__use_backend(grpo_model *m, grpo_kernels *k)
{
    if (m->k_own != NULL || m->k_cuda)
        return grpo__fail(GRPO_EINVAL, "model: already moved to another backend");
    grpo_model__graphs_free(m);
    grpo_kernels_mem_free(m->k, m->scratch_op);
    m->scratch_op = NULL, m->scratch_op_size = 0;
    m->k_own = m->k;
    m->k = k;
    return grpo_model__weights_to_op_memory(m);
}

void
grpo_model_destroy(grpo_model *m)
{
    if (m == NULL)
        return;
    if (m->k != NULL) {
        grpo_model__graphs_free(m);
        grpo_kernels_mem_free(m->k, m->scratch_op);
        grpo_model__op_memory_free(m);
    }
    if (m->k_own != NULL) /* m->k was a caller's */
        m->k = m->k_own;
#ifdef GRPO_MODEL_CUDA
    if (m->k_cuda)
        cuda_module()->destroy(m->k);
    else
#endif
        grpo_kernels_destroy(m->k);
    free(m->scratch);
    for (int i = 0; i < m->n_owned; i++)
        free(m->owned[i]);
    free(m->owned);
    for (int i = 0; i < m->n_files; i++)
        grpo_model__st_close(&m->files[i]);
    free(m->files);
    free(m->by_name);
    free(m->dir);
    free(m);
}

const grpo_model_config *
grpo_model_get_config(const grpo_model *m)
{
    return m == NULL ? NULL : &m->cfg;
}

int
grpo_model_has_mtp(const grpo_model *m)
{
    return m != NULL && m->mtp != NULL;
}

const char *
grpo_model_weights_sha256(const grpo_model *cm)
{
    grpo_model *m = (grpo_model *)cm; /* the digest is computed once and cached */
    if (m == NULL)
        return NULL;
    if (m->sha_done)
        return m->sha;
    grpo_sha256 s;
    grpo_sha256_init(&s);
    for (int i = 0; i < m->n_files; i++) /* files are opened in name order */
        grpo_sha256_update(&s, m->files[i].map, m->files[i].size);
    grpo_sha256_final_hex(&s, m->sha);
    m->sha_done = 1;
    return m->sha;
}

static double
kw_bytes(const grpo_kw *w)
{
    double b = (double)w->rows * w->cols * (double)grpo_dtype_size(w->dt);
    if (w->dt == GRPO_DT_F8E4M3 || w->dt == GRPO_DT_Q8)
        b += 4.0 * ((w->rows + w->br - 1) / w->br) * w->scale_cols;
    return b;
}

int
grpo_model_numerics(const grpo_model *m)
{
    return m->numerics;
}

int
grpo_model_kv_dtype(const grpo_model *m)
{
    return m->kv_dtype;
}

grpo_err
grpo_numerics_parse(const char *s, int *out)
{
    if (s != NULL && strcmp(s, "exact") == 0)
        *out = GRPO_NUMERICS_EXACT;
    else if (s != NULL && strcmp(s, "q8") == 0)
        *out = GRPO_NUMERICS_Q8;
    else if (s != NULL && strcmp(s, "fp8") == 0)
        *out = GRPO_NUMERICS_FP8;
    else if (s != NULL && strcmp(s, "fp8-nondet") == 0)
        *out = GRPO_NUMERICS_FP8_NONDET;
    else
        return grpo__fail(GRPO_EINVAL,
                          "numerics \"%s\": expected \"exact\", \"q8\", \"fp8\" or \"fp8-nondet\"",
                          s ? s : "");
    return GRPO_OK;
}

const char *
grpo_numerics_name(int numerics)
{
    switch (numerics) {
    case GRPO_NUMERICS_Q8:
        return "q8";
    case GRPO_NUMERICS_FP8:
        return "fp8";
    case GRPO_NUMERICS_FP8_NONDET:
        return "fp8-nondet";
    default:
        return "exact";
    }
}

static double
mlp_bytes(const grpo_mlp_w *w)
{
    return kw_bytes(&w->gate) + kw_bytes(&w->up) + kw_bytes(&w->down);
}

double
grpo_model_bytes_per_token(const grpo_model *m)
{
    const grpo_model_config *c = &m->cfg;
    double b = kw_bytes(&m->lm_head) + (double)c->hidden_size * grpo_dtype_size(m->embed.dt);
    for (int i = 0; i < c->num_hidden_layers; i++) {
        const grpo_layer_w *l = &m->layers[i];
        b += c->q_lora_rank > 0 ? kw_bytes(&l->q_a) + kw_bytes(&l->q_b) : kw_bytes(&l->q_proj);
        b += kw_bytes(&l->kv_a) + kw_bytes(&l->kv_b) + kw_bytes(&l->o);
        b += kw_bytes(&l->k_proj) + kw_bytes(&l->v_proj); /* GQA (zero for MLA) */
        if (!l->moe) {
            b += mlp_bytes(&l->mlp);
            continue;
        }
        b += kw_bytes(&l->router) + c->num_experts_per_tok * mlp_bytes(&l->experts[0]);
        if (c->n_shared_experts > 0)
            b += mlp_bytes(&l->shared);
    }
    return b;
}

grpo_err
grpo_model_set_profile(grpo_model *m, int on)
{
    if (m == NULL)
        return grpo__fail(GRPO_EINVAL, "model: profile needs a model");
    return grpo_kernels_cpu_set_profile(m->k, on);
}

void
grpo_model_get_profile(const grpo_model *m, grpo_model_profile *out)
{
    memset(out, 0, sizeof *out);
    if (m == NULL)
        return;
    grpo_kernels_profile p;
    grpo_kernels_cpu_profile(m->k, &p);
    out->n_ops = GRPO_KOP_N < GRPO_MODEL_PROFILE_OPS ? GRPO_KOP_N : GRPO_MODEL_PROFILE_OPS;
    for (int i = 0; i < out->n_ops; i++) {
        out->op[i] = grpo_kop_names[i];
        out->seconds[i] = p.seconds[i];
        out->calls[i] = p.calls[i];
    }
    out->pool_calls = p.pool_calls;
    out->pool_wait_s = p.pool_wait_s;
}
