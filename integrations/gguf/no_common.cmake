# Included by CMake right after llama.cpp's project() (CMAKE_PROJECT_llama.cpp_INCLUDE, `make gguf-env`):
# llama-cpp-python's CMakeLists forces LLAMA_BUILD_COMMON on (a cache variable), but its Python binding
# loads libllama and ggml alone, and only llama.cpp's tools, tests, examples and mtmd (all off here) link
# the common library. A normal variable in llama.cpp's scope hides the cached ON, so its ~50 sources
# (argument parsing, chat templates, JSON) are not compiled: about half of the build.
set(LLAMA_BUILD_COMMON OFF)
