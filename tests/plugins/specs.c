/*
 * Test plugin: one env id per kind of spec a library may return, valid and not. Every env
 * observes one f64 per element of its observation (zeros) and takes a Discrete(2) action.
 * `ExitInCreate-v0` calls exit(3) in create when its config is {"exit": 3}.
 */
#include "shmenv_env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum kind { LONG, TOO_LONG, OVERFLOW, NAN_BOUND, LOW_ABOVE_HIGH, U8_RANGE, UNKNOWN_KEY, EPISODE_LIMIT, EXIT };

struct shmenv_env {
    char *spec;
    size_t elements;
};

static const shmenv_env_info ENVS[] = {
    {"LongSpec-v0", "a valid spec of about 20 KiB: per-element bounds of a Box of 2000", 0, 0},
    {"TooLongSpec-v0", "a spec of more than 64 KiB", 0, 0},
    {"Overflow-v0", "a f64 Box whose byte count overflows a 64-bit size", 0, 0},
    {"NaNBound-v0", "a NaN lower bound", 0, 0},
    {"LowAboveHigh-v0", "low 2 above high 1", 0, 0},
    {"U8Range-v0", "a u8 Box with bounds -5 and 1000", 0, 0},
    {"UnknownKey-v0", "a misspelt key beside observations", 0, 0},
    {"EpisodeLimit-v0", "max_episode_steps 3 in the spec, none in this table", 0, 0},
    {"ExitInCreate-v0", "calls exit(3) in create given config {\"exit\": 3}", 0, 0},
};

static const char *ACTION = "\"action\":{\"type\":\"Discrete\",\"n\":2,\"start\":0}";

/* A spec with one observation array `obs`, whose space JSON is `space`, and `extra` after the action. */
static char *spec_of(const char *space, const char *extra) {
    size_t n = strlen(space) + strlen(extra) + 128;
    char *s = malloc(n);
    if (s) snprintf(s, n, "{\"observations\":[{\"name\":\"obs\",\"space\":%s}],%s%s}", space, ACTION, extra);
    return s;
}

/* A f64 Box of `n` elements whose low bounds are all different (so they travel one by one). */
static char *long_box(size_t n) {
    char *s = malloc(n * 24 + 128);
    if (!s) return NULL;
    size_t at = (size_t)sprintf(s, "{\"type\":\"Box\",\"dtype\":\"f64\",\"shape\":[%zu],\"low\":[", n);
    for (size_t i = 0; i < n; i++) at += (size_t)sprintf(s + at, "%s-%zu.5", i ? "," : "", i + 1);
    sprintf(s + at, "],\"high\":1e9}");
    return s;
}

static char *make_spec(enum kind kind) {
    const char *box = "{\"type\":\"Box\",\"dtype\":\"f64\",\"shape\":[1],\"low\":0,\"high\":1}";
    switch (kind) {
    case LONG:
    case TOO_LONG: {
        char *space = long_box(kind == LONG ? 2000 : 12000);
        char *s = space ? spec_of(space, "") : NULL;
        free(space);
        return s;
    }
    case OVERFLOW:
        return spec_of("{\"type\":\"Box\",\"dtype\":\"f64\",\"shape\":[2305843009213693953],\"low\":0,\"high\":1}", "");
    case NAN_BOUND: return spec_of("{\"type\":\"Box\",\"dtype\":\"f64\",\"shape\":[1],\"low\":\"nan\",\"high\":1}", "");
    case LOW_ABOVE_HIGH: return spec_of("{\"type\":\"Box\",\"dtype\":\"f64\",\"shape\":[1],\"low\":2,\"high\":1}", "");
    case U8_RANGE: return spec_of("{\"type\":\"Box\",\"dtype\":\"u8\",\"shape\":[1],\"low\":-5,\"high\":1000}", "");
    case UNKNOWN_KEY: return spec_of(box, ",\"max_episode_step\":3");
    case EPISODE_LIMIT: return spec_of(box, ",\"max_episode_steps\":3");
    default: return spec_of(box, "");
    }
}

static const char *create(const char *id, const char *config, shmenv_env **out) {
    int kind = -1;
    for (int i = 0; i < (int)(sizeof ENVS / sizeof ENVS[0]); i++)
        if (strcmp(id, ENVS[i].id) == 0) kind = i;
    if (kind == EXIT && strcmp(config, "{\"exit\":3}") == 0) {
        fprintf(stderr, "specs plugin: exiting in create\n");
        exit(3);
    }
    shmenv_env *env = calloc(1, sizeof *env);
    if (!env) return "out of memory";
    env->spec = make_spec((enum kind)kind);
    env->elements = kind == LONG ? 2000 : 1;
    if (!env->spec) {
        free(env);
        return "out of memory";
    }
    *out = env;
    return NULL;
}

static const char *spec_json(shmenv_env *env) { return env->spec; }

static const char *reset(shmenv_env *env, int has_seed, uint64_t seed) {
    (void)env, (void)has_seed, (void)seed;
    return NULL;
}

static const char *step(shmenv_env *env, const void *action, shmenv_transition *out) {
    (void)env, (void)action;
    out->reward = 1.0f;
    out->terminated = 0;
    out->truncated = 0;
    return NULL;
}

static const char *observe(shmenv_env *env, void *const *rows) {
    memset(rows[0], 0, env->elements * sizeof(double));
    return NULL;
}

static void destroy(shmenv_env *env) {
    free(env->spec);
    free(env);
}

static const shmenv_plugin PLUGIN = {
    SHMENV_ABI_VERSION, sizeof(shmenv_plugin), sizeof ENVS / sizeof ENVS[0], 0, ENVS,
    create, spec_json, reset, step, observe, destroy, NULL,
};

SHMENV_EXPORT const shmenv_plugin *shmenv_plugin_entry(void) { return &PLUGIN; }
