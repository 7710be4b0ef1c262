/*
 * shmenv_env.h: the C ABI of shmenv env plugins (C99; usable from C++ as is).
 *
 * A plugin is a shared library that exports one function, `shmenv_plugin_entry`, returning
 * a table of functions (`shmenv_plugin`). Every worker process of a pool loads the library
 * for itself (dlopen), creates its envs through the table, and steps them; `observe` writes
 * each env's observation straight into its rows of the pool's shared memory.
 *
 * Versioning: `abi_version` is SHMENV_ABI_VERSION of the header the library was compiled
 * with, and must equal the host's. `size` is sizeof(shmenv_plugin) as the library was
 * compiled. Within one ABI version, fields are only ever appended at the end of the table,
 * and appended fields are optional (NULL when absent): the host reads only the first
 * `size` bytes, so a library built against an older header of the same version keeps
 * working. Anything else (a field removed, reordered or retyped, a changed meaning) bumps
 * SHMENV_ABI_VERSION, and the host refuses libraries of another version by name. A table
 * initialized by position should list every field, with NULL for an optional one it does not
 * provide (compilers warn about a positional initializer that stops short, and a new
 * header may append a field): designated initializers (C99) need not.
 *
 * Ownership and lifetime:
 * - The table, `envs`, and every string in them belong to the library and must stay valid
 *   while it is loaded (static data is the usual choice).
 * - `create` returns an env handle; the host calls `destroy` on it exactly once, and never
 *   uses it afterwards. The string `spec_json` returns belongs to the env and must stay
 *   valid until `destroy`.
 * - Every other `const char *` a function returns is an error message (NULL means
 *   success). The host copies it at once; it must stay valid until the next call into the
 *   library on the same thread (a string literal, or a buffer in the env or thread-local).
 *
 * Threading: an env handle is used by one thread at a time (today every call of a worker
 * comes from its main thread), and different handles may be used from different threads.
 * `create` may be called several times in one process (one call per env the worker hosts);
 * a library that can only have one env per process returns an error from the second
 * `create`, and the pool is run with one env per worker.
 *
 * What the library may do: anything inside its own memory, and write the observation rows
 * it is handed in `observe` (exactly the bytes of each array's row, nothing more). It must
 * not write outside those rows (the other rows belong to other envs and to the trainer),
 * keep the row pointers after `observe` returns, install signal handlers for SIGSEGV/SIGBUS
 * that hide a crash, fork, or read stdin. A crash, `abort` or `exit` in the library ends
 * the worker process and is reported to the trainer as that worker's death (restarted under
 * the restart policy); a hang is caught by the pool's step timeout.
 */
#ifndef SHMENV_ENV_H
#define SHMENV_ENV_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version this header describes. */
#define SHMENV_ABI_VERSION 1u

/* The name of the entry function, as the host looks it up. */
#define SHMENV_PLUGIN_ENTRY_NAME "shmenv_plugin_entry"

#if defined(__GNUC__) || defined(__clang__)
#define SHMENV_EXPORT __attribute__((visibility("default")))
#else
#define SHMENV_EXPORT
#endif

/* An env of the library: opaque to the host. */
typedef struct shmenv_env shmenv_env;

/* One env id the library provides. */
typedef struct shmenv_env_info {
    /* The id pools ask for, e.g. "CartPoleC-v1". */
    const char *id;
    /* One line about the env (shown by `shmenv list --plugin`). */
    const char *description;
    /* Time limit the host applies (truncation) unless the pool overrides it; 0 for none. */
    uint32_t max_episode_steps;
    /* Zero. */
    uint32_t reserved;
} shmenv_env_info;

/* What one step returned besides the observation. */
typedef struct shmenv_transition {
    float reward;
    /* 1 when the episode reached a terminal state, else 0. */
    uint8_t terminated;
    /* 1 when the env itself cut the episode short, else 0 (time limits are the host's). */
    uint8_t truncated;
} shmenv_transition;

/* The function table. Every field of version 1 up to `destroy` is required (non-NULL); the
 * fields after it are optional. */
typedef struct shmenv_plugin {
    /* SHMENV_ABI_VERSION. */
    uint32_t abi_version;
    /* sizeof(shmenv_plugin). */
    uint32_t size;
    /* Entries in `envs` (at least 1). */
    uint32_t num_envs;
    /* Zero. */
    uint32_t reserved;
    /* The env ids the library provides. */
    const shmenv_env_info *envs;

    /* Creates env `id` (one of `envs`) from `config_json`, a JSON object ("{}" when the pool
     * gives none). On success stores the handle in *env and returns NULL; otherwise returns
     * the reason (an unknown config key, a resource that is missing, a second env in a
     * library that allows one per process). */
    const char *(*create)(const char *id, const char *config_json, shmenv_env **env);

    /* The env's spaces, as the JSON form of shmenv's EnvSpec: observation arrays (name,
     * space) and the action space, e.g.
     *   {"observations":[{"name":"obs","space":{"type":"Box","dtype":"f32","shape":[4],
     *     "low":[-1],"high":[1]}}],"action":{"type":"Discrete","n":2,"start":0}}
     * Space types: Box (dtype f32 f64 u8 i8 i16 i32 i64, shape, low/high as one value or
     * one per element, "inf"/"-inf" allowed), Discrete (n, start), MultiDiscrete (nvec),
     * MultiBinary (n). Add "single_key_dict":true for a Dict of one array, and "info":true
     * to an array the env reports beside its observation (Python trainers get it in
     * infos[name], e.g. Atari's lives). The time limit
     * comes from `shmenv_env_info`, not from here. Must depend only on the id and config.
     * The string belongs to the env (valid until `destroy`). */
    const char *(*spec_json)(shmenv_env *env);

    /* Starts an episode: seeded with `seed` when `has_seed` is 1, else continuing the env's
     * own random stream. Returns NULL or an error message. */
    const char *(*reset)(shmenv_env *env, int has_seed, uint64_t seed);

    /* Applies one action, already checked against the action space by the trainer. It
     * points at the env's action row: one int64_t for Discrete, one int64_t per entry for
     * MultiDiscrete, one int8_t per flag for MultiBinary, the Box's dtype and shape for Box
     * (aligned for its type). Fills *out; returns NULL or an error message. */
    const char *(*step)(shmenv_env *env, const void *action, shmenv_transition *out);

    /* Writes the current observation: rows[k] points at this env's row of observation
     * array k (spec order) in shared memory, aligned for the array's dtype, exactly
     * product(shape) elements. Write every element (rows are reused). Returns NULL or an
     * error message. */
    const char *(*observe)(shmenv_env *env, void *const *rows);

    /* Frees the env. */
    void (*destroy)(shmenv_env *env);

    /* ---- Optional fields (appended within version 1: NULL, or absent from a smaller
     * `size`, when the library does not provide them). ---- */

    /* Steps and observes a batch of envs in one call, as `step` then `observe` on each env
     * whose `active[i]` is 1 would (envs whose flag is 0 are left alone: their `out[i]` and
     * rows are not touched). The host uses it, when present, for a synchronous batch of a
     * worker's envs: one call a batch instead of two per env.
     * - envs[i], i < count: env handles of this library, all of the same id (a worker's
     *   envs, in order); each is used by this call alone.
     * - env i's action is at (const char *)actions + i * action_bytes (aligned for its
     *   type, laid out as for `step`).
     * - env i's row of observation array k is at (char *)rows[k] + i * (the bytes of one
     *   row of array k: product(shape) * the dtype's size), aligned as for `observe`.
     * Returns NULL, or an error message after storing in *failed the index i of the env it
     * concerns (the host reports that env's failure, as for `step`). */
    const char *(*step_batch)(shmenv_env *const *envs, uint32_t count, const uint8_t *active,
                              const void *actions, uint32_t action_bytes,
                              shmenv_transition *out, void *const *rows, uint32_t *failed);
} shmenv_plugin;

/* The entry point every plugin defines: returns its table (static, valid while loaded). */
SHMENV_EXPORT const shmenv_plugin *shmenv_plugin_entry(void);

#ifdef __cplusplus
}
#endif

#endif /* SHMENV_ENV_H */
