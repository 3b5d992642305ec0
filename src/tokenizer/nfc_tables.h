// Unicode data for NFC (generated into nfc_tables.cpp by tools/gen_nfc_tables.py).
#pragma once

#include <cstdint>

namespace gannet::tokenizer::nfc_data {

struct Decomposition {
  uint32_t code_point, first, second;  // second == 0: singleton decomposition
  uint8_t composes;                     // 1: a primary composite, rebuilt by composition
};

struct CombiningClassRange {
  uint32_t first, last;
  uint8_t combining_class;
};

extern const Decomposition kDecompositions[];  // sorted by code_point
extern const int kNumDecompositions;
extern const CombiningClassRange kCombiningClasses[];  // sorted, disjoint
extern const int kNumCombiningClasses;

}  // namespace gannet::tokenizer::nfc_data
