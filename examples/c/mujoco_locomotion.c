/*
 * Gymnasium's HalfCheetah-v5, Hopper-v5 and Ant-v5 as a shmenv plugin, in C99 against the MuJoCo C
 * API of the `mujoco` PyPI wheel (its headers and libmujoco.so), loading Gymnasium's model
 * files. Observation, reward, termination and time limit are Gymnasium's v5 ones with the
 * default arguments; the reset noise has the same distributions (uniform qpos noise;
 * normal (HalfCheetah, Ant) or uniform (Hopper) qvel noise) but its own random stream, so a
 * seeded episode starts elsewhere than Gymnasium's. With "reset_noise_scale": 0 both
 * start from the model's qpos0 and zero velocity, and follow the same trajectory.
 *
 *   bash examples/c/build_mujoco.sh target/release/libmujoco_locomotion.so
 *
 * Config (JSON object): "model" (required): the path of the model XML (Gymnasium's
 * gymnasium/envs/mujoco/assets/half_cheetah.xml, hopper.xml or ant.xml);
 * "reset_noise_scale" (optional number, default Gymnasium's: 0.1 HalfCheetah and Ant,
 * 0.005 Hopper).
 *
 * Rewards are computed as Gymnasium computes them under NumPy 2: the control cost in
 * float32 (the action's dtype), the forward, healthy and contact terms in float64, sums in
 * NumPy's pairwise order.
 */
#include "shmenv_env.h"

#include <mujoco/mujoco.h>

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { HALF_CHEETAH, HOPPER, ANT } env_kind;

/* Per env id: Gymnasium v5's defaults. */
typedef struct {
    env_kind kind;
    int frame_skip;
    double ctrl_cost_weight;
    double reset_noise_scale;
} env_params;

static const env_params PARAMS[] = {
    {HALF_CHEETAH, 5, 0.1, 0.1},
    {HOPPER, 4, 1e-3, 5e-3},
    {ANT, 5, 0.5, 0.1},
};

static const shmenv_env_info ENVS[] = {
    {"HalfCheetahC-v5", "Gymnasium's HalfCheetah-v5 in C on MuJoCo (config: model, reset_noise_scale)", 1000, 0},
    {"HopperC-v5", "Gymnasium's Hopper-v5 in C on MuJoCo (config: model, reset_noise_scale)", 1000, 0},
    {"AntC-v5", "Gymnasium's Ant-v5 in C on MuJoCo (config: model, reset_noise_scale)", 1000, 0},
};

#define NUM_ENVS (sizeof ENVS / sizeof ENVS[0])

struct shmenv_env {
    env_params params;
    double noise;
    mjModel *model;
    mjData *data;
    uint64_t rng[4];
    char spec[4096];
    char error[1100];
};

/* ---- xoshiro256** seeded by splitmix64 ------------------------------------------------- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void rng_seed(uint64_t s[4], uint64_t seed) {
    for (int i = 0; i < 4; i++) s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(uint64_t s[4]) {
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform in [0, 1). */
static double rng_uniform(uint64_t s[4]) { return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0); }

/* Standard normal (Box-Muller). */
static double rng_normal(uint64_t s[4]) {
    double u = 1.0 - rng_uniform(s), v = rng_uniform(s);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* ---- Config: a flat JSON object of strings and numbers -------------------------------- */

static const char *skip_ws(const char *p) {
    while (isspace((unsigned char)*p)) p++;
    return p;
}

/* Reads a JSON string without escapes into out (size n); returns the end or NULL. */
static const char *read_string(const char *p, char *out, size_t n) {
    if (*p != '"') return NULL;
    size_t k = 0;
    for (p++; *p && *p != '"'; p++) {
        if (*p == '\\' || k + 1 >= n) return NULL;
        out[k++] = *p;
    }
    out[k] = 0;
    return *p == '"' ? p + 1 : NULL;
}

static const char *parse_config(shmenv_env *env, const char *json, char *model, size_t model_size) {
    const char *p = skip_ws(json);
    char key[64];
    model[0] = 0;
    if (*p++ != '{') return "the config must be a JSON object";
    p = skip_ws(p);
    while (*p && *p != '}') {
        p = read_string(p, key, sizeof key);
        if (!p) return "config keys must be plain strings";
        p = skip_ws(p);
        if (*p++ != ':') return "the config is not valid JSON (expected ':')";
        p = skip_ws(p);
        if (strcmp(key, "model") == 0) {
            p = read_string(p, model, model_size);
            if (!p) return "config \"model\" must be the path of the model XML (a string without escapes, < 1024 bytes)";
        } else if (strcmp(key, "reset_noise_scale") == 0) {
            char *end;
            env->noise = strtod(p, &end);
            if (end == p || !(env->noise >= 0.0)) return "config \"reset_noise_scale\" must be a number >= 0";
            p = end;
        } else {
            snprintf(env->error, sizeof env->error, "unknown config key \"%s\": the keys are \"model\" and \"reset_noise_scale\"", key);
            return env->error;
        }
        p = skip_ws(p);
        if (*p == ',') p = skip_ws(p + 1);
    }
    if (*p != '}') return "the config is not valid JSON (expected '}')";
    if (!model[0]) return "config \"model\" is required: the path of Gymnasium's model XML (e.g. .../gymnasium/envs/mujoco/assets/half_cheetah.xml)";
    return NULL;
}

/* MuJoCo's warnings (e.g. a model attribute it deprecates) go to stderr, each text once per
 * process, instead of MuJoCo's default: stdout and a MUJOCO_LOG.TXT in the working directory. */
static void warn_once(const char *message) {
    static char last[512];
    if (strncmp(last, message, sizeof last - 1) == 0) return;
    snprintf(last, sizeof last, "%s", message);
    fprintf(stderr, "MuJoCo warning: %s\n", message);
}

/* ---- The env --------------------------------------------------------------------------- */

static void write_spec(shmenv_env *env) {
    const mjModel *m = env->model;
    int obs = env->params.kind == ANT ? (int)(m->nq - 2 + m->nv + 6 * (m->nbody - 1)) : (int)(m->nq - 1 + m->nv);
    int n = snprintf(env->spec, sizeof env->spec,
                     "{\"observations\":[{\"name\":\"obs\",\"space\":{\"type\":\"Box\",\"dtype\":\"f64\",\"shape\":[%d],"
                     "\"low\":\"-inf\",\"high\":\"inf\"}}],\"action\":{\"type\":\"Box\",\"dtype\":\"f32\",\"shape\":[%d],\"low\":[",
                     obs, (int)m->nu);
    for (int i = 0; i < m->nu; i++)
        n += snprintf(env->spec + n, sizeof env->spec - n, "%s%.9g", i ? "," : "", (float)m->actuator_ctrlrange[2 * i]);
    n += snprintf(env->spec + n, sizeof env->spec - n, "],\"high\":[");
    for (int i = 0; i < m->nu; i++)
        n += snprintf(env->spec + n, sizeof env->spec - n, "%s%.9g", i ? "," : "", (float)m->actuator_ctrlrange[2 * i + 1]);
    snprintf(env->spec + n, sizeof env->spec - n, "]}}");
}

static void destroy(shmenv_env *env) {
    if (env->data) mj_deleteData(env->data);
    if (env->model) mj_deleteModel(env->model);
    free(env);
}

static const char *create(const char *id, const char *config_json, shmenv_env **out) {
    static char error[1200];
    size_t which = 0;
    while (which < NUM_ENVS && strcmp(ENVS[which].id, id) != 0) which++;
    if (which == NUM_ENVS) return "unknown env id (HalfCheetahC-v5, HopperC-v5, AntC-v5)";
    shmenv_env *env = calloc(1, sizeof *env);
    if (!env) return "out of memory";
    env->params = PARAMS[which];
    env->noise = env->params.reset_noise_scale;
    char model[1024], load_error[1000] = "";
    mju_user_warning = warn_once;
    const char *bad = parse_config(env, config_json, model, sizeof model);
    if (!bad) {
        env->model = mj_loadXML(model, NULL, load_error, sizeof load_error);
        if (!env->model) {
            snprintf(error, sizeof error, "cannot load the model %s: %s", model, load_error);
            bad = error;
        }
    }
    if (!bad && (env->model->nu > 64 || env->model->nbody > 256 || env->model->nq < 3)) {
        snprintf(error, sizeof error, "the model %s has %ld actuators, %ld bodies and %ld position coordinates: "
                 "this plugin takes at most 64 actuators and 256 bodies, and at least 3 coordinates (Gymnasium's models)",
                 model, (long)env->model->nu, (long)env->model->nbody, (long)env->model->nq);
        bad = error;
    }
    if (!bad && !(env->data = mj_makeData(env->model))) bad = "mj_makeData failed (out of memory)";
    if (bad) {
        if (bad == env->error) {
            snprintf(error, sizeof error, "%s", env->error);
            bad = error;
        }
        destroy(env);
        return bad;
    }
    rng_seed(env->rng, 0);
    write_spec(env);
    *out = env;
    return NULL;
}

static const char *spec_json(shmenv_env *env) { return env->spec; }

static const char *reset(shmenv_env *env, int has_seed, uint64_t seed) {
    const mjModel *m = env->model;
    mjData *d = env->data;
    double s = env->noise;
    if (has_seed) rng_seed(env->rng, seed);
    mj_resetData(m, d);
    for (int i = 0; i < m->nq; i++) d->qpos[i] = m->qpos0[i] + (-s + 2.0 * s * rng_uniform(env->rng));
    for (int i = 0; i < m->nv; i++)
        d->qvel[i] = env->params.kind == HOPPER ? -s + 2.0 * s * rng_uniform(env->rng) : s * rng_normal(env->rng);
    mj_forward(m, d);
    return NULL;
}

/* NumPy's pairwise summation (np.sum of a contiguous array), for float and double. */
#define PAIRWISE_SUM(name, type)                                                        \
    static type name(const type *a, long n) {                                           \
        if (n < 8) {                                                                    \
            type res = 0;                                                               \
            for (long i = 0; i < n; i++) res += a[i];                                   \
            return res;                                                                 \
        }                                                                               \
        if (n <= 128) {                                                                 \
            type r[8];                                                                  \
            long i;                                                                     \
            for (int j = 0; j < 8; j++) r[j] = a[j];                                    \
            for (i = 8; i < n - n % 8; i += 8)                                          \
                for (int j = 0; j < 8; j++) r[j] += a[i + j];                           \
            type res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7])); \
            for (; i < n; i++) res += a[i];                                             \
            return res;                                                                 \
        }                                                                               \
        long half = n / 2;                                                              \
        half -= half % 8;                                                               \
        return name(a, half) + name(a + half, n - half);                                \
    }
PAIRWISE_SUM(sum_float, float)
PAIRWISE_SUM(sum_double, double)

/* Gymnasium's control cost: ctrl_cost_weight * np.sum(np.square(action)) in float32. */
static float control_cost(const env_params *p, const float *action, long nu) {
    float squares[64];
    for (long i = 0; i < nu; i++) squares[i] = action[i] * action[i];
    return (float)p->ctrl_cost_weight * sum_float(squares, nu);
}

static double clip(double v, double lo, double hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Ant-v5's contact cost: 5e-4 * np.sum(np.square(np.clip(cfrc_ext, -1, 1))). */
static double ant_contact_cost(const mjModel *m, const mjData *d) {
    double squares[6 * 256];
    long n = 6 * m->nbody;
    for (long i = 0; i < n; i++) {
        double c = clip(d->cfrc_ext[i], -1.0, 1.0);
        squares[i] = c * c;
    }
    return 5e-4 * sum_double(squares, n);
}

static int ant_healthy(const mjModel *m, const mjData *d) {
    for (int i = 0; i < m->nq; i++)
        if (!isfinite(d->qpos[i])) return 0;
    for (int i = 0; i < m->nv; i++)
        if (!isfinite(d->qvel[i])) return 0;
    return 0.2 <= d->qpos[2] && d->qpos[2] <= 1.0;
}

static int hopper_healthy(const mjModel *m, const mjData *d) {
    for (int i = 2; i < m->nq; i++)
        if (!(-100.0 < d->qpos[i] && d->qpos[i] < 100.0)) return 0;
    for (int i = 0; i < m->nv; i++)
        if (!(-100.0 < d->qvel[i] && d->qvel[i] < 100.0)) return 0;
    double z = d->qpos[1], angle = d->qpos[2];
    return 0.7 < z && z < INFINITY && -0.2 < angle && angle < 0.2;
}

static const char *step(shmenv_env *env, const void *action, shmenv_transition *out) {
    const mjModel *m = env->model;
    mjData *d = env->data;
    const float *a = action;
    for (int i = 0; i < m->nu; i++) d->ctrl[i] = a[i];
    /* Ant-v5 measures the torso's (body 1) xpos; the others the root joint's qpos. */
    int ant = env->params.kind == ANT;
    double x_before = ant ? d->xpos[3] : d->qpos[0];
    for (int k = 0; k < env->params.frame_skip; k++) mj_step(m, d);
    mj_rnePostConstraint(m, d);
    double x_velocity = ((ant ? d->xpos[3] : d->qpos[0]) - x_before) / (m->opt.timestep * env->params.frame_skip);
    double ctrl_cost = control_cost(&env->params, a, m->nu);
    out->truncated = 0;
    if (ant) {
        int healthy = ant_healthy(m, d);
        out->reward = (float)((x_velocity + (healthy ? 1.0 : 0.0)) - (ctrl_cost + ant_contact_cost(m, d)));
        out->terminated = (uint8_t)!healthy;
    } else if (env->params.kind == HOPPER) {
        int healthy = hopper_healthy(m, d);
        out->reward = (float)((x_velocity + (healthy ? 1.0 : 0.0)) - ctrl_cost);
        out->terminated = (uint8_t)!healthy;
    } else {
        out->reward = (float)(x_velocity - ctrl_cost);
        out->terminated = 0;
    }
    return NULL;
}

static const char *observe(shmenv_env *env, void *const *rows) {
    const mjModel *m = env->model;
    const mjData *d = env->data;
    double *obs = rows[0];
    int ant = env->params.kind == ANT;
    for (int i = ant ? 2 : 1; i < m->nq; i++) *obs++ = d->qpos[i];
    for (int i = 0; i < m->nv; i++) *obs++ = env->params.kind == HOPPER ? clip(d->qvel[i], -10.0, 10.0) : d->qvel[i];
    if (ant)
        for (long i = 6; i < 6 * m->nbody; i++) *obs++ = clip(d->cfrc_ext[i], -1.0, 1.0);
    return NULL;
}

static const shmenv_plugin PLUGIN = {
    SHMENV_ABI_VERSION, sizeof(shmenv_plugin), NUM_ENVS, 0, ENVS,
    create, spec_json, reset, step, observe, destroy, NULL,
};

SHMENV_EXPORT const shmenv_plugin *shmenv_plugin_entry(void) { return &PLUGIN; }
