"""Batched kernels: an ``(N, C, H, W)`` batch and **per-sample parameter tensors** in, a batch out.

These are the pure functions the transforms call once they have drawn their parameters. Unlike
``torchvision.transforms.v2.functional`` (one number for one image), a random quantity here is a
tensor with one value per image, on the images' device: ``rotate(x, angle)`` takes ``angle`` of
shape ``(N,)``, ``crop(x, top, left, height, width)`` takes ``top``/``left`` of shape ``(N,)``.
Sizes and modes that fix the output shape (``height``, ``interpolation``...) are Python values.
A Python number or list where a tensor belongs is a ``TypeError`` naming the argument. No
randomness and no state: pass the same parameters, get the same output, so a draw can be
replayed or shared. Every kernel takes uint8 or floating batches, contiguous or channels_last,
and compiles with TorchScript.

Example:
    >>> import torch
    >>> import batchaug.functional as F
    >>> x = torch.zeros(4, 3, 32, 32, dtype=torch.uint8)
    >>> out = F.rotate(x, torch.tensor([0.0, 90.0, 180.0, -30.0]))   # one angle per image
    >>> F.rotate(x, 30.0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    TypeError: batchaug.functional.rotate: argument 'angle' must be a per-sample parameter tensor, ...
"""
from batchaug.functional import _kernels
from batchaug.functional._checks import checked

# The internal helpers (select_samples, group_by_branch, ...) stay importable from here for old
# code but are not part of the public API (not in __all__, not checked).
from batchaug.functional._kernels import (  # noqa: F401
    select_samples,
    group_by_branch,
    inverse_permutation,
    partner,
    box_mask,
    gaussian_kernel1d,
)

# --- geometry: flips, crops, padding, resizing ---
hflip_where = checked(_kernels.hflip_where)
vflip_where = checked(_kernels.vflip_where)
crop = checked(_kernels.crop)
center_crop = checked(_kernels.center_crop)
pad = checked(_kernels.pad)
pad_crop = checked(_kernels.pad_crop)
resize = checked(_kernels.resize)
resized_crop = checked(_kernels.resized_crop)
resized_output_size = checked(_kernels.resized_output_size)
# --- geometry: warps (rotation, affine, perspective) and their per-sample matrices and grids ---
rotate = checked(_kernels.rotate)
rotation_grid = checked(_kernels.rotation_grid)
affine = checked(_kernels.affine)
affine_matrix = checked(_kernels.affine_matrix)
matrix_grid = checked(_kernels.matrix_grid)
perspective = checked(_kernels.perspective)
perspective_coefficients = checked(_kernels.perspective_coefficients)
perspective_grid = checked(_kernels.perspective_grid)
# --- targets: masks, boxes and keypoints moved by per-sample matrices ---
move_targets = checked(_kernels.move_targets)
check_targets = checked(_kernels.check_targets)
flip_matrix = checked(_kernels.flip_matrix)
resized_crop_matrix = checked(_kernels.resized_crop_matrix)
rotation_matrix = checked(_kernels.rotation_matrix)
affine_to_matrix = checked(_kernels.affine_to_matrix)
perspective_to_matrix = checked(_kernels.perspective_to_matrix)
compose_matrices = checked(_kernels.compose_matrices)
affine_boxes = checked(_kernels.affine_boxes)
affine_keypoints = checked(_kernels.affine_keypoints)
warp_masks = checked(_kernels.warp_masks)
# --- colour ---
adjust_brightness = checked(_kernels.adjust_brightness)
adjust_contrast = checked(_kernels.adjust_contrast)
adjust_saturation = checked(_kernels.adjust_saturation)
adjust_hue = checked(_kernels.adjust_hue)
adjust_sharpness = checked(_kernels.adjust_sharpness)
autocontrast = checked(_kernels.autocontrast)
equalize = checked(_kernels.equalize)
grayscale_where = checked(_kernels.grayscale_where)
invert = checked(_kernels.invert)
posterize = checked(_kernels.posterize)
rgb_to_grayscale = checked(_kernels.rgb_to_grayscale)
solarize = checked(_kernels.solarize)
# --- normalisation, dtype, blur, erasing ---
normalize = checked(_kernels.normalize)
to_dtype = checked(_kernels.to_dtype)
gaussian_blur = checked(_kernels.gaussian_blur)
erase = checked(_kernels.erase)
# --- automatic augmentation ops ---
apply_op = checked(_kernels.apply_op)
apply_ops = checked(_kernels.apply_ops)
# --- label mixing ---
blend_with_partner = checked(_kernels.blend_with_partner)
blend_and_paste = checked(_kernels.blend_and_paste)
cutmix_boxes = checked(_kernels.cutmix_boxes)
paste_from_partner = checked(_kernels.paste_from_partner)
mix_with_partner_ = checked(_kernels.mix_with_partner_)
mix_targets = checked(_kernels.mix_targets)
smooth_targets = checked(_kernels.smooth_targets)

__all__ = [
    # geometry: flips, crops, padding, resizing
    "hflip_where", "vflip_where", "crop", "center_crop", "pad", "pad_crop", "resize",
    "resized_crop", "resized_output_size",
    # geometry: warps (rotation, affine, perspective) and their per-sample matrices and grids
    "rotate", "rotation_grid", "affine", "affine_matrix", "matrix_grid", "perspective",
    "perspective_coefficients", "perspective_grid",
    # targets: masks, boxes and keypoints moved by per-sample matrices
    "move_targets", "check_targets", "flip_matrix", "resized_crop_matrix", "rotation_matrix",
    "affine_to_matrix", "perspective_to_matrix", "compose_matrices", "affine_boxes",
    "affine_keypoints", "warp_masks",
    # colour
    "adjust_brightness", "adjust_contrast", "adjust_saturation", "adjust_hue",
    "adjust_sharpness", "autocontrast", "equalize", "grayscale_where", "invert", "posterize",
    "rgb_to_grayscale", "solarize",
    # normalisation, dtype, blur, erasing
    "normalize", "to_dtype", "gaussian_blur", "erase",
    # automatic augmentation ops
    "apply_op", "apply_ops",
    # label mixing
    "blend_with_partner", "blend_and_paste", "cutmix_boxes", "paste_from_partner",
    "mix_with_partner_", "mix_targets", "smooth_targets",
]
