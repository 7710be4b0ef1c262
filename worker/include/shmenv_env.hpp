// shmenv_env.hpp: a C++ class as a shmenv plugin env (C++11, header only, on top of
// shmenv_env.h). The class provides:
//
//   const char *spec_json();                   // its spaces, as in shmenv_env.h (may be
//                                              // static; may depend on the config)
//   explicit Env(const std::string &config);   // a JSON object; throw to refuse it
//     (or Env(const std::string &id, const std::string &config) for a class of several ids)
//   void reset(bool has_seed, uint64_t seed);
//   shmenv_transition step(const void *action);
//   void observe(void *const *rows);
//
// and the library's entry returns shmenv::plugin<Env>(envs). Exceptions never cross into
// the host: their what() is returned as the call's error text (the trainer shows it with
// the env id). One env object per handle; the host uses a handle from one thread at a time.
#ifndef SHMENV_ENV_HPP
#define SHMENV_ENV_HPP

#include "shmenv_env.h"

#include <cstddef>
#include <exception>
#include <string>
#include <type_traits>

namespace shmenv {

template <class Env>
class Adapter {
    struct Holder {
        explicit Holder(const std::string &config) : env(config) {}
        Holder(const std::string &id, const std::string &config) : env(id, config) {}
        Env env;
        std::string error;  // the last error text, valid until the next call on this handle
    };

    static Holder *holder(shmenv_env *handle) { return reinterpret_cast<Holder *>(handle); }

    // Runs `f`; returns NULL, or the exception's text kept in `error`.
    template <class F>
    static const char *guard(std::string &error, F f) {
        try {
            f();
            return nullptr;
        } catch (const std::exception &e) {
            error = e.what();
        } catch (...) {
            error = "unknown C++ exception";
        }
        return error.c_str();
    }

    static Holder *make(const char *id, const char *config, std::true_type) { return new Holder(id, config); }
    static Holder *make(const char *, const char *config, std::false_type) { return new Holder(config); }

  public:
    static const char *create(const char *id, const char *config, shmenv_env **out) {
        static thread_local std::string error;
        return guard(error, [&] {
            *out = reinterpret_cast<shmenv_env *>(
                make(id, config, std::is_constructible<Env, const std::string &, const std::string &>()));
        });
    }
    static const char *spec_json(shmenv_env *h) { return holder(h)->env.spec_json(); }
    static const char *reset(shmenv_env *h, int has_seed, uint64_t seed) {
        return guard(holder(h)->error, [&] { holder(h)->env.reset(has_seed != 0, seed); });
    }
    static const char *step(shmenv_env *h, const void *action, shmenv_transition *out) {
        return guard(holder(h)->error, [&] { *out = holder(h)->env.step(action); });
    }
    static const char *observe(shmenv_env *h, void *const *rows) {
        return guard(holder(h)->error, [&] { holder(h)->env.observe(rows); });
    }
    static void destroy(shmenv_env *h) { delete holder(h); }
};

// The function table of a library whose env ids `envs` are all made by `Env`.
template <class Env, std::size_t N>
const shmenv_plugin *plugin(const shmenv_env_info (&envs)[N]) {
    static const shmenv_plugin table = {
        SHMENV_ABI_VERSION, sizeof(shmenv_plugin), static_cast<uint32_t>(N), 0, envs,
        Adapter<Env>::create, Adapter<Env>::spec_json, Adapter<Env>::reset,
        Adapter<Env>::step, Adapter<Env>::observe, Adapter<Env>::destroy,
        nullptr,  // step_batch: envs are stepped one call at a time
    };
    return &table;
}

}  // namespace shmenv

#endif  // SHMENV_ENV_HPP
