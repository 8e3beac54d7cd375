"""Image/text-mix workload (``dataset=image_mix``): every request has text tokens uniform in
``[input_len_min, input_len_max]``, outputs uniform in ``[output_len_min, output_len_max]`` (or
``output_len``), and, with probability ``image_prob``, one image of ``image_tokens`` tokens.

It exists for the image/text-mix sweep (``experiments/mix_sweep.yaml``): the MMMU-pro twin fixes
both the text (43 tokens) and the tile mix, so it cannot trace the whole waste curve. Image tokens
are not scaled by ``mode.length_scale`` (an image's token count is fixed by its tiles); text is.
"""

from __future__ import annotations

import numpy as np

from harness.workloads.request import Request
from harness.workloads.twins import _MAIN, _SUFFIX, Shape, WorkloadError, _out, _scaled, rng, token_ids
from jenga.interface import ImageSpan


def image_mix(shape: Shape, ds, vision: dict | None, image_token: int) -> list[Request]:
    """Requests of the image/text mix described in the module docstring."""
    lo, hi = ds.input_len_min, ds.input_len_max
    olo, ohi = ds.output_len_min, ds.output_len_max
    n_img, prob = ds.image_tokens, float(ds.image_prob)
    if lo is None or hi is None or lo > hi or lo < 1:
        raise WorkloadError(f"dataset image_mix: input_len_min/max (text tokens) must be set with "
                            f"1 <= min <= max, got [{lo}, {hi}]")
    if ds.output_len is None and (olo is None or ohi is None or olo > ohi):
        raise WorkloadError(f"dataset image_mix: set output_len or output_len_min <= output_len_max, "
                            f"got [{olo}, {ohi}]")
    if n_img is None or n_img < 0 or not 0.0 <= prob <= 1.0:
        raise WorkloadError(f"dataset image_mix: image_tokens must be >= 0 and image_prob in [0, 1], "
                            f"got image_tokens={n_img}, image_prob={prob}")
    if n_img and prob > 0 and not vision:
        raise WorkloadError(f"dataset image_mix with image_tokens={n_img} needs a vision model; model "
                            f"{shape.model_name} has no vision section (use e.g. model=llama3_2_11b_vision)")
    g = rng(shape.seed, _MAIN)
    out = []
    for i in range(shape.num_requests):
        text = token_ids(shape.seed, _SUFFIX, i, _scaled(int(g.integers(lo, hi + 1)), shape), shape.vocab_size)
        olen = _out(int(g.integers(olo, ohi + 1)) if ds.output_len is None else int(ds.output_len), shape)
        has_image = bool(n_img) and float(g.random()) < prob
        images: tuple[ImageSpan, ...] = ()
        prompt = text
        if has_image:
            off = min(1, len(text))
            if vision["kind"] != "cross":
                # Decoder-only VLM: the image tokens are prompt tokens at [off, off + n_img).
                prompt = np.concatenate([text[:off], np.full(int(n_img), image_token, dtype=np.int32), text[off:]])
            images = (ImageSpan(image_id=(shape.seed << 32) | i, num_tokens=int(n_img), offset=off),)
        out.append(Request(f"image_mix-{i}", 0.0, prompt, olen, images=images))
    return out
