"""The kernels as the package's modules call them: unchecked, so that TorchScript compiles them
and no per-call argument check runs in a module's forward. Users import
:mod:`batchaug.functional`, whose functions check their arguments' types first."""
# --- geometry kernels (flip, pad, crop, rotate, affine, perspective, resized crop, resize) ---
from batchaug.functional._crop import center_crop, crop, hflip_where, pad, pad_crop, vflip_where
from batchaug.functional._resize import resize, resized_crop, resized_output_size
from batchaug.functional._warp import (
    affine,
    affine_matrix,
    matrix_grid,
    perspective,
    perspective_coefficients,
    perspective_grid,
    rotate,
    rotation_grid,
)
# --- targets: masks, boxes, keypoints moved by per-sample output -> input matrices ---
from batchaug.functional._targets import warp_masks
from batchaug.functional._targets import (
    affine_boxes,
    affine_keypoints,
    affine_to_matrix,
    check_targets,
    compose_matrices,
    flip_matrix,
    move_targets,
    perspective_to_matrix,
    resized_crop_matrix,
    rotation_matrix,
)
# --- per-sample select (shared by the modules) ---
from batchaug.functional._utils import select_samples
# --- colour kernels ---
from batchaug.functional._color import (
    adjust_brightness,
    adjust_contrast,
    adjust_hue,
    adjust_saturation,
    adjust_sharpness,
    autocontrast,
    equalize,
    grayscale_where,
    invert,
    posterize,
    rgb_to_grayscale,
    solarize,
)
# --- label mixing (MixUp, CutMix) ---
from batchaug.functional._augment import (
    blend_and_paste,
    blend_with_partner,
    cutmix_boxes,
    mix_targets,
    mix_with_partner_,
    partner,
    paste_from_partner,
    smooth_targets,
)
# --- auto-augment ops with per-sample op ids and magnitudes ---
from batchaug.functional._auto_augment import apply_op, apply_ops
# --- normalize, dtype, blur, erasing, branch grouping ---
from batchaug.functional._misc import (
    box_mask,
    erase,
    gaussian_blur,
    gaussian_kernel1d,
    group_by_branch,
    inverse_permutation,
    normalize,
    to_dtype,
)
