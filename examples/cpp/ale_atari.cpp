// Atari games of the Arcade Learning Environment (ALE) as a shmenv plugin, with EnvPool's
// preprocessing of its `*-v5` envs: every step repeats the action for `frame_skip` frames,
// takes the per-pixel max of the last two frames in grayscale, shrinks it to 84x84 with
// OpenCV's INTER_AREA interpolation (a port below: equal to cv2.resize byte for byte),
// and stacks the last 4 such frames, written straight into the env's shared-memory row.
// Resets do up to 30 no-ops and press FIRE in games that have it; episodic life and reward
// clipping are options. With the same ROM, seed and actions, the frames equal EnvPool's.
//
//   bash examples/cpp/build_ale.sh ./libale_atari.so   # builds ALE from the ale-py sdist
//
// Env ids: `PongC-v5` (Pong) and `AtariC-v5` (the game named by the config's "game").
// Config (JSON object): "rom_dir" (the folder of the ROMs, e.g. ale_py's `roms` folder;
// the file is GAME.bin) or "rom" (a ROM file), and EnvPool's option names: stack_num,
// frame_skip, noop_max, episodic_life, reward_clip, use_fire_reset, img_height, img_width,
// full_action_space, repeat_action_probability (gray_scale and use_inter_area_resize
// accept only their defaults, true). Time limits are the pool's (27,000 steps by default).
#include "shmenv_env.hpp"

#include "ale/ale_interface.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

const int kRawHeight = 210, kRawWidth = 160;
const uint32_t kMaxEpisodeSteps = 27000;  // EnvPool's: 108,000 frames at frame skip 4

// ---- A flat JSON object of numbers, booleans and strings (the pool's config) ----

struct ConfigValue {
    enum Kind { Number, Bool, String } kind = Number;
    double number = 0;
    bool boolean = false;
    std::string text;
};

class ConfigParser {
    const std::string &s;
    size_t i = 0;

    [[noreturn]] void fail(const std::string &what) const {
        throw std::invalid_argument("config is not a flat JSON object (" + what + " at byte " +
                                    std::to_string(i) + "): " + s);
    }
    void skip_space() {
        while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) i++;
    }
    bool eat(char c) {
        skip_space();
        if (i < s.size() && s[i] == c) return ++i, true;
        return false;
    }
    std::string string() {
        if (!eat('"')) fail("expected a string");
        std::string out;
        while (i < s.size() && s[i] != '"') {
            char c = s[i++];
            if (c != '\\') {
                out += c;
                continue;
            }
            if (i >= s.size()) break;
            char e = s[i++];
            static const std::string plain = "\"\\/", from = "bfnrt", to = "\b\f\n\r\t";
            if (plain.find(e) != std::string::npos) {
                out += e;
            } else if (from.find(e) != std::string::npos) {
                out += to[from.find(e)];
            } else if (e == 'u' && i + 4 <= s.size()) {
                unsigned long code = std::stoul(s.substr(i, 4), nullptr, 16);
                if (code >= 0x80) fail("a non-ASCII \\u escape");
                out += static_cast<char>(code), i += 4;
            } else {
                fail("a bad escape");
            }
        }
        if (!eat('"')) fail("an unterminated string");
        return out;
    }
    ConfigValue value() {
        skip_space();
        ConfigValue v;
        if (i < s.size() && s[i] == '"') {
            v.kind = ConfigValue::String, v.text = string();
        } else if (s.compare(i, 4, "true") == 0 || s.compare(i, 5, "false") == 0) {
            v.kind = ConfigValue::Bool, v.boolean = s[i] == 't', i += v.boolean ? 4 : 5;
        } else {
            const char *start = s.c_str() + i;
            char *end = nullptr;
            v.number = std::strtod(start, &end);
            if (end == start) fail("expected a number, a boolean or a string");
            i += static_cast<size_t>(end - start);
        }
        return v;
    }

  public:
    explicit ConfigParser(const std::string &text) : s(text) {}
    std::map<std::string, ConfigValue> parse() {
        std::map<std::string, ConfigValue> out;
        if (!eat('{')) fail("expected '{'");
        if (!eat('}')) {
            do {
                std::string key = string();
                if (!eat(':')) fail("expected ':'");
                out[key] = value();
            } while (eat(','));
            if (!eat('}')) fail("expected ',' or '}'");
        }
        skip_space();
        if (i != s.size()) fail("text after the object");
        return out;
    }
};

// EnvPool's options (its names and defaults), read from the config; refuses anything else.
struct Options {
    std::string rom;
    int stack_num = 4, frame_skip = 4, noop_max = 30, img_height = 84, img_width = 84;
    bool episodic_life = false, reward_clip = false, use_fire_reset = true, full_action_space = false;
    double repeat_action_probability = 0.0;

    Options(const std::string &env_id, const std::string &json);

  private:
    static std::string known_keys() {
        return "rom_dir, rom, game (AtariC-v5), stack_num, frame_skip, noop_max, episodic_life, reward_clip, "
               "use_fire_reset, img_height, img_width, full_action_space, repeat_action_probability, "
               "gray_scale, use_inter_area_resize";
    }
    static int integer(const std::string &key, const ConfigValue &v, int lo, int hi) {
        if (v.kind != ConfigValue::Number || v.number != std::floor(v.number) || v.number < lo || v.number > hi) {
            throw std::invalid_argument("config \"" + key + "\" must be an integer in [" + std::to_string(lo) + ", " +
                                        std::to_string(hi) + "], got " + (v.kind == ConfigValue::Number ? std::to_string(v.number) : "a non-number"));
        }
        return static_cast<int>(v.number);
    }
    static bool boolean(const std::string &key, const ConfigValue &v) {
        if (v.kind != ConfigValue::Bool) throw std::invalid_argument("config \"" + key + "\" must be true or false");
        return v.boolean;
    }
    static std::string text(const std::string &key, const ConfigValue &v) {
        if (v.kind != ConfigValue::String || v.text.empty())
            throw std::invalid_argument("config \"" + key + "\" must be a non-empty string");
        return v.text;
    }
    std::string rom_path(const std::string &env_id, std::map<std::string, ConfigValue> &config);
};

Options::Options(const std::string &env_id, const std::string &json) {
    auto config = ConfigParser(json).parse();
    rom = rom_path(env_id, config);
    for (const auto &kv : config) {
        const std::string &k = kv.first;
        const ConfigValue &v = kv.second;
        if (k == "stack_num") stack_num = integer(k, v, 1, 64);
        else if (k == "frame_skip") frame_skip = integer(k, v, 1, 64);
        else if (k == "noop_max") noop_max = integer(k, v, 1, 100000);
        else if (k == "img_height") img_height = integer(k, v, 1, kRawHeight);
        else if (k == "img_width") img_width = integer(k, v, 1, kRawWidth);
        else if (k == "episodic_life") episodic_life = boolean(k, v);
        else if (k == "reward_clip") reward_clip = boolean(k, v);
        else if (k == "use_fire_reset") use_fire_reset = boolean(k, v);
        else if (k == "full_action_space") full_action_space = boolean(k, v);
        else if (k == "repeat_action_probability") {
            if (v.kind != ConfigValue::Number || !(v.number >= 0 && v.number <= 1))
                throw std::invalid_argument("config \"repeat_action_probability\" must be a number in [0, 1]");
            repeat_action_probability = v.number;
        } else if (k == "gray_scale" || k == "use_inter_area_resize") {
            if (!boolean(k, v)) throw std::invalid_argument("config \"" + k + "\": only true (grayscale, INTER_AREA) is implemented");
        } else if (k == "max_episode_steps") {
            throw std::invalid_argument("config \"max_episode_steps\": time limits are the pool's: pass max_episode_steps "
                                        "to the pool (make_vec) instead");
        } else {
            throw std::invalid_argument("unknown config key \"" + k + "\"; the keys are: " + known_keys());
        }
    }
}

// The ROM file: "rom", or "rom_dir"/GAME.bin; removes those keys from `config`.
std::string Options::rom_path(const std::string &env_id, std::map<std::string, ConfigValue> &config) {
    auto take = [&](const char *key) {
        auto it = config.find(key);
        if (it == config.end()) return std::string();
        std::string value = text(key, it->second);
        config.erase(it);
        return value;
    };
    std::string file = take("rom"), dir = take("rom_dir"), game = take("game");
    if (env_id == "PongC-v5") {
        if (!game.empty() && game != "pong")
            throw std::invalid_argument("PongC-v5 plays pong, not \"" + game + "\": use AtariC-v5 for other games");
        game = "pong";
    }
    if (!file.empty() && !dir.empty()) throw std::invalid_argument("give \"rom\" or \"rom_dir\", not both");
    if (file.empty()) {
        if (dir.empty())
            throw std::invalid_argument(env_id + " needs the ROM: config \"rom_dir\" (e.g. the folder of ale_py.roms) or "
                                                 "\"rom\" (a ROM file)");
        if (game.empty())
            throw std::invalid_argument("AtariC-v5 needs config \"game\" (the ROM's name in rom_dir, e.g. \"breakout\")");
        file = dir + "/" + game + ".bin";
    }
    if (!std::filesystem::is_regular_file(file))
        throw std::invalid_argument("no ROM file " + file + ": give config \"rom_dir\" as the folder of ale_py's ROMs "
                                    "(python -c 'import ale_py.roms, os; print(os.path.dirname(ale_py.roms.__file__))')");
    return file;
}

// ---- OpenCV's INTER_AREA resize for shrinking (u8, one channel), in its arithmetic ----

// One source pixel's share of one destination pixel along an axis.
struct AreaWeight {
    int dst, src;
    float alpha;
};

// The weights along an axis of `src_size` pixels shrunk to `dst_size`, as OpenCV computes
// them (computeResizeAreaTab), in the same order and the same float rounding.
std::vector<AreaWeight> area_weights(int src_size, int dst_size) {
    const double scale = 1.0 / (static_cast<double>(dst_size) / src_size);
    std::vector<AreaWeight> tab;
    for (int d = 0; d < dst_size; d++) {
        double f1 = d * scale, f2 = f1 + scale;
        double cell = std::min(scale, src_size - f1);
        int s1 = static_cast<int>(std::ceil(f1)), s2 = static_cast<int>(std::floor(f2));
        s2 = std::min(s2, src_size - 1);
        s1 = std::min(s1, s2);
        if (s1 - f1 > 1e-3) tab.push_back({d, s1 - 1, static_cast<float>((s1 - f1) / cell)});
        for (int s = s1; s < s2; s++) tab.push_back({d, s, static_cast<float>(1.0 / cell)});
        if (f2 - s2 > 1e-3) tab.push_back({d, s2, static_cast<float>(std::min(std::min(f2 - s2, 1.0), cell) / cell)});
    }
    return tab;
}

// One source row's horizontal pass: out[d] = sum over t of row[at[t][d]] * alpha[t][d], from
// 0, in t's order. Compiled twice; the AVX2 copy (wider vectors, the same float operations:
// no FMA) is chosen at load time where the processor has AVX2 (~10 us a step faster here).
__attribute__((target_clones("avx2", "default"))) void horizontal_pass(
    const uint8_t *src, int src_w, const int *at, const float *alpha, int taps, float *__restrict row,
    float *__restrict out, int dst_w) {
    for (int x = 0; x < src_w; x++) row[x] = src[x];
    for (int d = 0; d < dst_w; d++) out[d] = 0.0f;
    for (int t = 0; t < taps; t++) {  // per column, the weights in OpenCV's order
        const int *__restrict at_t = at + static_cast<size_t>(t) * dst_w;
        const float *__restrict alpha_t = alpha + static_cast<size_t>(t) * dst_w;
        for (int d = 0; d < dst_w; d++) out[d] += row[at_t[d]] * alpha_t[d];
    }
}

// OpenCV's resizeArea_<uchar, float> computes, for every entry of the row weights, a
// horizontal row `buf` (buf[dx] = sum over the column weights of S[sx] * alpha, in table
// order, from 0) and adds beta * buf into the destination row's float sum (from 0), then
// rounds half to even. This does the same additions in the same order, each source row's
// horizontal pass once, with every column's weights padded to `taps` (a weight of 0 adds
// an exact 0), so every byte equals cv2.resize's.
class AreaResize {
    int src_h, src_w, dst_h, dst_w, taps = 1;
    std::vector<int> column_src;      // [taps][dst_w]
    std::vector<float> column_alpha;  // [taps][dst_w]
    std::vector<AreaWeight> ys;
    std::vector<float> src_row, rows;  // one source row as floats; every row's horizontal pass

    static uint8_t saturate(float v) {
        long r = std::lrint(v);  // round half to even, as cvRound
        return static_cast<uint8_t>(std::min(255L, std::max(0L, r)));
    }

  public:
    AreaResize(int src_h_, int src_w_, int dst_h_, int dst_w_)
        : src_h(src_h_), src_w(src_w_), dst_h(dst_h_), dst_w(dst_w_), ys(area_weights(src_h_, dst_h_)),
          src_row(src_w_), rows(static_cast<size_t>(src_h_) * dst_w_) {
        std::vector<AreaWeight> xs = area_weights(src_w, dst_w);
        std::vector<int> count(dst_w, 0);
        for (const AreaWeight &x : xs) taps = std::max(taps, ++count[x.dst]);
        column_src.assign(static_cast<size_t>(dst_w) * taps, 0);
        column_alpha.assign(static_cast<size_t>(dst_w) * taps, 0.0f);
        std::fill(count.begin(), count.end(), 0);
        for (const AreaWeight &x : xs) {
            size_t at = static_cast<size_t>(count[x.dst]++) * dst_w + x.dst;
            column_src[at] = x.src, column_alpha[at] = x.alpha;
        }
    }

    // src: src_h x src_w bytes; dst: dst_h x dst_w bytes.
    void operator()(const uint8_t *src, uint8_t *dst) {
        for (int y = 0; y < src_h; y++) {
            horizontal_pass(src + static_cast<size_t>(y) * src_w, src_w, column_src.data(), column_alpha.data(), taps,
                            src_row.data(), rows.data() + static_cast<size_t>(y) * dst_w, dst_w);
        }
        float *__restrict sum = src_row.data();  // reused: dst_w <= src_w
        size_t k = 0;
        for (int dy = 0; dy < dst_h; dy++) {
            std::fill(sum, sum + dst_w, 0.0f);
            for (; k < ys.size() && ys[k].dst == dy; k++) {
                const float *__restrict row = rows.data() + static_cast<size_t>(ys[k].src) * dst_w;
                const float beta = ys[k].alpha;
                for (int d = 0; d < dst_w; d++) sum[d] += beta * row[d];
            }
            uint8_t *out = dst + static_cast<size_t>(dy) * dst_w;
            for (int d = 0; d < dst_w; d++) out[d] = saturate(sum[d]);
        }
    }
};

// A draw uniform on 0..n-1 (n >= 1) as libstdc++'s std::uniform_int_distribution<int> makes
// it from a 32-bit generator (GCC 11 and newer, EnvPool's: Lemire's multiply and reject),
// written out so that the draws do not depend on the C++ library the plugin is built with
// (libc++'s distribution, which Zig's compiler links, draws other numbers).
int uniform_below(std::mt19937 &rng, uint32_t n) {
    uint64_t product = uint64_t{rng()} * n;
    auto low = static_cast<uint32_t>(product);
    if (low < n) {
        uint32_t threshold = (0u - n) % n;
        while (low < threshold) {
            product = uint64_t{rng()} * n;
            low = static_cast<uint32_t>(product);
        }
    }
    return static_cast<int>(product >> 32);
}

// ---- The env ----

class AtariEnv {
    Options opt;
    ale::ALEInterface ale;
    ale::ActionVect actions;
    bool fire_reset = false;
    std::unique_ptr<ale::ALEState> loaded;  // the emulator as loadROM left it
    std::mt19937 noop_rng{0};       // draws the no-op count of each reset, as EnvPool's
    int lives = 0;
    float unclipped_reward = 0;  // the last step's reward before reward_clip (EnvPool's info["reward"])
    bool life_lost = false;         // the last episode ended by episodic life, not game over
    uint8_t gray_of[256];           // ALE's grayscale of each palette index
    std::vector<uint8_t> pooled;    // the step's frame: max of its last two, in grayscale
    std::vector<uint8_t> before_last;  // the palette indices of the step's next-to-last frame
    AreaResize resize;
    std::vector<uint8_t> stack;     // stack_num resized frames, a ring; `newest` is the last
    int newest = 0;
    std::string spec;

    size_t frame_bytes() const { return static_cast<size_t>(opt.img_height) * opt.img_width; }
    void gray_frame(const uint8_t *frame);
    void pool_frames(const uint8_t *next_to_last, const uint8_t *last);
    void push_frame(bool fill_stack);

  public:
    AtariEnv(const std::string &env_id, const std::string &config);
    const char *spec_json() const { return spec.c_str(); }
    void reset(bool has_seed, uint64_t seed);
    shmenv_transition step(const void *action);
    void observe(void *const *rows) const;
};

AtariEnv::AtariEnv(const std::string &env_id, const std::string &config)
    : opt(env_id, config), resize(kRawHeight, kRawWidth, opt.img_height, opt.img_width),
      stack(frame_bytes() * opt.stack_num) {
    if (!ale::ALEInterface::isSupportedROM(opt.rom))
        throw std::invalid_argument("ALE does not support the ROM " + opt.rom + " (its MD5 is not one of ALE's games)");
    ale.setFloat("repeat_action_probability", static_cast<float>(opt.repeat_action_probability));
    ale.setInt("random_seed", 0);
    ale.loadROM(opt.rom);  // ~0.1 s: done once, a seeded reset restores its state instead
    loaded = std::make_unique<ale::ALEState>(ale.cloneState());
    actions = opt.full_action_space ? ale.getLegalActionSet() : ale.getMinimalActionSet();
    fire_reset = opt.use_fire_reset && std::find(actions.begin(), actions.end(), ale::PLAYER_A_FIRE) != actions.end();
    uint8_t index[256];
    for (int i = 0; i < 256; i++) index[i] = static_cast<uint8_t>(i);
    ale.theOSystem->colourPalette().applyPaletteGrayscale(gray_of, index, 256);
    pooled.assign(static_cast<size_t>(kRawHeight) * kRawWidth, 0);
    before_last.assign(pooled.size(), 0);
    spec = R"({"observations":[{"name":"obs","space":{"type":"Box","dtype":"u8","shape":[)" +
           std::to_string(opt.stack_num) + "," + std::to_string(opt.img_height) + "," + std::to_string(opt.img_width) +
           R"(],"low":0,"high":255}},{"name":"lives","space":{"type":"Box","dtype":"i32","shape":[],"low":0,)"
           R"("high":255},"info":true},{"name":"reward","space":{"type":"Box","dtype":"f32","shape":[],)"
           R"("low":"-inf","high":"inf"},"info":true}],"action":{"type":"Discrete","n":)" + std::to_string(actions.size()) +
           R"(,"start":0}})";
}

// `pooled` = the grayscale of `frame` (palette indices).
void AtariEnv::gray_frame(const uint8_t *frame) {
    uint8_t *__restrict out = pooled.data();
    const size_t n = pooled.size();
    for (size_t i = 0; i < n; i++) out[i] = gray_of[frame[i]];
}

// `pooled` = the per-pixel max of the grayscale of two frames (palette indices). EnvPool
// converts both frames to grayscale and takes the max; this does it in one pass.
void AtariEnv::pool_frames(const uint8_t *next_to_last, const uint8_t *last) {
    uint8_t *__restrict out = pooled.data();
    const size_t n = pooled.size();
    for (size_t i = 0; i < n; i++) out[i] = std::max(gray_of[next_to_last[i]], gray_of[last[i]]);
}

// Resizes `pooled` into the stack's next slot; `fill_stack` copies it into every slot (a new
// game's first frame).
void AtariEnv::push_frame(bool fill_stack) {
    newest = (newest + 1) % opt.stack_num;
    uint8_t *slot = stack.data() + newest * frame_bytes();
    resize(pooled.data(), slot);
    if (fill_stack) {
        for (int k = 0; k < opt.stack_num; k++) {
            if (k != newest) std::memcpy(stack.data() + k * frame_bytes(), slot, frame_bytes());
        }
    }
}

void AtariEnv::reset(bool has_seed, uint64_t seed) {
    if (has_seed) {
        // As if the ROM were loaded afresh with ALE's "random_seed" `s` (EnvPool loads each
        // env so): the emulator (its own random stream included) as loadROM left it, and
        // ALE's stream (sticky actions) seeded with `s`, as loadROM seeds it.
        auto s = static_cast<uint32_t>(seed & 0x7fffffff);
        ale.restoreState(*loaded);
        ale.environment->getEnvironmentRNG().seed(s);
        noop_rng.seed(s);
        life_lost = false;
    }
    int noops = uniform_below(noop_rng, static_cast<uint32_t>(opt.noop_max)) + 1 - (fire_reset ? 1 : 0);
    bool new_game = !(opt.episodic_life && life_lost && !ale.game_over());
    if (new_game) ale.reset_game();
    for (; noops > 0; noops--) {
        ale.act(ale::PLAYER_A_NOOP);
        if (ale.game_over()) ale.reset_game(), new_game = true;
    }
    if (fire_reset) ale.act(ale::PLAYER_A_FIRE);
    gray_frame(ale.getScreen().getArray());
    push_frame(new_game);
    lives = ale.lives();
    unclipped_reward = 0;
    life_lost = false;
}

shmenv_transition AtariEnv::step(const void *action) {
    const ale::Action a = actions[static_cast<size_t>(*static_cast<const int64_t *>(action))];
    float reward = 0;
    bool over = false;
    // The frame is the max of the last two frames. As EnvPool's: when the game ends one
    // frame early, its last frame alone; two or more frames early, the previous step's frame
    // again; with a frame skip of 1, the frame.
    bool have_next_to_last = false;
    int skip = opt.frame_skip;
    for (; skip > 0 && !over; skip--) {
        reward += static_cast<float>(ale.act(a));
        over = ale.game_over();
        const uint8_t *screen = ale.getScreen().getArray();
        if (skip == 2) {
            std::memcpy(before_last.data(), screen, before_last.size());
            have_next_to_last = true;
        } else if (skip == 1) {
            if (have_next_to_last) pool_frames(before_last.data(), screen);
            else gray_frame(screen);
        }
    }
    if (skip == 1 && have_next_to_last) gray_frame(before_last.data());
    push_frame(false);
    int now = ale.lives();
    life_lost = !over && opt.episodic_life && 0 < now && now < lives;
    lives = now;
    unclipped_reward = reward;
    if (opt.reward_clip) reward = static_cast<float>((reward > 0) - (reward < 0));
    return shmenv_transition{reward, static_cast<uint8_t>(over || life_lost), 0};
}

// The stack, oldest frame first, straight into the env's row of shared memory.
void AtariEnv::observe(void *const *rows) const {
    uint8_t *out = static_cast<uint8_t *>(rows[0]);
    for (int k = 1; k <= opt.stack_num; k++) {
        int slot = (newest + k) % opt.stack_num;
        std::memcpy(out, stack.data() + slot * frame_bytes(), frame_bytes());
        out += frame_bytes();
    }
    *static_cast<int32_t *>(rows[1]) = lives;  // reported as infos["lives"], as EnvPool does
    *static_cast<float *>(rows[2]) = unclipped_reward;  // infos["reward"]
}

}  // namespace

const shmenv_plugin *shmenv_plugin_entry(void) {
    ale::Logger::setMode(ale::Logger::Error);
    static const shmenv_env_info envs[] = {
        {"PongC-v5", "Pong (ALE) with EnvPool's Pong-v5 preprocessing: 4x84x84 u8 frames (C++)", kMaxEpisodeSteps, 0},
        {"AtariC-v5", "an ALE game (config \"game\") with EnvPool's v5 preprocessing (C++)", kMaxEpisodeSteps, 0},
    };
    return shmenv::plugin<AtariEnv>(envs);
}
