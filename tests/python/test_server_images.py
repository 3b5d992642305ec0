"""Images through `gannet serve` and `gannet generate` with a DeepSeek-V4.1 checkpoint that
carries a (random) vision tower, the DeepSeek-V3 tokenizer and no chat template (DeepSeek's
V4.1 encoder places one image marker per image part):
- a chat with two `data:` images (PNG and WebP) answers with the same tokens (the same
  per-token logprobs, bit for bit, and text) as `gannet generate` on the equivalent JSON
  line (the rendered prompt, "images": [paths]);
- remote URLs, broken base64, corrupt and oversized images, images in non-user turns,
  `detail` other than auto and too many images are refused by name (400) before anything
  is queued, and the server serves on;
- a text-only model refuses image parts by name."""
import base64
import json

import pytest

from conftest import ROOT, run
from test_server import Server

GOLDEN = ROOT / "tests" / "golden" / "deepseek-v41-vision-tiny"
IMAGES = ROOT / "tests" / "data" / "images"
VISION = {"model_type": "deepseek_v41_vision", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
          "num_attention_heads": 4, "patch_size": 14, "downsample_ratio": 3, "rope_theta": 10000.0,
          "max_image_tokens": 64, "min_pixels": 3136}


def with_tokenizer(d):
    src = ROOT / "assets" / "tokenizers" / "deepseek-v3"
    (d / "tokenizer.json").write_bytes((src / "tokenizer.json").read_bytes())
    cfg = json.loads((src / "tokenizer_config.json").read_text())
    cfg.pop("chat_template")  # V4.1 ships none: the server uses DeepSeek's encoder
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    return d


@pytest.fixture(scope="module")
def vl(tmp_path_factory):
    d = tmp_path_factory.mktemp("v41vision") / "m"
    run(["make-model", "--arch", "deepseek_v41", "--preset", "tiny", "--config-overrides",
         json.dumps({"vocab_size": 129280, "engram_compressed_vocab_size": 98627, "max_position_embeddings": 2048,
                     "vision_config": VISION, "image_token_id": 129264}), "--out", str(d)])
    return with_tokenizer(d)


@pytest.fixture(scope="module")
def server(vl):
    s = Server(vl, "--limit-images-per-prompt", "3", "--max-image-pixels", "100000")
    yield s
    s.stop()


def data_url(path, mime):
    return f"data:{mime};base64," + base64.b64encode(path.read_bytes()).decode()


def chat(server, content, **extra):
    body = {"model": server.client.models.list().data[0].id, "messages": [{"role": "user", "content": content}],
            "max_tokens": 8, "temperature": 0, "logprobs": True, **extra}
    return server.raw("POST", "/v1/chat/completions", body)


CONTENT = [{"type": "text", "text": "Compare"},
           {"type": "image_url", "image_url": {"url": data_url(GOLDEN / "image1.png", "image/png")}},
           {"type": "text", "text": "with"},
           {"type": "image_url", "image_url": {"url": data_url(IMAGES / "lossless.webp", "image/webp"), "detail": "auto"}}]


def test_chat_with_two_images_equals_generate(server, vl, tmp_path):
    status, r = chat(server, CONTENT)
    assert status == 200, r
    lps = [c["logprob"] for c in r["choices"][0]["logprobs"]["content"]]
    assert len(lps) == 8
    # The prompt the server rendered: DeepSeek's V4.1 encoder through chat-format.
    src = tmp_path / "r.jsonl"
    src.write_text(json.dumps({"messages": [{"role": "user", "content": CONTENT}], "kwargs": {}}) + "\n")
    rendered = json.loads(run(["chat-format", "--model", str(vl), "render", "--input", str(src)]).stdout)["rendered"]
    assert rendered.count("<｜deepseek_image｜>") == 2
    bos = "<｜begin▁of▁sentence｜>"
    assert rendered.startswith(bos)
    line = {"prompt": rendered[len(bos):], "images": [str(GOLDEN / "image1.png"), str(IMAGES / "lossless.webp")],
            "max_tokens": 8, "temperature": 0, "logprobs": 1}
    p = tmp_path / "p.jsonl"
    p.write_text(json.dumps(line) + "\n")
    out = json.loads(run(["generate", "--model", str(vl), "--prompts", str(p), "--json", "--threads", "1"]).stdout)
    assert [x["logprob"] for x in out["logprobs"]] == lps
    assert out["text"] == (r["choices"][0]["message"]["content"] or "")
    # Both images took their spans (17 positions for the 154x112 PNG, 8 for the 23x17 WebP).
    status, plain = chat(server, [CONTENT[0], CONTENT[2]])
    assert status == 200
    assert r["usage"]["prompt_tokens"] - plain["usage"]["prompt_tokens"] >= 17 + 8


@pytest.mark.parametrize("content, says", [
    ([{"type": "image_url", "image_url": {"url": "https://example.invalid/cat.png"}}], "'https:' URLs are refused"),
    ([{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@@"}}], "invalid character"),
    ([{"type": "image_url", "image_url": {"url": data_url(IMAGES / "truncated.png", "image/png")}}], "corrupt PNG"),
    ([{"type": "image_url", "image_url": {"url": data_url(IMAGES / "bomb.png", "image/png")}}], "--max-image-pixels"),
    ([{"type": "image_url", "image_url": {"url": data_url(IMAGES / "image.gif", "image/gif")}}], "not a PNG, JPEG or WebP"),
    ([{"type": "image_url", "image_url": {"url": data_url(IMAGES / "rgb.png", "image/png"), "detail": "high"}}], "detail"),
    ([{"type": "image_url", "image_url": {"url": data_url(IMAGES / "rgb.png", "image/png")}}] * 4, "--limit-images-per-prompt"),
])
def test_bad_images_are_refused_by_name(server, content, says):
    status, e = chat(server, content)
    assert status == 400, e
    assert says in e["error"]["message"], e
    assert e["error"]["param"] == "messages"
    status, r = chat(server, [CONTENT[0]])  # and the server serves on
    assert status == 200, r


def test_images_only_in_user_turns(server):
    body = {"model": server.client.models.list().data[0].id, "max_tokens": 2, "messages": [
        {"role": "system", "content": [{"type": "image_url", "image_url": {"url": data_url(IMAGES / "rgb.png", "image/png")}}]},
        {"role": "user", "content": "hi"}]}
    status, e = server.raw("POST", "/v1/chat/completions", body)
    assert status == 400 and "messages[0].content[0]" in e["error"]["message"], e


def test_text_only_model_refuses_images(tmp_path):
    d = tmp_path / "m"
    run(["make-model", "--arch", "deepseek_v41", "--preset", "tiny", "--config-overrides",
         json.dumps({"vocab_size": 129280, "engram_compressed_vocab_size": 98627, "max_position_embeddings": 2048}),
         "--out", str(d)])
    s = Server(with_tokenizer(d))
    try:
        status, e = chat(s, CONTENT)
        assert status == 400 and "takes no images" in e["error"]["message"], e
    finally:
        s.stop()
