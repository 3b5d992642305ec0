// Files from assets/ compiled into the binary, so `gannet make-model` works from any
// directory without the source tree.
#pragma once

#include <string_view>

namespace gannet::model {

struct EmbeddedFile {
  std::string_view name;      // file name to write, e.g. "tokenizer.json"
  std::string_view contents;
};

// The DeepSeek V3 tokenizer (tokenizer.json, tokenizer_config.json, its MIT LICENSE as
// LICENSE-tokenizer) that generated models carry.
const EmbeddedFile* deepseek_v3_tokenizer_files(int* count);

}  // namespace gannet::model
