// The integer type of a token id, shared by every tokenizer stage and its callers.
#pragma once

#include <cstdint>

namespace gannet::tokenizer {

using TokenId = int32_t;

}  // namespace gannet::tokenizer
