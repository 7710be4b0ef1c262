/*
 * Test plugin: a library with process-global state that allows one env per process (as
 * many simulators do). The observation is the pid of the process hosting the env.
 */
#include "shmenv_env.h"

#include <stddef.h>
#include <stdlib.h>
#include <unistd.h>

static int live; /* the process-global state: is the one env taken? */

struct shmenv_env {
    int32_t pid;
};

static const char *create(const char *id, const char *config, shmenv_env **out) {
    (void)id;
    (void)config;
    if (live) return "Single-v0 keeps process-global state and allows one env per process; this process has one";
    live = 1;
    shmenv_env *env = malloc(sizeof *env);
    env->pid = (int32_t)getpid();
    *out = env;
    return NULL;
}

static const char *spec_json(shmenv_env *env) {
    (void)env;
    return "{\"observations\":[{\"name\":\"obs\",\"space\":{\"type\":\"Box\",\"dtype\":\"i32\",\"shape\":[1],"
           "\"low\":0,\"high\":\"inf\"}}],\"action\":{\"type\":\"Discrete\",\"n\":2,\"start\":0}}";
}

static const char *reset(shmenv_env *env, int has_seed, uint64_t seed) {
    (void)env, (void)has_seed, (void)seed;
    return NULL;
}

static const char *step(shmenv_env *env, const void *action, shmenv_transition *out) {
    (void)env;
    out->reward = (float)*(const int64_t *)action;
    out->terminated = 0;
    out->truncated = 0;
    return NULL;
}

static const char *observe(shmenv_env *env, void *const *rows) {
    *(int32_t *)rows[0] = env->pid;
    return NULL;
}

static void destroy(shmenv_env *env) {
    free(env);
    live = 0;
}

static const shmenv_env_info ENVS[] = {{"Single-v0", "one env per process", 0, 0}};

/* Past the size the table declares: the host must never call it. */
static const char *not_read(shmenv_env *const *envs, uint32_t count, const uint8_t *active, const void *actions,
                            uint32_t action_bytes, shmenv_transition *out, void *const *rows, uint32_t *failed) {
    (void)envs, (void)count, (void)active, (void)actions, (void)action_bytes, (void)out, (void)rows, (void)failed;
    abort();
}

/* Its size is that of the table before the optional fields (as a library built against an
 * older header of version 1 declares it): the host must read no further. */
static const shmenv_plugin PLUGIN = {
    SHMENV_ABI_VERSION, offsetof(shmenv_plugin, step_batch), 1, 0, ENVS,
    create, spec_json, reset, step, observe, destroy, not_read,
};

SHMENV_EXPORT const shmenv_plugin *shmenv_plugin_entry(void) { return &PLUGIN; }
