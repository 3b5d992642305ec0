#!/usr/bin/env python3
"""The Engram compressed token map of the DeepSeek-V3 tokenizer, as transformers' deepseek_v41
builds it with the `tokenizers` normalizers (NFKC, NFD, StripAccents, Lowercase, whitespace
runs to one space, the lone-space sentinel, Strip). Writes tests/golden/engram-map-deepseek-v3.json,
the reference for gannet's tokenizer/engram_map (which uses utf8proc instead):
    .venv-golden/bin/python tools/make_engram_map_golden.py
"""
import json
import pathlib

from tokenizers import Regex, Tokenizer, normalizers

ROOT = pathlib.Path(__file__).resolve().parent.parent


def main():
    tok = Tokenizer.from_file(str(ROOT / "assets" / "tokenizers" / "deepseek-v3" / "tokenizer.json"))
    sentinel = "\ue000"
    norm = normalizers.Sequence([
        normalizers.NFKC(), normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase(),
        normalizers.Replace(Regex(r"[ \t\r\n]+"), " "), normalizers.Replace(Regex(r"^ $"), sentinel),
        normalizers.Strip(), normalizers.Replace(sentinel, " "),
    ])
    keys, lookup = {}, []
    n = tok.get_vocab_size(with_added_tokens=True)
    for i in range(n):
        text = tok.decode([i], skip_special_tokens=False)
        if "\ufffd" in text:
            key = tok.id_to_token(i)
        else:
            key = norm.normalize_str(text) or text
        lookup.append(keys.setdefault(key, len(keys)))
    out = {"tokenizer": "assets/tokenizers/deepseek-v3/tokenizer.json", "vocab": n, "distinct_keys": len(keys),
           "map": lookup}
    path = ROOT / "tests" / "golden" / "engram-map-deepseek-v3.json"
    path.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"wrote {path}: {n} tokens, {len(keys)} keys")


if __name__ == "__main__":
    main()
