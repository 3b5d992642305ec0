#!/usr/bin/env python3
"""Convert a gannet DeepSeek-V4 checkpoint to GGUF with llama.cpp's own converter.

Side-by-side benchmarking only (tools/llamacpp_deepseek4/side_by_side.sh); nothing in
gannet's build or tests uses this file.

gannet's random-weight checkpoints carry no tokenizer, and llama.cpp's converter insists
on a Hugging Face BPE tokenizer whose pre-tokenizer hash it recognises. Rather than fake
one, this wrapper runs convert_hf_to_gguf.py unchanged except for the vocabulary step of
the DeepseekV4Model class, which it swaps for a synthetic vocabulary written straight
into the GGUF:

  * one token per id, 0 .. vocab_size-1, whose text is "<|ID|>";
  * every token USER_DEFINED (ids 0 and 1, bos and eos, CONTROL), so llama.cpp's
    tokenizer matches the texts as whole tokens: the prompt "<|0|><|17|><|5|>" becomes
    exactly [0, 17, 5] (llama-completion tokenizes with special-token parsing on), and each
    generated token prints back as "<|ID|>";
  * tokenizer model "gpt2", pre-tokenizer "default", one dummy merge (llama.cpp
    refuses a gpt2 vocabulary without a merges array);
  * bos/eos ids from config.json, and no automatic BOS: the caller writes the ids it
    wants, the same ones gannet gets as prompt_token_ids.

Tensors are left to the DeepseekV4Model class (README.md), except that
V4_GGUF_BF16_TENSORS=REGEX stores the FP8 linears whose checkpoint name matches as BF16
instead of Q8_0 (an experiment for llama.cpp's AMX path; not used by default).

usage: python convert_v4_gguf.py LLAMA_CPP_DIR MODEL_DIR --outfile F.gguf [converter flags]
"""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    llama_dir = Path(sys.argv[1]).resolve()
    sys.path.insert(0, str(llama_dir))
    # what remains is the converter's own command line
    sys.argv = [str(llama_dir / "convert_hf_to_gguf.py")] + sys.argv[2:]

    import convert_hf_to_gguf  # registers the model classes, puts gguf-py on the path
    import gguf
    from conversion.deepseek import DeepseekV4Model

    def set_synthetic_vocab(self) -> None:
        with open(self.dir_model / "config.json", encoding="utf-8") as f:
            cfg = json.load(f)
        n_vocab = int(cfg["vocab_size"])
        bos = int(cfg.get("bos_token_id", 0))
        eos = int(cfg.get("eos_token_id", 1))

        tokens = [f"<|{i}|>" for i in range(n_vocab)]
        types = [gguf.TokenType.USER_DEFINED] * n_vocab
        types[bos] = gguf.TokenType.CONTROL
        types[eos] = gguf.TokenType.CONTROL

        w = self.gguf_writer
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(["< |"])
        w.add_bos_token_id(bos)
        w.add_eos_token_id(eos)
        w.add_add_bos_token(False)
        w.add_add_eos_token(False)

    DeepseekV4Model.set_vocab = set_synthetic_vocab

    # Optional: FP8 linears whose checkpoint name matches this regex are stored BF16
    # instead of the class's Q8_0 (see README.md: llama.cpp's AMX path).
    bf16_re = os.environ.get("V4_GGUF_BF16_TENSORS")
    if bf16_re:
        pattern = re.compile(bf16_re)
        force_quant = DeepseekV4Model.tensor_force_quant

        def tensor_force_quant(self, name, new_name, bid, n_dims):
            if name in self._dsv4_fp8_dequantized and n_dims >= 2 and pattern.search(name):
                return gguf.GGMLQuantizationType.BF16
            return force_quant(self, name, new_name, bid, n_dims)

        DeepseekV4Model.tensor_force_quant = tensor_force_quant
    convert_hf_to_gguf.main()


if __name__ == "__main__":
    main()
