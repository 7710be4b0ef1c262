/*
 * Test plugin: env code that forks and lets the child carry on. Each env counts its steps
 * (observation: the count, i32). When the first env of a batched call is about to take its
 * `fork_at`-th step after a reset (config key, default 2), the call forks once; the parent
 * records the child's pid as an empty file named after it in `pid_dir` (config key, a
 * directory), and both processes step the batch and return from `step_batch` alike.
 * The host must stop the child before it touches the pool.
 */
#define _POSIX_C_SOURCE 200809L
#include "shmenv_env.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct shmenv_env {
    long fork_at, steps;
    char pid_dir[256];
};

static const shmenv_env_info ENVS[] = {
    {"ForkInStep-v0", "forks inside step_batch; the child carries on", 0, 0},
};

static long config_int(const char *json, const char *key, long fallback) {
    const char *at = strstr(json, key);
    if (!at) return fallback;
    at = strchr(at + strlen(key), ':');
    return at ? strtol(at + 1, NULL, 10) : fallback;
}

/* The string value of `key` (no escapes) into `out`, or "" when absent. */
static void config_str(const char *json, const char *key, char *out, size_t cap) {
    out[0] = '\0';
    const char *at = strstr(json, key);
    if (!at || !(at = strchr(at + strlen(key), ':')) || !(at = strchr(at, '"'))) return;
    const char *end = strchr(++at, '"');
    size_t n = end ? (size_t)(end - at) : 0;
    if (n >= cap) n = cap - 1;
    memcpy(out, at, n);
    out[n] = '\0';
}

static const char *create(const char *id, const char *config, shmenv_env **out) {
    if (strcmp(id, ENVS[0].id) != 0) return "unknown id";
    shmenv_env *env = calloc(1, sizeof *env);
    env->fork_at = config_int(config, "\"fork_at\"", 2);
    config_str(config, "\"pid_dir\"", env->pid_dir, sizeof env->pid_dir);
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

static const char *step(shmenv_env *env, const void *action, shmenv_transition *out) {
    (void)action;
    out->reward = 1.0f;
    out->terminated = 0;
    out->truncated = 0;
    env->steps++;
    return NULL;
}

/* Forks (the child carrying on, as the parent does); the parent records the child's pid. */
static const char *fork_here(const shmenv_env *env) {
    pid_t child = fork();
    if (child < 0) return "fork failed";
    if (child > 0 && env->pid_dir[0]) {
        char path[320];
        snprintf(path, sizeof path, "%s/%ld", env->pid_dir, (long)child);
        int fd = open(path, O_CREAT | O_WRONLY, 0600);
        if (fd >= 0) close(fd);
    }
    return NULL;
}

static const char *observe(shmenv_env *env, void *const *rows) {
    *(int32_t *)rows[0] = (int32_t)env->steps;
    return NULL;
}

static void destroy(shmenv_env *env) { free(env); }

static const char *step_batch(shmenv_env *const *envs, uint32_t count, const uint8_t *active,
                              const void *actions, uint32_t action_bytes, shmenv_transition *out,
                              void *const *rows, uint32_t *failed) {
    /* One fork per call, when its first env is about to take its `fork_at`-th step. */
    if (count > 0 && active[0] && envs[0]->steps + 1 == envs[0]->fork_at) {
        const char *error = fork_here(envs[0]);
        if (error) {
            *failed = 0;
            return error;
        }
    }
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

static const shmenv_plugin PLUGIN = {
    SHMENV_ABI_VERSION, sizeof(shmenv_plugin), sizeof ENVS / sizeof ENVS[0], 0, ENVS,
    create, spec_json, reset, step, observe, destroy, step_batch,
};

SHMENV_EXPORT const shmenv_plugin *shmenv_plugin_entry(void) { return &PLUGIN; }
