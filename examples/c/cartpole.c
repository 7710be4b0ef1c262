/*
 * CartPole as a shmenv plugin, in C99: the dynamics, thresholds, rewards and initial-state
 * distribution of the built-in CartPole-v1 (Gymnasium 1.x), and the same random stream
 * (NumPy's SeedSequence -> PCG64, as Gymnasium seeds it), so a seeded episode is the same
 * trajectory, step for step and bit for bit, as CartPole-v1's.
 *
 *   gcc -std=c99 -O2 -shared -fPIC -I worker/include -o libcartpole.so examples/c/cartpole.c -lm
 *   shmenv list --plugin ./libcartpole.so
 *   shmenv bench --plugin ./libcartpole.so --env CartPoleC-v1 --num-envs 1024 --workers 2 --baseline
 *
 * It provides the optional batched call (`step_batch`): the host then steps a worker's envs
 * in one call a batch.
 *
 * Compile without -ffast-math (and, if you add -march=native, with -ffp-contract=off) to
 * keep the floating-point results identical to the Rust env's.
 */
#include "shmenv_env.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- NumPy's default random stream: SeedSequence(seed) -> PCG64 -> random() ---------- */

__extension__ typedef unsigned __int128 u128;

typedef struct { u128 state, inc; } pcg64;

static uint32_t hashmix(uint32_t value, uint32_t *hash_const) {
    value ^= *hash_const;
    *hash_const *= 0x931e8875u;
    value *= *hash_const;
    return value ^ (value >> 16);
}

static uint32_t mix(uint32_t x, uint32_t y) {
    uint32_t r = 0xca01f9ddu * x - 0x4973f715u * y;
    return r ^ (r >> 16);
}

static void pcg64_step(pcg64 *g) {
    const u128 mult = ((u128)0x2360ed051fc65da4ull << 64) | 0x4385df649fccf645ull;
    g->state = g->state * mult + g->inc;
}

static void pcg64_seed(pcg64 *g, uint64_t seed) {
    uint32_t entropy[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)}, pool[4], words[8];
    uint32_t hash_const = 0x43b0d7e5u;
    int n = (seed >> 32) ? 2 : 1;
    for (int i = 0; i < 4; i++) pool[i] = hashmix(i < n ? entropy[i] : 0, &hash_const);
    for (int src = 0; src < 4; src++)
        for (int dst = 0; dst < 4; dst++)
            if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], &hash_const));
    hash_const = 0x8b51f9ddu;
    for (int i = 0; i < 8; i++) {
        uint32_t v = pool[i % 4] ^ hash_const;
        hash_const *= 0x58f38dedu;
        v *= hash_const;
        words[i] = v ^ (v >> 16);
    }
    uint64_t s[4];
    for (int i = 0; i < 4; i++) s[i] = words[2 * i] | (uint64_t)words[2 * i + 1] << 32;
    g->state = 0;
    g->inc = ((((u128)s[2] << 64) | s[3]) << 1) | 1;
    pcg64_step(g);
    g->state += ((u128)s[0] << 64) | s[1];
    pcg64_step(g);
}

static double pcg64_uniform(pcg64 *g, double low, double high) {
    pcg64_step(g);
    uint64_t hi = (uint64_t)(g->state >> 64), lo = (uint64_t)g->state;
    unsigned rot = (unsigned)(g->state >> 122);
    uint64_t x = hi ^ lo, bits = (x >> rot) | (x << ((64 - rot) & 63));
    return low + (high - low) * ((double)(bits >> 11) * (1.0 / 9007199254740992.0));
}

/* ---- The env --------------------------------------------------------------------------- */

#define GRAVITY 9.8
#define MASSCART 1.0
#define MASSPOLE 0.1
#define TOTAL_MASS (MASSPOLE + MASSCART)
#define LENGTH 0.5
#define POLEMASS_LENGTH (MASSPOLE * LENGTH)
#define FORCE_MAG 10.0
#define TAU 0.02
#define THETA_THRESHOLD (12.0 * 2.0 * 3.14159265358979323846 / 360.0)
#define X_THRESHOLD 2.4

struct shmenv_env {
    double state[4];
    pcg64 rng;
    int terminated_steps; /* steps since termination, -1 before it */
};

/* CartPole-v1's bounds (twice the x and theta thresholds, rounded to f32), written out exactly. */
static const char SPEC[] =
    "{\"observations\":[{\"name\":\"obs\",\"space\":{\"type\":\"Box\",\"dtype\":\"f32\",\"shape\":[4],"
    "\"low\":[-4.800000190734863,\"-inf\",-0.41887903213500977,\"-inf\"],\"high\":[4.800000190734863,\"inf\",0.41887903213500977,\"inf\"]}}],"
    "\"action\":{\"type\":\"Discrete\",\"n\":2,\"start\":0}}";

static const char *create(const char *id, const char *config_json, shmenv_env **out) {
    (void)id;
    /* This env has no config keys: refuse any, as the built-in envs do. */
    if (strcmp(config_json, "{}") != 0) return "CartPoleC-v1 takes no config keys";
    shmenv_env *env = calloc(1, sizeof *env);
    if (!env) return "out of memory";
    pcg64_seed(&env->rng, 0);
    env->terminated_steps = -1;
    *out = env;
    return NULL;
}

static const char *spec_json(shmenv_env *env) {
    (void)env;
    return SPEC;
}

static const char *reset(shmenv_env *env, int has_seed, uint64_t seed) {
    if (has_seed) pcg64_seed(&env->rng, seed);
    for (int i = 0; i < 4; i++) env->state[i] = pcg64_uniform(&env->rng, -0.05, 0.05);
    env->terminated_steps = -1;
    return NULL;
}

static const char *step(shmenv_env *env, const void *action, shmenv_transition *out) {
    double x = env->state[0], x_dot = env->state[1], theta = env->state[2], theta_dot = env->state[3];
    double force = *(const int64_t *)action == 1 ? FORCE_MAG : -FORCE_MAG;
    double sintheta = sin(theta), costheta = cos(theta);
    double temp = (force + POLEMASS_LENGTH * (theta_dot * theta_dot) * sintheta) / TOTAL_MASS;
    double thetaacc = (GRAVITY * sintheta - costheta * temp) /
                      (LENGTH * (4.0 / 3.0 - MASSPOLE * (costheta * costheta) / TOTAL_MASS));
    double xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS;
    env->state[0] = x + TAU * x_dot;
    env->state[1] = x_dot + TAU * xacc;
    env->state[2] = theta + TAU * theta_dot;
    env->state[3] = theta_dot + TAU * thetaacc;
    x = env->state[0];
    theta = env->state[2];
    int terminated = x < -X_THRESHOLD || x > X_THRESHOLD || theta < -THETA_THRESHOLD || theta > THETA_THRESHOLD;
    out->terminated = (uint8_t)terminated;
    out->truncated = 0;
    if (!terminated) {
        out->reward = 1.0f;
    } else if (env->terminated_steps < 0) {
        env->terminated_steps = 0;
        out->reward = 1.0f;
    } else {
        env->terminated_steps++;
        out->reward = 0.0f;
    }
    return NULL;
}

static const char *observe(shmenv_env *env, void *const *rows) {
    float *obs = rows[0];
    for (int i = 0; i < 4; i++) obs[i] = (float)env->state[i];
    return NULL;
}

static void destroy(shmenv_env *env) { free(env); }

/* The optional batched call: `step` and `observe` for every active env, in one call. */
static const char *step_batch(shmenv_env *const *envs, uint32_t count, const uint8_t *active,
                              const void *actions, uint32_t action_bytes, shmenv_transition *out,
                              void *const *rows, uint32_t *failed) {
    (void)failed; /* CartPole's steps cannot fail */
    const char *action = actions;
    float *obs = rows[0];
    for (uint32_t i = 0; i < count; i++) {
        if (!active[i]) continue;
        step(envs[i], action + (size_t)i * action_bytes, &out[i]);
        void *row[1] = {obs + 4 * (size_t)i};
        observe(envs[i], row);
    }
    return NULL;
}

static const shmenv_env_info ENVS[] = {
    {"CartPoleC-v1", "CartPole-v1's dynamics in C (500-step limit)", 500, 0},
};

static const shmenv_plugin PLUGIN = {
    SHMENV_ABI_VERSION, sizeof(shmenv_plugin), 1, 0, ENVS,
    create, spec_json, reset, step, observe, destroy, step_batch,
};

SHMENV_EXPORT const shmenv_plugin *shmenv_plugin_entry(void) { return &PLUGIN; }
