"""Writes tests/data/images/: small PNG, JPEG and WebP files in the modes gannet's image
decoder must take (RGB, RGBA, grey, grey+alpha, palette with transparency, EXIF-rotated
JPEG and WebP), broken files it must refuse, and expected.json: each good file's size
and decoded RGB pixels as Pillow reads them (ImageOps.exif_transpose, then alpha
composited over white), base64 encoded, with the tolerance in 8-bit levels a decoder may
differ by (0 for lossless files; JPEG decoders may round their IDCT differently).

    python3 tools/make_image_fixtures.py   # needs pillow and numpy (tools/requirements-golden.txt)
"""
import base64
import io
import json
import pathlib
import struct
import zlib

import numpy as np
from PIL import Image, ImageOps

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "images"


def pattern(w, h, seed):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)), ((x + y) * 7) % 256], -1)
    img = (img + rng.integers(0, 16, img.shape)) % 256
    return img.astype(np.uint8)


def expected_rgb(data):
    im = ImageOps.exif_transpose(Image.open(io.BytesIO(data)))
    if im.mode in ("RGBA", "LA", "P", "PA") or (im.mode in ("RGB", "L") and "transparency" in im.info):
        im = im.convert("RGBA")
        bg = Image.new("RGBA", im.size, (255, 255, 255, 255))
        im = Image.alpha_composite(bg, im)
    return im.convert("RGB")


def save(im, fmt, **kw):
    b = io.BytesIO()
    im.save(b, fmt, **kw)
    return b.getvalue()


def png_with_header(w, h):
    """A valid PNG signature and IHDR claiming w x h, then a tiny IDAT: a decompression bomb's header."""
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    rgb = Image.fromarray(pattern(23, 17, 1), "RGB")
    alpha = np.linspace(0, 255, 23 * 17).astype(np.uint8).reshape(17, 23)
    rgba = Image.fromarray(np.dstack([pattern(23, 17, 2), alpha]), "RGBA")
    grey = Image.fromarray(pattern(19, 13, 3)[:, :, 0], "L")
    la = Image.fromarray(np.dstack([pattern(19, 13, 4)[:, :, 0], pattern(19, 13, 5)[:, :, 1]]), "LA")
    pal = rgb.quantize(colors=16)
    pal.info["transparency"] = 3
    exif = Image.Exif()
    exif[0x0112] = 6  # shown rotated 90 degrees clockwise
    exif3 = Image.Exif()
    exif3[0x0112] = 3
    exif5 = Image.Exif()
    exif5[0x0112] = 5
    good = {
        "rgb.png": (save(rgb, "PNG"), 0),
        "rgba.png": (save(rgba, "PNG"), 1),
        "grey.png": (save(grey, "PNG"), 0),
        "grey_alpha.png": (save(la, "PNG"), 1),
        "palette_trns.png": (save(pal, "PNG", transparency=3), 1),
        "exif6.png": (save(rgb, "PNG", exif=exif.tobytes()), 0),
        "rgb.jpg": (save(rgb, "JPEG", quality=95), 3),
        "grey.jpg": (save(grey, "JPEG", quality=95), 3),
        "exif6.jpg": (save(rgb, "JPEG", quality=95, exif=exif.tobytes()), 3),
        "progressive_exif5.jpg": (save(rgb, "JPEG", quality=90, progressive=True, exif=exif5.tobytes()), 3),
        "lossless.webp": (save(rgb, "WEBP", lossless=True), 0),
        "lossless_rgba_exif3.webp": (save(rgba, "WEBP", lossless=True, exact=True, exif=exif3.tobytes()), 1),
        "lossy.webp": (save(rgb, "WEBP", quality=90), 3),
    }
    bad = {
        "empty.png": (b"", "empty"),
        "truncated.png": (good["rgb.png"][0][: len(good["rgb.png"][0]) // 2], "corrupt PNG"),
        "truncated.jpg": (good["rgb.jpg"][0][: len(good["rgb.jpg"][0]) // 2], "corrupt JPEG"),
        "truncated.webp": (good["lossless.webp"][0][: len(good["lossless.webp"][0]) // 2], "corrupt WebP"),
        "garbage_after_signature.png": (b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4, "corrupt PNG"),
        "bomb.png": (png_with_header(100000, 100000), "more than the limit"),
        "zero_width.png": (png_with_header(0, 16), "corrupt PNG"),
        "image.gif": (b"GIF89a" + bytes(64), "not a PNG, JPEG or WebP"),
        "animated.webp": (save(rgb, "WEBP", save_all=True, append_images=[rgb.rotate(90)], lossless=True),
                          "animated WebP"),
    }
    manifest = {"good": {}, "bad": {}}
    for name, (data, tol) in good.items():
        (OUT / name).write_bytes(data)
        im = expected_rgb(data)
        manifest["good"][name] = {"width": im.width, "height": im.height, "tolerance": tol,
                                  "rgb_base64": base64.b64encode(im.tobytes()).decode()}
    for name, (data, says) in bad.items():
        (OUT / name).write_bytes(data)
        manifest["bad"][name] = {"error_contains": says}
    (OUT / "expected.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
