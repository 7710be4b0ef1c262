/* WalkC-v0: a walk on the integers -5..5, the smallest complete shmenv plugin.
 * Observation: the position (float32, shape [1]); action: Discrete(2), 0 steps left, 1 right.
 * A seeded reset starts at (seed % 5) - 2; an unseeded one at 0. Reaching +5 ends the
 * episode with reward 1, reaching -5 with reward -1; every other step gives 0. */
#include <stdlib.h>
#include <string.h>

#include "shmenv_env.h"

struct shmenv_env { int position; };

static const char *create(const char *id, const char *config_json, shmenv_env **out) {
    (void)id;
    if (strcmp(config_json, "{}") != 0) return "WalkC-v0 takes no config keys";
    shmenv_env *env = calloc(1, sizeof *env);
    if (!env) return "out of memory";
    *out = env;
    return NULL;
}

static const char *spec_json(shmenv_env *env) {
    (void)env;
    return "{\"observations\":[{\"name\":\"obs\",\"space\":{\"type\":\"Box\",\"dtype\":\"f32\","
           "\"shape\":[1],\"low\":-5,\"high\":5}}],\"action\":{\"type\":\"Discrete\",\"n\":2,\"start\":0}}";
}

static const char *reset(shmenv_env *env, int has_seed, uint64_t seed) {
    env->position = has_seed ? (int)(seed % 5) - 2 : 0;
    return NULL;
}

static const char *step(shmenv_env *env, const void *action, shmenv_transition *out) {
    env->position += *(const int64_t *)action == 1 ? 1 : -1;
    out->reward = env->position == 5 ? 1.0f : env->position == -5 ? -1.0f : 0.0f;
    out->terminated = env->position == 5 || env->position == -5;
    out->truncated = 0;
    return NULL;
}

static const char *observe(shmenv_env *env, void *const *rows) {
    *(float *)rows[0] = (float)env->position;
    return NULL;
}

static void destroy(shmenv_env *env) { free(env); }

static const shmenv_env_info ENVS[] = {{"WalkC-v0", "a walk on -5..5 (100-step limit)", 100, 0}};
static const shmenv_plugin PLUGIN = {
    .abi_version = SHMENV_ABI_VERSION, .size = sizeof(shmenv_plugin), .num_envs = 1, .envs = ENVS,
    .create = create, .spec_json = spec_json, .reset = reset, .step = step, .observe = observe,
    .destroy = destroy,
};
SHMENV_EXPORT const shmenv_plugin *shmenv_plugin_entry(void) { return &PLUGIN; }
