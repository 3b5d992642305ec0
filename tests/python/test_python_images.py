"""Images through the Python package: LLM.generate with vLLM's
{"prompt" | "prompt_token_ids", "multi_modal_data": {"image": ...}} (paths, file bytes or PIL images)
reproduces the vision golden's greedy ids and `gannet generate`'s tokens; LLM.chat takes
image_url parts (data: URLs) and answers as generate does on the rendered prompt; bad
image input is a ValueError naming the problem."""
import base64
import json

import pytest

from conftest import ROOT, run
from test_python_api import gannet_py  # noqa: F401 (fixture)
from test_server_images import VISION, with_tokenizer

GOLDEN = ROOT / "tests" / "golden" / "deepseek-v41-vision-tiny"
IMAGES = ROOT / "tests" / "data" / "images"


def golden_prompt():
    g = json.loads((GOLDEN / "golden.json").read_text())
    ids, out = g["prompt_ids"], []
    for i, t in enumerate(ids):
        if t != 496 or i == 0 or ids[i - 1] != 496 or i == 29:
            out.append(t)
    return out, g["greedy"]["float32_ids"]


def test_generate_with_images_matches_golden(gannet_py):
    llm = gannet_py.LLM(model=str(GOLDEN), quiet=True, threads=1, limit_mm_per_prompt={"image": 2})
    prompt, want = golden_prompt()
    sp = gannet_py.SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    by_path = llm.generate({"prompt_token_ids": prompt,
                            "multi_modal_data": {"image": [GOLDEN / "image1.png", str(GOLDEN / "image2.png")]}}, sp)
    assert by_path[0].outputs[0].token_ids == want
    by_bytes = llm.generate({"prompt_token_ids": prompt, "multi_modal_data": {
        "image": [(GOLDEN / "image1.png").read_bytes(), (GOLDEN / "image2.png").read_bytes()]}}, sp)
    assert by_bytes[0].outputs[0].token_ids == want
    from PIL import Image  # a PIL.Image, as vLLM users pass them
    with Image.open(GOLDEN / "image1.png") as a, Image.open(GOLDEN / "image2.png") as b:
        by_pil = llm.generate({"prompt_token_ids": prompt, "multi_modal_data": {"image": [a, b]}}, sp)
    assert by_pil[0].outputs[0].token_ids == want
    with pytest.raises(ValueError, match="PIL.Image, a file path or the file's bytes"):
        llm.generate({"prompt_token_ids": prompt, "multi_modal_data": {"image": [42, 43]}}, sp)
    with pytest.raises(ValueError, match="placeholder"):
        llm.generate({"prompt_token_ids": prompt, "multi_modal_data": {"image": GOLDEN / "image1.png"}}, sp)
    with pytest.raises(ValueError, match="images only"):
        llm.generate({"prompt_token_ids": prompt, "multi_modal_data": {"video": []}}, sp)
    with pytest.raises(ValueError, match="corrupt PNG"):
        llm.generate({"prompt_token_ids": prompt, "multi_modal_data": {
            "image": [IMAGES / "truncated.png", GOLDEN / "image2.png"]}}, sp)
    with pytest.raises(ValueError, match="limit_images_per_prompt"):
        llm.generate({"prompt_token_ids": prompt + [496], "multi_modal_data": {"image": [GOLDEN / "image1.png"] * 3}}, sp)
    small = gannet_py.LLM(model=str(GOLDEN), quiet=True, threads=1, max_image_pixels=1000)
    with pytest.raises(ValueError, match="max_image_pixels"):
        small.generate({"prompt_token_ids": prompt, "multi_modal_data": {
            "image": [GOLDEN / "image1.png", GOLDEN / "image2.png"]}}, sp)
    # Still serving afterwards.
    assert llm.generate({"prompt_token_ids": prompt, "multi_modal_data": {
        "image": [GOLDEN / "image1.png", GOLDEN / "image2.png"]}}, sp)[0].outputs[0].token_ids == want


def test_chat_with_image_parts_equals_generate(gannet_py, tmp_path):
    d = tmp_path / "m"
    run(["make-model", "--arch", "deepseek_v41", "--preset", "tiny", "--config-overrides",
         json.dumps({"vocab_size": 129280, "engram_compressed_vocab_size": 98627, "max_position_embeddings": 2048,
                     "vision_config": VISION, "image_token_id": 129264}), "--out", str(d)])
    with_tokenizer(d)
    llm = gannet_py.LLM(model=str(d), quiet=True, threads=1)
    url = "data:image/png;base64," + base64.b64encode((GOLDEN / "image1.png").read_bytes()).decode()
    conv = [{"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                         {"type": "image_url", "image_url": {"url": url}}]}]
    sp = gannet_py.SamplingParams(temperature=0, max_tokens=8)
    got = llm.chat(conv, sp)[0].outputs[0]
    src = tmp_path / "r.jsonl"
    src.write_text(json.dumps({"messages": conv, "kwargs": {}}) + "\n")
    rendered = json.loads(run(["chat-format", "--model", str(d), "render", "--input", str(src)]).stdout)["rendered"]
    bos = "<｜begin▁of▁sentence｜>"
    want = llm.generate({"prompt": rendered[len(bos):], "multi_modal_data": {"image": GOLDEN / "image1.png"}}, sp)
    assert got.token_ids == want[0].outputs[0].token_ids
    with pytest.raises(ValueError, match="data: URLs"):
        llm.chat([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x.invalid/a.png"}}]}])
