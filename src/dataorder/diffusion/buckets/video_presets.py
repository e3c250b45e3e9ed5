"""Named video model settings: what ``VideoBucketCalculator.from_preset(name)`` builds.

Each budget is the token count of the model's own default clip and ``max_pixels`` its frame
size, so that clip and its transpose are buckets with exactly ``max_tokens`` tokens, and a short
clip gets the same frame size as a long one. Each preset names its sources: the repository at
the commit read, the file, and the phrase quoted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from dataorder._validate import fail

__all__ = ["PRESETS", "VideoPreset", "preset_settings"]


@dataclass(frozen=True)
class VideoPreset:
    """A named model setting and where its numbers come from.

    Attributes:
        description: The model, its default clip and its token count.
        kwargs: Constructor arguments of :class:`VideoBucketCalculator`.
        source: Where the resolution, frame rule, compression and patch are stated (repository
            at the commit read, file, quoted phrase).
    """

    description: str
    kwargs: Mapping[str, Any]
    source: str


def _preset(
    w: int,
    h: int,
    frames: int,
    *,
    sc: int = 8,
    tc: int = 4,
    patch: tuple[int, int, int] = (1, 2, 2),
    step: int | None = None,
) -> dict[str, Any]:
    """Constructor arguments whose budget is exactly the model's default clip ``w x h x frames``."""
    latent = 1 + (frames - 1) // tc
    tokens = -(-latent // patch[0]) * (h // (sc * patch[1])) * (w // (sc * patch[2]))
    kwargs: dict[str, Any] = {
        "max_tokens": tokens,
        "max_pixels": w * h,
        "max_frames": frames,
        "spatial_compression": sc,
        "temporal_compression": tc,
        "patch_size": patch,
    }
    if step is not None:
        kwargs["frame_step"] = step
    return kwargs


#: Named settings for :meth:`VideoBucketCalculator.from_preset`. Each budget is the token count
#: of the model's own default clip and ``max_pixels`` its frame size, so that clip and its
#: transpose are buckets with exactly ``max_tokens`` tokens, and a short clip gets the same
#: frame size as a long one. Sources were read at the commits named.
PRESETS: Mapping[str, VideoPreset] = MappingProxyType(
    {
        "wan2.1-480p": VideoPreset(
            "Wan 2.1 T2V 1.3B/14B at 480P: 832x480, 81 frames (4n+1) at 16 fps, VAE 4x8x8, "
            "patch 1x2x2: 21 x 30 x 52 = 32,760 tokens",
            _preset(832, 480, 81),
            "github.com/Wan-Video/Wan2.1@9737cba: wan/configs/wan_t2v_14B.py and "
            "wan_t2v_1_3B.py (vae_stride = (4, 8, 8), patch_size = (1, 2, 2)); "
            "wan/configs/__init__.py SUPPORTED_SIZES ('832*480', W*H); generate.py (--frame_num "
            "default 81, 'The number should be 4n+1'); wan/configs/shared_config.py "
            "(sample_fps = 16); wan/text2video.py (latent frames (F - 1) // vae_stride[0] + 1)",
        ),
        "wan2.1-720p": VideoPreset(
            "Wan 2.1 T2V/I2V 14B at 720P: 1280x720, 81 frames (4n+1) at 16 fps, VAE 4x8x8, "
            "patch 1x2x2: 21 x 45 x 80 = 75,600 tokens",
            _preset(1280, 720, 81),
            "as wan2.1-480p; wan/configs/__init__.py SUPPORTED_SIZES '1280*720' for t2v-14B and "
            "i2v-14B; README: the 14B models support 480P and 720P",
        ),
        "hunyuanvideo-540p": VideoPreset(
            "HunyuanVideo at 540p: 960x544, 129 frames (4n+1), VAE 4x8x8, patch 1x2x2: "
            "33 x 34 x 60 = 67,320 tokens",
            _preset(960, 544, 129),
            "github.com/Tencent/HunyuanVideo@fa14b00: README ('compression ratios of video "
            "length, space, and channel to 4, 8, and 16'; resolution table 544px960px129f, h x w "
            "x f); hyvideo/modules/models.py (patch_size = [1, 2, 2]); hyvideo/inference.py "
            "('video_length-1 must be a multiple of 4'); arXiv 2412.03603",
        ),
        "hunyuanvideo-720p": VideoPreset(
            "HunyuanVideo at 720p: 1280x720, 129 frames (4n+1), VAE 4x8x8, patch 1x2x2: "
            "33 x 45 x 80 = 118,800 tokens",
            _preset(1280, 720, 129),
            "as hunyuanvideo-540p; README resolution table 720px1280px129f (recommended)",
        ),
        "cogvideox-5b": VideoPreset(
            "CogVideoX 2B/5B: 720x480, 8N+1 frames with N <= 6 (49) at 8 fps, VAE 4x8x8, "
            "patch 2 (spatial only): 13 x 30 x 45 = 17,550 tokens",
            _preset(720, 480, 49, step=8),
            "github.com/THUDM/CogVideo@e519ece: README model table ('720 * 480', 'Should be "
            "8N + 1 where N <= 6 (default 49)', '8 frames / second'); "
            "sat/configs/cogvideox_5b.yaml (time_compressed_rate: 4, patch_size: 2, latent "
            "90x60, so spatial 8); arXiv 2408.06072",
        ),
        "cogvideox1.5-5b": VideoPreset(
            "CogVideoX 1.5 5B T2V: 1360x768, 16N+1 frames with N <= 10 (default 81) at 16 fps, "
            "VAE 4x8x8, patch 2x2x2 (an odd latent length padded by one): 11 x 48 x 85 = "
            "44,880 tokens",
            _preset(1360, 768, 81, patch=(2, 2, 2), step=16),
            "github.com/THUDM/CogVideo@e519ece: README ('1360 * 768', 'Should be 16N + 1 where "
            "N <= 10 (default 81)', '16 frames / second'); sat/configs/cogvideox1.5_5b.yaml "
            "(patch_size: [2, 2, 2], time_compressed_rate: 4); diffusers "
            "pipeline_cogvideox.py ('For CogVideoX 1.5, the latent frames should be padded to "
            "make it divisible by patch_size_t')",
        ),
        "ltx-video": VideoPreset(
            "LTX-Video 0.9.x: 1216x704, 121 frames (8k+1) at 30 fps, VAE 8x32x32, patch 1: "
            "16 x 22 x 38 = 13,376 tokens",
            _preset(1216, 704, 121, sc=32, tc=8, patch=(1, 1, 1)),
            "github.com/Lightricks/LTX-Video@5260738: README ('resolutions that are divisible "
            "by 32 and number of frames that are divisible by 8 + 1', 'New default resolution "
            "and FPS: 1216 x 704 pixels at 30 FPS'); ltx_video/inference.py (num_frames 121, "
            "SymmetricPatchifier(patch_size=1)); arXiv 2501.00103 ('32 x 32 x 8 pixels per "
            "token': the VAE's own patchify is in the 32)",
        ),
    }
)


def preset_settings(
    name: str, overrides: Mapping[str, Any], argument: str = "name"
) -> dict[str, Any]:
    """The constructor arguments of preset ``name`` with ``overrides`` over them.

    ``frame_counts`` in ``overrides`` replaces the preset's frame rule (its ``max_frames``,
    ``min_frames`` and ``frame_step``); any other key replaces the preset's value.

    Raises:
        ValueError: For an unknown name (the message calls it ``argument``).

    Example:
        >>> preset_settings("wan2.1-480p", {"frame_counts": [1, 5]})["frame_counts"]
        [1, 5]
    """
    if not isinstance(name, str) or name not in PRESETS:
        fail(argument, "one of " + ", ".join(repr(k) for k in PRESETS), name)
    kwargs = dict(PRESETS[name].kwargs)
    if "frame_counts" in overrides:
        for key in ("max_frames", "min_frames", "frame_step"):
            kwargs.pop(key, None)
    kwargs.update(overrides)
    return kwargs
