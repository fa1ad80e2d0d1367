"""Procedural renderer of the synthetic dataset: vectorised numpy rasterisation, no files.

A class is a fixed `ClassLook` (shape × two colours × texture, with continuous class-specific
parameters, so neighbouring classes differ only slightly: a fine-grained task). An image is that
look under a random pose, scale and position, over a cluttered background of distractor shapes
and lines, with occluding lines, illumination change and pixel noise. A `CameraLook` (re-ID mode)
adds a per-camera colour cast, brightness and blur. Everything is a pure function of integer
seeds: `render_image(class_look(s, c), item, size, ...)` always returns the same pixels.
"""

from __future__ import annotations

import colorsys
from dataclasses import dataclass
from functools import lru_cache

import numpy as np


@dataclass(frozen=True)
class ClassLook:
    """Appearance of one class; `param` is the polygon's side count or the star's point count,
    `ratio` the ellipse's aspect or the star's inner radius; texture sizes are in object radii."""

    shape: int
    param: int
    ratio: float
    colour: tuple[float, float, float]
    colour2: tuple[float, float, float]
    texture: int
    freq: float
    angle: float
    dot: float


@dataclass(frozen=True)
class CameraLook:
    """One camera of the re-ID mode: RGB gains, brightness offset and Gaussian blur (pixels)."""

    gains: tuple[float, float, float]
    offset: float
    blur: float


@lru_cache(maxsize=4096)
def class_look(render_seed: int, class_id: int) -> ClassLook:
    """The fixed look of class `class_id` in the dataset drawn from `render_seed`."""
    rng = np.random.default_rng([render_seed, class_id, 1])
    shape = int(rng.integers(3))
    param = int(rng.integers(3, 8)) if shape == 0 else int(rng.integers(4, 8))
    return ClassLook(
        shape=shape,
        param=param,
        ratio=float(rng.uniform(0.35, 0.8)),
        colour=colorsys.hsv_to_rgb(rng.random(), rng.uniform(0.4, 1.0), rng.uniform(0.5, 1.0)),
        colour2=colorsys.hsv_to_rgb(rng.random(), rng.uniform(0.2, 1.0), rng.uniform(0.2, 1.0)),
        texture=int(rng.integers(3)),
        freq=float(rng.uniform(1.2, 3.5)),
        angle=float(rng.uniform(0.0, np.pi)),
        dot=float(rng.uniform(0.2, 0.4)),
    )


@lru_cache(maxsize=256)
def camera_look(render_seed: int, camera: int) -> CameraLook:
    """The fixed colour cast and blur of `camera`."""
    rng = np.random.default_rng([render_seed, camera, 2])
    gains = rng.uniform(0.65, 1.35, 3)
    return CameraLook(
        gains=(float(gains[0]), float(gains[1]), float(gains[2])),
        offset=float(rng.uniform(-0.1, 0.1)),
        blur=float(rng.uniform(0.0, 1.5)),
    )


def _shape_mask(shape: int, param: int, ratio: float, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Inside-mask of a unit-radius shape centred at the origin of the (u, v) frame."""
    if shape == 1:  # ellipse with semi-axes 1 and ratio
        return u * u + (v / ratio) ** 2 <= 1.0
    r, theta = np.hypot(u, v), np.arctan2(v, u)
    sector = 2 * np.pi / param
    if shape == 0:  # regular polygon: distance to the nearest edge's normal within the apothem
        return r * np.cos(np.mod(theta, sector) - sector / 2) <= np.cos(np.pi / param)
    x = theta / sector  # star: radius 1 at the points, `ratio` between them
    return r <= ratio + (1 - ratio) * (1 - 2 * np.abs(x - np.round(x)))


def _texture(look: ClassLook, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Boolean pattern in the object's frame, so it turns and scales with the object."""
    c, s = np.cos(look.angle), np.sin(look.angle)
    a, b = (u * c + v * s) * look.freq, (v * c - u * s) * look.freq
    if look.texture == 0:
        return np.mod(a, 1.0) < 0.5
    if look.texture == 1:
        return (a - np.round(a)) ** 2 + (b - np.round(b)) ** 2 < look.dot**2
    return (np.floor(a) + np.floor(b)) % 2 == 0


def _lines(
    rng: np.random.Generator, n: int, x: np.ndarray, y: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Masks [n, H, W] of `n` random straight bands and their colours [n, 3]."""
    phi, offset, width = rng.uniform((0, -0.8, 0.015), (np.pi, 0.8, 0.05), (n, 3)).T
    dist = x * np.cos(phi, dtype=np.float32)[:, None, None] + y * np.sin(phi)[:, None, None]
    return np.abs(dist - offset[:, None, None]) < width[:, None, None], rng.random((n, 3))


def _paint(image: np.ndarray, masks: np.ndarray, colours: np.ndarray) -> None:
    """Paint masks [n, H, W] in order over image [H, W, 3] with colours [n, 3] (in place)."""
    for mask, colour in zip(masks, colours, strict=True):
        image[mask] = colour


def _blur(image: np.ndarray, sigma: float) -> np.ndarray:
    """Separable Gaussian blur of image [H, W, 3] with edge padding; sigma in pixels."""
    radius = int(np.ceil(2 * sigma))
    if radius == 0:
        return image
    taps = np.exp(-0.5 * (np.arange(-radius, radius + 1) / sigma) ** 2)
    taps /= taps.sum()
    h, w = image.shape[:2]
    padded = np.pad(image, ((radius, radius), (0, 0), (0, 0)), mode="edge")
    image = sum(t * padded[i : i + h] for i, t in enumerate(taps))
    padded = np.pad(image, ((0, 0), (radius, radius), (0, 0)), mode="edge")
    return sum(t * padded[:, i : i + w] for i, t in enumerate(taps))


def render_image(
    look: ClassLook,
    item: int,
    size: tuple[int, int],
    *,
    render_seed: int = 0,
    camera: CameraLook | None = None,
) -> np.ndarray:
    """Image [H, W, 3] float32 in [0, 1] of the class `look` in pose number `item`."""
    rng = np.random.default_rng([render_seed, item, 3])
    h, w = size
    # pixel centres; y spans [-1, 1], x keeps the aspect ratio
    y = ((np.arange(h, dtype=np.float32) + 0.5) / h * 2 - 1)[:, None]
    x = ((np.arange(w, dtype=np.float32) + 0.5) / h * 2 - w / h)[None, :]

    c0, c1 = rng.uniform(0.1, 0.9, (2, 3)).astype(np.float32)
    phi = float(rng.uniform(0, 2 * np.pi))
    t = np.clip((x * np.cos(phi) + y * np.sin(phi)) * 0.5 + 0.5, 0, 1)[..., None]
    image = c0 * (1 - t) + c1 * t  # background gradient [H, W, 3]

    n = int(rng.integers(3, 7))  # distractors: small flat shapes of random kinds
    cx, cy = rng.uniform(-1, 1, (2, n, 1, 1)).astype(np.float32)  # float32: half the work
    rad = rng.uniform(0.12, 0.35, (n, 1, 1)).astype(np.float32)
    rot = rng.uniform(0, 2 * np.pi, (n, 1, 1)).astype(np.float32)
    du = ((x - cx) * np.cos(rot) + (y - cy) * np.sin(rot)) / rad
    dv = ((y - cy) * np.cos(rot) - (x - cx) * np.sin(rot)) / rad
    kind, sides = int(rng.integers(3)), int(rng.integers(3, 8))
    _paint(
        image, _shape_mask(kind, sides, float(rng.uniform(0.4, 0.8)), du, dv), rng.random((n, 3))
    )
    _paint(image, *_lines(rng, int(rng.integers(1, 4)), x, y))

    ox, oy = rng.uniform(-0.25, 0.25, 2).tolist()  # the object: position, scale, rotation
    scale, rot1 = float(rng.uniform(0.45, 0.75)), float(rng.uniform(0, 2 * np.pi))
    u = ((x - ox) * np.cos(rot1) + (y - oy) * np.sin(rot1)) / scale
    v = ((y - oy) * np.cos(rot1) - (x - ox) * np.sin(rot1)) / scale
    inside = _shape_mask(look.shape, look.param, look.ratio, u, v)
    pattern = _texture(look, u, v)
    image[inside & pattern] = look.colour
    image[inside & ~pattern] = look.colour2
    _paint(image, *_lines(rng, int(rng.integers(0, 3)), x, y))  # occluders

    image = image * float(rng.uniform(0.7, 1.2))  # illumination
    if camera is not None:
        cast = image * np.asarray(camera.gains, np.float32) + camera.offset
        image = _blur(cast, camera.blur * h / 64)  # blur defined at 64 px, scaled with size
    noise = rng.standard_normal(image.shape, dtype=np.float32) * float(rng.uniform(0.02, 0.08))
    return np.clip(image + noise, 0, 1, dtype=np.float32)
