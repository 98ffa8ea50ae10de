"""Warp transforms: per-sample rotation, affine and perspective, with their targets.

Each module validates its arguments in ``__init__`` (``ValueError``/``TypeError`` naming the
argument), draws per-sample parameters on the input's device in ``make_params`` and warps with a
kernel from :mod:`batchaug.functional`; ``with_targets`` warps the images and the masks on one
sampling grid (co-registered: an image made from the mask and warped with nearest equals the
warped mask). Identity in ``eval()``. All of them script with ``torch.jit.script``.
"""

import numbers
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from .. import _random
from ..functional import _kernels as F
from ..functional import _sized as S
from ..functional._targets import (affine_to_matrix, check_mask_fill_for,
                                   identity_matrix, move_targets, perspective_to_matrix,
                                   perspective_to_matrix_each, perspective_with_masks,
                                   warp_with_masks)
from ..functional._warp import perspective_identity, rotation_theta
from ..functional._utils import select_samples, small_tensor
from ._base import GeometricTransform
from .._validation import (INTERPOLATIONS, MAX_COORDINATE, MAX_DEGREES, check_choice, check_fill,
                           check_fill_for, check_mask_fill, check_number, check_probability,
                           check_range)


from ._geometry import _check_positive_range



def _check_degrees(degrees: Union[float, Sequence[float]]) -> Tuple[float, float]:
    # Angles are drawn in float32; beyond MAX_DEGREES they would lose precision (and 1e308
    # overflows to inf/nan). Any range wider than 360 degrees is already uniform over turns.
    if isinstance(degrees, numbers.Real) and not isinstance(degrees, bool):
        d = check_number(degrees, "degrees", 0.0, MAX_DEGREES)
        return -d, d
    if not isinstance(degrees, (list, tuple)):
        raise TypeError(
            f"degrees must be a non-negative number or a (min, max) pair, got {degrees!r}"
        )
    return check_range(degrees, "degrees", -MAX_DEGREES, MAX_DEGREES)


def _check_center(center: Optional[Sequence[float]]) -> Optional[List[float]]:
    if center is None:
        return None
    if not isinstance(center, (list, tuple)) or len(center) != 2:
        raise TypeError(f"center must be None or a sequence (x, y) of two numbers, got {center!r}")
    return [check_number(c, "center", -MAX_COORDINATE, MAX_COORDINATE) for c in center]


def _warp_with_targets(images: Tensor, targets: Dict[str, Tensor], matrix: Tensor,
                       interpolation: str, fill: List[float], mask_fill: int,
                       name: str) -> Tuple[Tensor, Dict[str, Tensor]]:
    """Images and their targets (checked) warped by the same output -> input ``matrix``:
    images and masks share one sampling grid per sample (``warp_with_masks``; uint8 masks of
    uint8 images with nearest ride along as channels of the image's ``grid_sample``), which
    is what the rotation and affine ``with_targets`` overrides are for. The image is bit for
    bit ``affine(images, matrix[:, :2])``, i.e. the transform's ``apply_image``."""
    check_fill_for(fill, images, name)
    size = [images.shape[2], images.shape[3]]
    if "masks" not in targets:
        out = F.affine(images, matrix[:, :2], interpolation, fill)
        return out, move_targets(targets, matrix, size, size, mask_fill)
    check_mask_fill_for(mask_fill, targets["masks"], name)
    out, masks = warp_with_masks(images, targets["masks"], matrix, interpolation, fill,
                                 mask_fill)
    return out, move_targets(targets, matrix, size, size, mask_fill, masks)


# |shear| below 90 degrees: at 90 a shear maps the image onto a line (cos(shear) -> 0), and
# the matrix entries grow like 1 / cos(shear) * tan(shear)
_MAX_SHEAR = 89.0


def _check_translate(translate: Optional[Sequence[float]]) -> Optional[Tuple[float, float]]:
    if translate is None:
        return None
    if not isinstance(translate, (list, tuple)) or len(translate) != 2:
        raise TypeError(
            f"translate must be None or a sequence (a, b) of two fractions, got {translate!r}"
        )
    tx = check_number(translate[0], "translate", 0.0, 1.0)
    ty = check_number(translate[1], "translate", 0.0, 1.0)
    return tx, ty


def _check_shear(shear: Union[None, float, Sequence[float]]) -> Optional[List[float]]:
    """torchvision's shear forms -> [x_min, x_max, y_min, y_max]."""
    if shear is None:
        return None
    if isinstance(shear, numbers.Real) and not isinstance(shear, bool):
        s = check_number(shear, "shear", 0.0, _MAX_SHEAR)
        return [-s, s, 0.0, 0.0]
    if not isinstance(shear, (list, tuple)) or len(shear) not in (2, 4):
        raise TypeError(
            f"shear must be a non-negative number or a sequence of 2 or 4 numbers, got {shear!r}"
        )
    x = check_range(list(shear[:2]), "shear", -_MAX_SHEAR, _MAX_SHEAR)
    y = (0.0, 0.0)
    if len(shear) == 4:
        y = check_range(list(shear[2:]), "shear", -_MAX_SHEAR, _MAX_SHEAR)
    return [x[0], x[1], y[0], y[1]]


class RandomAffine(GeometricTransform):
    """Warp each image of a batch by its own random affine transform (rotation, translation,
    scale, shear about ``center``).

    Arguments and sampling as ``torchvision.transforms.v2.RandomAffine``, drawn per sample:
    an angle uniform in ``degrees`` (a number ``d``: ``[-d, d]``); with ``translate=(a, b)`` a
    shift uniform in ``[-a*W, a*W] x [-b*H, b*H]`` rounded to whole pixels; a scale uniform in
    ``scale``; with ``shear`` a number ``s`` an x-shear in ``[-s, s]``, a pair an x-shear range,
    four numbers x- and y-shear ranges. Each sample equals ``v2.functional.affine(img, angle,
    translate, scale, shear, interpolation, fill, center)`` with its drawn parameters (float
    within 1e-5, uint8 within 1 step where a sample point lands on a rounding boundary).
    Differences: one parameter set per sample (v2: one per call); shear angles within +-89
    degrees, degrees within +-1e5, scale within [1e-6, 1e6]; a ``fill`` the input's dtype
    cannot hold is a ``ValueError`` at call time. Identity in ``eval()``. ``make_params``
    returns the parameters and :func:`batchaug.functional.affine_matrix` the per-sample
    matrices. :meth:`with_targets` moves each sample's masks (nearest, on the image's
    sampling grid; pixels from outside get the label ``mask_fill``), boxes (the enclosing box
    of the moved corners, clamped to the image) and keypoints by that sample's transform, as
    torchvision v2 moves ``Mask``, ``BoundingBoxes`` and ``KeyPoints``.

    Example:
        >>> aug = RandomAffine(15, translate=(0.1, 0.1), scale=(0.9, 1.1), shear=5)
        >>> aug(torch.zeros(8, 3, 32, 32, dtype=torch.uint8)).shape
        torch.Size([8, 3, 32, 32])
        >>> boxes = torch.tensor([[[4.0, 4.0, 20.0, 12.0]]]).expand(8, 1, 4)
        >>> images, targets = aug.with_targets(torch.zeros(8, 3, 32, 32), {"boxes": boxes})
        >>> targets["boxes"].shape, targets["box_valid"].shape
        (torch.Size([8, 1, 4]), torch.Size([8, 1]))
    """

    center: Optional[List[float]]
    translate: Optional[Tuple[float, float]]
    scale: Optional[Tuple[float, float]]
    shear: Optional[List[float]]

    __constants__ = GeometricTransform.__constants__ + ["rotation"]
    fused_targets = True  # with_targets: apply_with_targets (one grid for images and masks)
    takes_sizes = True
    own_frame = True
    # rotation: RandomRotation, an affine of angle only whose matrix is torchvision's rotate's
    # (the angle turned the other way, after a remainder by 360)
    rotation: bool = False

    def __init__(
        self,
        degrees: Union[float, Sequence[float]],
        translate: Optional[Sequence[float]] = None,
        scale: Optional[Sequence[float]] = None,
        shear: Union[None, float, Sequence[float]] = None,
        interpolation: str = "nearest",
        fill: Union[float, Sequence[float]] = 0,
        center: Optional[Sequence[float]] = None,
        *,
        mask_fill: int = 0,
    ) -> None:
        super().__init__()
        self.degrees = _check_degrees(degrees)
        self.translate = _check_translate(translate)
        self.scale = None if scale is None else _check_positive_range(scale, "scale")
        self.shear = _check_shear(shear)
        self.interpolation = check_choice(interpolation, "interpolation", INTERPOLATIONS)
        self.fill = check_fill(fill, "fill")
        self.center = _check_center(center)
        self.mask_fill = check_mask_fill(mask_fill)

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None,
                    sizes: Optional[Tensor] = None) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        """Per sample, drawn on ``x.device``: angle (N,) degrees, translate (N, 2) whole pixels
        (x, y) as float32, scale (N,), shear (N, 2) degrees (x, y); the translation's range
        from the batch's size or each image's own ``sizes``."""
        angle = _random.uniform(x, self.degrees[0], self.degrees[1], keys=keys, draw=0)
        # translate and shear when not drawn (RandomRotation: both): one read-only zero view
        zeros = torch.zeros_like(angle).unsqueeze(1).expand(-1, 2)
        translate = zeros
        t = self.translate
        if t is not None:
            if sizes is None:
                max_dx = t[0] * x.shape[3]
                max_dy = t[1] * x.shape[2]
                # torchvision: int(round(uniform(-max_d, max_d))), half to even as torch.round
                translate = torch.stack(
                    (_random.uniform(x, -max_dx, max_dx, keys=keys, draw=1).round(),
                     _random.uniform(x, -max_dy, max_dy, keys=keys, draw=2).round()), dim=1)
            else:
                # a range per image: uniforms in [0, 1) scaled by it. The batch's one range
                # keeps uniform(-m, m), whose keyed draw folds the range into one float32
                # factor (another rounding)
                m_x = t[0] * sizes[:, 1].to(torch.float64)
                m_y = t[1] * sizes[:, 0].to(torch.float64)
                u_x = _random.uniform(x, 0.0, 1.0, keys=keys, draw=1)
                u_y = _random.uniform(x, 0.0, 1.0, keys=keys, draw=2)
                translate = torch.stack(
                    ((u_x * (2 * m_x).to(torch.float32) + (-m_x).to(torch.float32)).round(),
                     (u_y * (2 * m_y).to(torch.float32) + (-m_y).to(torch.float32)).round()),
                    dim=1)
        scale = torch.ones_like(angle)
        sc = self.scale
        if sc is not None:
            scale = _random.uniform(x, sc[0], sc[1], keys=keys, draw=3)
        shear = zeros
        sh = self.shear
        if sh is not None:
            shear = torch.stack((_random.uniform(x, sh[0], sh[1], keys=keys, draw=4),
                                 _random.uniform(x, sh[2], sh[3], keys=keys, draw=5)), dim=1)
        return angle, translate, scale, shear

    def _theta(self, params: Tuple[Tensor, Tensor, Tensor, Tensor], height: int, width: int
               ) -> Tensor:
        """(N, 2, 3) inverse affines on a ``height x width`` batch."""
        angle, translate, scale, shear = params
        if self.rotation:
            return rotation_theta(angle, height, width, self.center)
        return F.affine_matrix(angle, translate, scale, shear, height, width, self.center)

    def _warp(self, x: Tensor, params: Tuple[Tensor, Tensor, Tensor, Tensor],
              sizes: Optional[Tensor], interpolation: str, fill: List[float]) -> Tensor:
        if sizes is not None:
            angle, translate, scale, shear = params
            return S.affine(x, sizes, angle, translate, scale, shear, self.rotation,
                            self.center, interpolation, fill)
        return F.affine(x, self._theta(params, x.shape[2], x.shape[3]), interpolation, fill)

    def apply_image(self, x: Tensor, params: Tuple[Tensor, Tensor, Tensor, Tensor],
                    sizes: Optional[Tensor] = None) -> Tensor:
        """Each image warped by its parameters (within its own extent with ``sizes``)."""
        check_fill_for(self.fill, x, self._name)
        return self._warp(x, params, sizes, self.interpolation, self.fill)

    def apply_masks(self, m: Tensor, params: Tuple[Tensor, Tensor, Tensor, Tensor],
                    sizes: Optional[Tensor] = None) -> Tensor:
        """(N, K, H, W) mask labels: nearest, ``mask_fill`` from outside the image."""
        return self._warp(m, params, sizes, "nearest", [float(self.mask_fill)])

    def target_matrix(self, params: Tuple[Tensor, Tensor, Tensor, Tensor], in_size: List[int],
                      out_size: List[int], sizes: Optional[Tensor] = None) -> Tensor:
        """(N, 3, 3) output -> input matrices: the inverse affine's rows and ``(0, 0, 1)``.
        About the centre: the same for every size, so also each image's own with ``sizes``
        (``own_frame``); about a given ``center``, with ``sizes``: each image's own, turned
        about that pixel of it (``own_frame``)."""
        center = self.center  # a local: TorchScript refines it, not an attribute
        if sizes is not None and center is not None:
            angle, translate, scale, shear = params
            return affine_to_matrix(S.recenter(S.affine_centred(
                angle, translate, scale, shear, self.rotation), center, sizes))
        return affine_to_matrix(self._theta(params, in_size[0], in_size[1]))

    def apply_with_targets(self, images: Tensor, targets: Dict[str, Tensor],
                           params: Tuple[Tensor, Tensor, Tensor, Tensor]
                           ) -> Tuple[Tensor, Dict[str, Tensor]]:
        """Images and targets (checked) warped on one sampling grid per sample (the base's
        ``with_targets`` calls this on a dense batch: ``fused_targets``)."""
        size = [images.shape[2], images.shape[3]]
        return _warp_with_targets(images, targets, self.target_matrix(params, size, size),
                                  self.interpolation, self.fill, self.mask_fill, self._name)


class RandomRotation(RandomAffine):
    """Rotate each image of a batch by its own random angle from ``degrees``.

    Arguments as ``torchvision.transforms.v2.RandomRotation``: ``degrees`` is a non-negative
    number ``d`` (angles in ``[-d, d]``) or a ``(min, max)`` pair; positive angles turn
    counter-clockwise (90 equals ``torch.rot90(x, 1, dims=(-2, -1))`` on square images);
    ``center`` is ``(x, y)`` in pixels (default: the image centre); pixels from outside the image
    get ``fill`` (a number or one per channel), blended at the border for bilinear exactly as
    torchvision does. A ``fill`` the input's dtype cannot hold (e.g. 300 for uint8) is a
    ``ValueError`` at call time (not clamped), as in every transform with a ``fill``. Degrees
    are finite and within +-1e5 (angles are drawn in float32), ``center`` within +-1e6 pixels.
    Each sample matches ``v2.functional.rotate`` with its drawn angle. ``expand=True`` is
    rejected: it makes the output size depend on the angle, and one batch needs one shape.
    Identity in ``eval()``. A :class:`RandomAffine` of angle only: ``make_params`` returns its
    ``(angle, translate, scale, shear)`` with the angle drawn as torchvision's
    ``RandomRotation`` draws it (translation and shear zero, scale one), and the matrix is
    ``rotate``'s (the angle turned the other way).

    :meth:`with_targets` rotates each sample's masks (nearest, on the image's sampling grid;
    pixels from outside get the label ``mask_fill``), boxes (the enclosing box of the rotated
    corners, clamped to the image) and keypoints by that sample's angle, as torchvision v2
    rotates ``Mask``, ``BoundingBoxes`` and ``KeyPoints``.

    Example:
        >>> aug = RandomRotation(15, interpolation="bilinear")
        >>> aug(torch.zeros(8, 3, 32, 32, dtype=torch.uint8)).shape
        torch.Size([8, 3, 32, 32])
        >>> masks = torch.zeros(8, 32, 32, dtype=torch.uint8)
        >>> images, targets = aug.with_targets(torch.zeros(8, 3, 32, 32), {"masks": masks})
    """

    rotation = True

    def __init__(
        self,
        degrees: Union[float, Sequence[float]],
        interpolation: str = "nearest",
        expand: bool = False,
        center: Optional[Sequence[float]] = None,
        fill: Union[float, Sequence[float]] = 0,
        *,
        mask_fill: int = 0,
    ) -> None:
        # an affine of angle only: make_params draws the angle as torchvision's
        # RandomRotation (draw 0) and leaves translation, scale and shear at the identity
        super().__init__(degrees, interpolation=interpolation, fill=fill, center=center,
                         mask_fill=mask_fill)
        if expand:
            raise ValueError(
                "expand=True is not supported: the expanded size depends on each sample's angle, "
                "but one batch needs one shape. Use expand=False (corners are cut off), or pad "
                "the images beforehand."
            )


class RandomPerspective(GeometricTransform):
    """Warp each chosen image of a batch by its own random perspective transform.

    Arguments and sampling as ``torchvision.transforms.v2.RandomPerspective``: with
    probability ``p`` per sample, each corner moves inwards by a whole number of pixels drawn
    uniformly below ``int(distortion_scale * side // 2) + 1``; the perspective mapping the
    moved corners back onto the image corners is applied with ``interpolation`` and ``fill``
    (torchvision's fill rule). Each chosen sample equals ``v2.functional.perspective(img,
    startpoints, endpoints, interpolation, fill)`` with its drawn corners (the same solver and
    grid arithmetic: bit for bit in every measured draw); the others are returned exactly
    unchanged. Differences: one coin and one set of corners per sample (v2: one per call);
    the 8x8 systems are solved in one batched ``linalg.lstsq``; corners of which three are
    collinear (possible on small images, where torchvision raises) leave the sample
    unchanged; where the perspective's horizon crosses the image torchvision samples nan, we
    give ``fill``; under ``torch.compile``/``torch.export`` the systems are solved by LU
    (lstsq has data-dependent shapes there); a ``fill`` the input's dtype cannot hold is a
    ``ValueError`` at call time. Identity in ``eval()``. ``make_params`` returns the coins
    and the corners; the kernels take the coefficients explicitly
    (:func:`batchaug.functional.perspective_coefficients`).

    :meth:`with_targets` moves each chosen sample's masks (nearest, through the image kernel;
    pixels from outside get the label ``mask_fill``), boxes (the enclosing box of the moved
    corners, clamped to the image) and keypoints by its perspective, as torchvision v2 moves
    ``Mask``, ``BoundingBoxes`` and ``KeyPoints``; the targets of the other samples are
    returned as they are (boxes clamped to the image).

    Example:
        >>> aug = RandomPerspective(0.3, p=0.5)
        >>> aug(torch.zeros(8, 3, 32, 32, dtype=torch.uint8)).shape
        torch.Size([8, 3, 32, 32])
        >>> kp = torch.full((8, 17, 2), 16.0)
        >>> images, targets = aug.with_targets(torch.zeros(8, 3, 32, 32), {"keypoints": kp})
        >>> targets["keypoint_valid"].shape
        torch.Size([8, 17])
    """

    fused_targets = True  # with_targets: apply_with_targets (one grid for images and masks)
    takes_sizes = True
    own_frame = True

    def __init__(
        self,
        distortion_scale: float = 0.5,
        p: float = 0.5,
        interpolation: str = "bilinear",
        fill: Union[float, Sequence[float]] = 0,
        *,
        mask_fill: int = 0,
    ) -> None:
        super().__init__()
        self.distortion_scale = check_number(distortion_scale, "distortion_scale", 0.0, 1.0)
        self.p = check_probability(p, "p")
        self.interpolation = check_choice(interpolation, "interpolation", INTERPOLATIONS)
        self.fill = check_fill(fill, "fill")
        self.mask_fill = check_mask_fill(mask_fill)

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None,
                    sizes: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        """Per sample, drawn on ``x.device``: (N,) bool (apply or not) and the moved corners
        (N, 4, 2) int64 (x, y; top-left, top-right, bottom-right, bottom-left), within the
        batch's size or each image's own ``sizes``."""
        mask = _random.bernoulli(x, self.p, keys=keys, draw=0)
        if sizes is not None:
            # per-image bounds draw through integers_below (float64 uniforms): another
            # stream of numbers than the dense torch.randint, so the dense rule stays
            half_h = torch.div(sizes[:, 0], 2, rounding_mode="floor").to(torch.float64)
            half_w = torch.div(sizes[:, 1], 2, rounding_mode="floor").to(torch.float64)
            bound_h = torch.floor(self.distortion_scale * half_h).to(torch.int64) + 1
            bound_w = torch.floor(self.distortion_scale * half_w).to(torch.int64) + 1
            dx = _random.integers_below(bound_w.view(-1, 1).expand(-1, 4), keys, 1)
            dy = _random.integers_below(bound_h.view(-1, 1).expand(-1, 4), keys, 2)
            zero = torch.zeros_like(bound_w)
            right = sizes[:, 1] - bound_w
            bottom = sizes[:, 0] - bound_h
            off_x = torch.stack((zero, right, right, zero), 1)
            off_y = torch.stack((zero, zero, bottom, bottom), 1)
            return mask, torch.stack((dx + off_x, dy + off_y), dim=2)
        height, width = x.shape[2], x.shape[3]
        bound_h = int(self.distortion_scale * (height // 2)) + 1
        bound_w = int(self.distortion_scale * (width // 2)) + 1
        dx = _random.integers(x, 0, bound_w, 4, keys=keys, draw=1)
        dy = _random.integers(x, 0, bound_h, 4, keys=keys, draw=2)
        # right corners draw from [W - bound_w, W), bottom ones from [H - bound_h, H)
        right, bottom = float(width - bound_w), float(height - bound_h)
        offsets = small_tensor([0.0, 0.0, right, 0.0, right, bottom, 0.0, bottom], torch.int64,
                               x.device).view(4, 2)
        return mask, torch.stack((dx, dy), dim=2) + offsets

    def _warp(self, x: Tensor, params: Tuple[Tensor, Tensor], sizes: Optional[Tensor],
              interpolation: str, fill: List[float]) -> Tensor:
        mask, endpoints = params
        if sizes is not None:
            return S.perspective_warp(x, sizes, mask, endpoints, interpolation, fill)
        coefficients = F.perspective_coefficients(endpoints, x.shape[2], x.shape[3])
        warped = F.perspective(x, coefficients, interpolation, fill)
        return select_samples(_perspective_moves(mask, coefficients), warped, x)

    def apply_image(self, x: Tensor, params: Tuple[Tensor, Tensor],
                    sizes: Optional[Tensor] = None) -> Tensor:
        """The chosen images warped (within their own extent with ``sizes``)."""
        check_fill_for(self.fill, x, "RandomPerspective")
        return self._warp(x, params, sizes, self.interpolation, self.fill)

    def apply_masks(self, m: Tensor, params: Tuple[Tensor, Tensor],
                    sizes: Optional[Tensor] = None) -> Tensor:
        """(N, K, H, W) mask labels: nearest, ``mask_fill`` from outside the image."""
        return self._warp(m, params, sizes, "nearest", [float(self.mask_fill)])

    def target_matrix(self, params: Tuple[Tensor, Tensor], in_size: List[int],
                      out_size: List[int], sizes: Optional[Tensor] = None) -> Tensor:
        """(N, 3, 3) output -> input matrices: the perspective of the moved samples, the
        identity for the others."""
        mask, endpoints = params
        if sizes is not None:  # centred on each image, as its own matrix alone (own_frame)
            coefficients = S.perspective_coefficients(endpoints, sizes)
            moves = _perspective_moves(mask, coefficients).view(-1, 1, 1)
            return torch.where(moves, perspective_to_matrix_each(coefficients, sizes),
                               identity_matrix(coefficients))
        coefficients = F.perspective_coefficients(endpoints, in_size[0], in_size[1])
        return _perspective_target_matrix(mask, coefficients, in_size)

    def apply_with_targets(self, images: Tensor, targets: Dict[str, Tensor],
                           params: Tuple[Tensor, Tensor]) -> Tuple[Tensor, Dict[str, Tensor]]:
        """Images and targets (checked) warped on one sampling grid per chosen sample, the
        coefficients solved once (the base's ``with_targets`` calls this on a dense batch:
        ``fused_targets``)."""
        check_fill_for(self.fill, images, "RandomPerspective")
        mask, endpoints = params
        size = [images.shape[2], images.shape[3]]
        coefficients = F.perspective_coefficients(endpoints, size[0], size[1])
        moves = _perspective_moves(mask, coefficients)
        matrix = _perspective_target_matrix(mask, coefficients, size)
        if "masks" not in targets:
            warped = F.perspective(images, coefficients, self.interpolation, self.fill)
            return (select_samples(moves, warped, images),
                    move_targets(targets, matrix, size, size, self.mask_fill))
        m = targets["masks"]
        check_mask_fill_for(self.mask_fill, m, "RandomPerspective")
        warped, warped_masks = perspective_with_masks(images, m, coefficients,
                                                      self.interpolation, self.fill,
                                                      self.mask_fill)
        masks = torch.where(moves.view([-1] + [1] * (m.dim() - 1)), warped_masks, m)
        return (select_samples(moves, warped, images),
                move_targets(targets, matrix, size, size, self.mask_fill, masks))


def _perspective_moves(mask: Tensor, coefficients: Tensor) -> Tensor:
    """(N,) bool: the samples RandomPerspective warps. Identity coefficients (zero distortion,
    degenerate corners) map every pixel onto itself: those samples are returned exactly, not
    as a float round trip through the grid."""
    moved = (coefficients != perspective_identity(coefficients.dtype,
                                                  coefficients.device)).any(dim=1)
    return mask & moved


def _perspective_target_matrix(mask: Tensor, coefficients: Tensor,
                               in_size: List[int]) -> Tensor:
    matrix = perspective_to_matrix(coefficients, in_size[0], in_size[1])
    moves = _perspective_moves(mask, coefficients).view(-1, 1, 1)
    return torch.where(moves, matrix, identity_matrix(coefficients))


