# Included by CMake right after llama.cpp's project() (CMAKE_PROJECT_llama.cpp_INCLUDE, `make gguf-env`):
# llama-cpp-python's CMakeLists forces LLAMA_BUILD_COMMON on (a cache variable), but its Python binding
# loads libllama and ggml alone, and only llama.cpp's tools, tests, examples and mtmd (all off here) link
# the common library. A normal variable in llama.cpp's scope hides the cached ON, so its ~50 sources
# (argument parsing, chat templates, JSON) are not compiled: about half of the build.
set(LLAMA_BUILD_COMMON OFF)

# GGML_NATIVE compiles for this CPU (-march=native). Where the CPU reports AMX, ggml then multiplies q8_0 and
# K-quant weights with AMX tile instructions, which these VMs advertise but trap: SIGILL (`tilezero`) in
# ggml_backend_amx_mul_mat on the first q8_0 generation. Explicit -mno-* flags win over -march's, whatever
# their order, so AMX stays off and every other native extension (AVX-512, VNNI) stays on.
string(APPEND CMAKE_C_FLAGS " -mno-amx-tile -mno-amx-int8 -mno-amx-bf16")
string(APPEND CMAKE_CXX_FLAGS " -mno-amx-tile -mno-amx-int8 -mno-amx-bf16")
