// src/simd/fused.cu's kernels on the host (cuda_host.h), for the unit tests of
// src/simd/fused.rs, which build this file with g++ and run it:
//
//   fused_host DIR
//
// DIR/args holds `KERNEL GRID BLOCK OUT_LEN`, then the kernel's unsigned sizes in its order,
// then (split_heads only) eps. The kernel's array operands are DIR/NAME.bin, raw elements of
// the kernel's format (position_bias' index: u32; an absent side operand stands in for itself
// with the main operand, as the launch on a device passes it); its output is written to
// DIR/out.bin.

#include "cuda_host.h"

#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>

#include "../../src/simd/fused.cu"

namespace {

[[noreturn]] void fail(const std::string &what) {
    std::fprintf(stderr, "fused_host: %s\n", what.c_str());
    std::exit(2);
}

std::vector<char> bytes_of(const std::string &path, bool required) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        if (required) fail("cannot read " + path);
        return {};
    }
    return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

template <typename T>
struct Operands {
    std::map<std::string, std::vector<T>> arrays;

    // NAME.bin's elements, read once (a second `get` returns the same array: the pointers the
    // kernel is handed stay valid), or `stand_in`'s when the file is absent.
    const T *get(const std::string &dir, const std::string &name, const std::string &stand_in) {
        if (auto found = arrays.find(name); found != arrays.end()) return found->second.data();
        auto bytes = bytes_of(dir + "/" + name + ".bin", name == stand_in);
        if (bytes.empty()) return get(dir, stand_in, stand_in);
        if (bytes.size() % sizeof(T) != 0) fail(name + ".bin is not whole elements");
        std::vector<T> values(bytes.size() / sizeof(T));
        std::memcpy(values.data(), bytes.data(), bytes.size());
        return (arrays[name] = std::move(values)).data();
    }
};

template <typename T, typename Split, typename Swap, typename Glu, typename Bias>
void run(const std::string &dir, const std::string &name, std::istream &args, Split split,
         Swap swap, Glu glu, Bias bias) {
    unsigned int grid, block;
    unsigned long long len;
    if (!(args >> grid >> block >> len)) fail("args: GRID BLOCK OUT_LEN");
    std::vector<T> out(len);
    T *o = out.data();
    Operands<T> in;
    if (name.rfind("split_heads_", 0) == 0) {
        unsigned int b, t, heads, kv, d, q_from, p, has_norm, has_rope;
        float eps;
        if (!(args >> b >> t >> heads >> kv >> d >> q_from >> p >> has_norm >> has_rope >> eps))
            fail("args: split_heads' sizes");
        const T *all = in.get(dir, "all", "all");
        const T *qn = in.get(dir, "q_norm", "all"), *kn = in.get(dir, "k_norm", "all");
        const T *cos = in.get(dir, "cos", "all"), *sin = in.get(dir, "sin", "all");
        const T *pk = in.get(dir, "prefix_k", "all"), *pv = in.get(dir, "prefix_v", "all");
        launch(grid, block, [&] {
            split(all, qn, kn, cos, sin, pk, pv, o, b, t, heads, kv, d, q_from, p, has_norm,
                  has_rope, eps);
        });
    } else if (name.rfind("swap_axes_", 0) == 0) {
        unsigned int a, b, c, t, d;
        if (!(args >> a >> b >> c >> t >> d)) fail("args: swap_axes' sizes");
        const T *x = in.get(dir, "x", "x");
        launch(grid, block, [&] { swap(x, o, a, b, c, t, d); });
    } else if (name.rfind("glu_", 0) == 0) {
        unsigned int inputs, act;
        if (!(args >> inputs >> act)) fail("args: glu's size and activation");
        const T *x = in.get(dir, "x", "x");
        launch(grid, block, [&] { glu(x, o, inputs, act); });
    } else if (name.rfind("position_bias_", 0) == 0) {
        unsigned int b, heads, t, r, has_c2p, has_p2c;
        if (!(args >> b >> heads >> t >> r >> has_c2p >> has_p2c))
            fail("args: position_bias' sizes");
        const T *c2p = in.get(dir, "c2p", "c2p"), *p2c = in.get(dir, "p2c", "c2p");
        Operands<unsigned int> indices;
        const unsigned int *index = indices.get(dir, "index", "index");
        launch(grid, block, [&] { bias(c2p, p2c, index, o, b, heads, t, r, has_c2p, has_p2c); });
    } else {
        fail("no kernel " + name);
    }
    std::ofstream file(dir + "/out.bin", std::ios::binary);
    file.write(reinterpret_cast<const char *>(out.data()), (std::streamsize)(len * sizeof(T)));
    if (!file) fail("cannot write out.bin");
}

}  // namespace

int main(int argc, char **argv) {
    if (argc != 2) fail("usage: fused_host DIR");
    const std::string dir = argv[1];
    auto text = bytes_of(dir + "/args", true);
    std::istringstream args(std::string(text.begin(), text.end()));
    std::string name;
    args >> name;
    const std::string format = name.substr(name.rfind('_') + 1);
#define RUN(NAME, T)                                                                    \
    run<T>(dir, name, args, split_heads_##NAME, swap_axes_##NAME, glu_##NAME,          \
           position_bias_##NAME)
    if (format == "f32") {
        RUN(f32, float);
    } else if (format == "f16") {
        RUN(f16, __half);
    } else if (format == "bf16") {
        RUN(bf16, __nv_bfloat16);
    } else {
        fail("no format " + format);
    }
    return 0;
}
