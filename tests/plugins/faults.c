/*
 * Test plugin: envs that fail on purpose, one id per kind of failure. Each env counts its
 * steps (observation: the count, i32). It fails at its `fault_at`-th step after a reset
 * seeded with `fault_seed` (config keys, defaults 3 and 1), so with a pool seeded 0 only
 * env 1 fails, and a restarted worker (seeded otherwise) does not fail again.
 */
#include "shmenv_env.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum kind { SEGFAULT, ABORT, EXIT, HANG, STEP_ERROR, CREATE_ERROR };

struct shmenv_env {
    enum kind kind;
    long fault_at, fault_seed, steps;
    int armed;
    char error[128];
};

static long config_int(const char *json, const char *key, long fallback) {
    const char *at = strstr(json, key);
    if (!at) return fallback;
    at = strchr(at + strlen(key), ':');
    return at ? strtol(at + 1, NULL, 10) : fallback;
}

static const shmenv_env_info ENVS[] = {
    {"Segfault-v0", "dereferences NULL", 0, 0},
    {"Abort-v0", "calls abort()", 0, 0},
    {"Exit-v0", "calls exit(7)", 0, 0},
    {"Hang-v0", "never returns from step", 0, 0},
    {"StepError-v0", "returns an error from step", 0, 0},
    {"CreateError-v0", "refuses to be created", 0, 0},
};

static const char *create(const char *id, const char *config, shmenv_env **out) {
    int kind = -1;
    for (int i = 0; i < (int)(sizeof ENVS / sizeof ENVS[0]); i++)
        if (strcmp(id, ENVS[i].id) == 0) kind = i;
    if (kind == CREATE_ERROR) return "CreateError-v0 cannot start: the simulator's license file is missing";
    shmenv_env *env = calloc(1, sizeof *env);
    env->kind = (enum kind)kind;
    env->fault_at = config_int(config, "\"fault_at\"", 3);
    env->fault_seed = config_int(config, "\"fault_seed\"", 1);
    *out = env;
    return NULL;
}

static const char *spec_json(shmenv_env *env) {
    (void)env;
    return "{\"observations\":[{\"name\":\"obs\",\"space\":{\"type\":\"Box\",\"dtype\":\"i32\",\"shape\":[1],"
           "\"low\":0,\"high\":1000000}}],\"action\":{\"type\":\"Discrete\",\"n\":2,\"start\":0}}";
}

static const char *reset(shmenv_env *env, int has_seed, uint64_t seed) {
    if (has_seed) env->armed = seed == (uint64_t)env->fault_seed;
    env->steps = 0;
    return NULL;
}

static const char *step(shmenv_env *env, const void *action, shmenv_transition *out) {
    (void)action;
    out->reward = 1.0f;
    out->terminated = 0;
    out->truncated = 0;
    if (!env->armed || ++env->steps != env->fault_at) return NULL;
    fprintf(stderr, "faults plugin: failing now\n");
    switch (env->kind) {
    case SEGFAULT: {
        volatile int *null = NULL;
        *null = 1;
        break;
    }
    case ABORT: abort();
    case EXIT: exit(7);
    case HANG:
        for (;;) sleep(1);
    case STEP_ERROR:
        snprintf(env->error, sizeof env->error, "the simulator diverged at step %ld", env->steps);
        return env->error;
    default: break;
    }
    return NULL;
}

static const char *observe(shmenv_env *env, void *const *rows) {
    *(int32_t *)rows[0] = (int32_t)env->steps;
    return NULL;
}

static void destroy(shmenv_env *env) { free(env); }

#ifdef FAULTS_BATCHED
/* faults_batched.c: `step` and `observe` of every active env in one call; an error names
 * the env it happened in. */
static const char *step_batch(shmenv_env *const *envs, uint32_t count, const uint8_t *active,
                              const void *actions, uint32_t action_bytes, shmenv_transition *out,
                              void *const *rows, uint32_t *failed) {
    for (uint32_t i = 0; i < count; i++) {
        if (!active[i]) continue;
        const char *error = step(envs[i], (const char *)actions + (size_t)i * action_bytes, &out[i]);
        void *row[1] = {(int32_t *)rows[0] + i};
        if (!error) error = observe(envs[i], row);
        if (error) {
            *failed = i;
            return error;
        }
    }
    return NULL;
}
#define STEP_BATCH step_batch
#else
#define STEP_BATCH NULL
#endif

static const shmenv_plugin PLUGIN = {
    SHMENV_ABI_VERSION, sizeof(shmenv_plugin), sizeof ENVS / sizeof ENVS[0], 0, ENVS,
    create, spec_json, reset, step, observe, destroy, STEP_BATCH,
};

SHMENV_EXPORT const shmenv_plugin *shmenv_plugin_entry(void) { return &PLUGIN; }
