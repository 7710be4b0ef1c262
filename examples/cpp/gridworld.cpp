// A grid world as a shmenv plugin, in C++: a class wrapped by shmenv_env.hpp. The agent
// (128) walks an 8x8 u8 image to the goal (255); reward 1 there, -0.01 per other step.
//
//   g++ -std=c++17 -O2 -shared -fPIC -I worker/include -o libgridworld.so examples/cpp/gridworld.cpp
//   shmenv bench --plugin ./libgridworld.so --env GridWorld-v0 --num-envs 64
#include "shmenv_env.hpp"

#include <random>
#include <stdexcept>

class GridWorld {
    static const int N = 8;
    int ax = 0, ay = 0, gx = 0, gy = 0;
    std::mt19937_64 rng{0};

  public:
    static const char *spec_json() {
        return R"({"observations":[{"name":"obs","space":{"type":"Box","dtype":"u8","shape":[8,8],"low":0,"high":255}}],
                   "action":{"type":"Discrete","n":4,"start":0}})";
    }
    explicit GridWorld(const std::string &config) {
        if (config != "{}") throw std::invalid_argument("GridWorld-v0 takes no config keys, got " + config);
    }
    void reset(bool has_seed, uint64_t seed) {
        if (has_seed) rng.seed(seed);
        do {
            ax = rng() % N, ay = rng() % N, gx = rng() % N, gy = rng() % N;
        } while (ax == gx && ay == gy);
    }
    shmenv_transition step(const void *action) {
        static const int dx[] = {1, -1, 0, 0}, dy[] = {0, 0, 1, -1};
        int64_t a = *static_cast<const int64_t *>(action);
        ax = std::min(N - 1, std::max(0, ax + dx[a]));
        ay = std::min(N - 1, std::max(0, ay + dy[a]));
        bool reached = ax == gx && ay == gy;
        return shmenv_transition{reached ? 1.0f : -0.01f, reached, 0};
    }
    void observe(void *const *rows) {
        uint8_t *image = static_cast<uint8_t *>(rows[0]);
        for (int i = 0; i < N * N; i++) image[i] = 0;
        image[gy * N + gx] = 255;
        image[ay * N + ax] = 128;
    }
};

const shmenv_plugin *shmenv_plugin_entry(void) {
    static const shmenv_env_info envs[] = {{"GridWorld-v0", "8x8 grid world, u8 image (C++)", 100, 0}};
    return shmenv::plugin<GridWorld>(envs);
}
