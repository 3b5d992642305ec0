#include "model/embedded_assets.h"

// GANNET_ASSETS_DIR (a string literal) is set by CMake; .incbin copies the files into
// .rodata at build time.
#define GANNET_INCBIN(sym, file)                                            \
  __asm__(".section .rodata\n"                                              \
          ".global " #sym "_begin\n" #sym "_begin:\n"                       \
          ".incbin \"" GANNET_ASSETS_DIR "/" file "\"\n"                  \
          ".global " #sym "_end\n" #sym "_end:\n"                           \
          ".byte 0\n"                                                       \
          ".previous\n");                                                   \
  extern "C" const char sym##_begin[];                                      \
  extern "C" const char sym##_end[];

GANNET_INCBIN(gannet_dsv3_tokenizer_json, "tokenizers/deepseek-v3/tokenizer.json")
GANNET_INCBIN(gannet_dsv3_tokenizer_config, "tokenizers/deepseek-v3/tokenizer_config.json")
GANNET_INCBIN(gannet_dsv3_license, "tokenizers/deepseek-v3/LICENSE")

namespace gannet::model {

const EmbeddedFile* deepseek_v3_tokenizer_files(int* count) {
  static const EmbeddedFile files[] = {
      {"tokenizer.json", {gannet_dsv3_tokenizer_json_begin, size_t(gannet_dsv3_tokenizer_json_end - gannet_dsv3_tokenizer_json_begin)}},
      {"tokenizer_config.json", {gannet_dsv3_tokenizer_config_begin, size_t(gannet_dsv3_tokenizer_config_end - gannet_dsv3_tokenizer_config_begin)}},
      {"LICENSE-tokenizer", {gannet_dsv3_license_begin, size_t(gannet_dsv3_license_end - gannet_dsv3_license_begin)}},
  };
  *count = 3;
  return files;
}

}  // namespace gannet::model
