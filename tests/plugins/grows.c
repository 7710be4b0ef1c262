/*
 * Test plugin: `Grow-v0`, an env that starts to allocate memory while the pool runs. At its
 * `grow_at`-th step (config key, default 2) it makes its process the OOM killer's first
 * choice (oom_score_adj 1000) and then allocates and writes 16 MiB chunks until the kernel
 * ends it; should it reach `grow_limit_mib` (default 2048) without being killed, it stops
 * and returns an error instead, so a machine without a memory limit is never drained.
 * Observation: the step count (i32).
 */
#include "shmenv_env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct shmenv_env {
    long grow_at, grow_limit_mib, steps;
    char *chain; /* the chunks allocated, each pointing to the one before */
    char error[160];
};

static long config_int(const char *json, const char *key, long fallback) {
    const char *at = strstr(json, key);
    if (!at) return fallback;
    at = strchr(at + strlen(key), ':');
    return at ? strtol(at + 1, NULL, 10) : fallback;
}

static const shmenv_env_info ENVS[] = {
    {"Grow-v0", "allocates memory from its grow_at-th step on, until the OOM killer ends it", 0, 0},
};

static const char *create(const char *id, const char *config, shmenv_env **out) {
    if (strcmp(id, ENVS[0].id) != 0) return "unknown id";
    shmenv_env *env = calloc(1, sizeof *env);
    if (!env) return "out of memory";
    env->grow_at = config_int(config, "\"grow_at\"", 2);
    env->grow_limit_mib = config_int(config, "\"grow_limit_mib\"", 2048);
    *out = env;
    return NULL;
}

static const char *spec_json(shmenv_env *env) {
    (void)env;
    return "{\"observations\":[{\"name\":\"obs\",\"space\":{\"type\":\"Box\",\"dtype\":\"i32\",\"shape\":[1],"
           "\"low\":0,\"high\":1000000}}],\"action\":{\"type\":\"Discrete\",\"n\":2,\"start\":0}}";
}

static const char *reset(shmenv_env *env, int has_seed, uint64_t seed) {
    (void)has_seed;
    (void)seed;
    env->steps = 0;
    return NULL;
}

/* Allocates and writes 16 MiB chunks (kept until the env is destroyed) up to `grow_limit_mib`. */
static const char *grow(shmenv_env *env) {
    FILE *adj = fopen("/proc/self/oom_score_adj", "w");
    if (adj) {
        fputs("1000", adj);
        fclose(adj);
    }
    fprintf(stderr, "grows plugin: allocating now\n");
    const size_t chunk = (size_t)16 << 20;
    for (long mib = 0; mib < env->grow_limit_mib; mib += 16) {
        char *block = malloc(chunk);
        if (!block) break;
        memset(block, 0x5a, chunk);
        /* Reachable from the env, so the compiler keeps the writes. */
        *(char **)block = env->chain;
        env->chain = block;
    }
    snprintf(env->error, sizeof env->error, "allocated %ld MiB and was not killed: no memory limit is that low",
             env->grow_limit_mib);
    return env->error;
}

static const char *step(shmenv_env *env, const void *action, shmenv_transition *out) {
    (void)action;
    out->reward = 1.0f;
    out->terminated = 0;
    out->truncated = 0;
    if (++env->steps == env->grow_at) return grow(env);
    return NULL;
}

static const char *observe(shmenv_env *env, void *const *rows) {
    *(int32_t *)rows[0] = (int32_t)env->steps;
    return NULL;
}

static void destroy(shmenv_env *env) {
    while (env->chain) {
        char *next = *(char **)env->chain;
        free(env->chain);
        env->chain = next;
    }
    free(env);
}

static const shmenv_plugin PLUGIN = {
    SHMENV_ABI_VERSION, sizeof(shmenv_plugin), sizeof ENVS / sizeof ENVS[0], 0, ENVS,
    create, spec_json, reset, step, observe, destroy, NULL,
};

SHMENV_EXPORT const shmenv_plugin *shmenv_plugin_entry(void) { return &PLUGIN; }
