"""The loader's crop on a JPEG batch without the padded canvas: draw each image's window from
its size, decode only that window, resize it straight into the output batch.

A crop whose size-fixing step takes a window of the photo (one with a ``window(sizes, keys)``
draw: ``RandomResizedCrop``, ``TimmRandomResizedCrop``, ``RandomCrop(pad_if_needed=True)``
with constant padding, ``CenterCrop``, or subclasses), with only flips before it, needs of
each image only that window. Its draws need only the images' sizes (stored in the cache's
index): the transform's own ``window`` draws them, the same random numbers as ``with_sizes``
on the decoded batch (and the flips' ``make_params``, in their order). Where the pair table
(``batchaug._fusion``) has a ``window`` rule for the step before the window's (a
``RandomRotation`` or ``RandomAffine`` then ``RandomResizedCrop``), each crop box maps back
through the warp to a quadrilateral of the photo: the bounding rectangle of it (with the
sampling's taps, clipped to the photo) is decoded instead, and the box is warped from that
part alone (``RoiCrop._warped``). The window is mirrored through the
flips drawn before it, decoded alone (nvImageCodec's ROI
decode, ``batchaug.data.roi_decode``: the same pixels as the full decode's window), flipped
back, and resized (``functional.resize_each``, the per-box kernel the crop itself runs on the
CPU) or padded (``_ragged.window``) into the output; the steps after the size-fixing one run
on that batch as the crop stage runs them. The result equals the full decode + padded canvas +
crop stage bit for bit, with the same draws (``tests/data/test_roi_crop.py``).

:func:`plan` says whether a crop takes this path, and if not, why (the loader then decodes
whole images into a padded batch, as before): nvImageCodec not installed (``pip install
nvidia-nvimgcodec-cu13``, the ``roi`` extra), a CUDA cache (nvJPEG decodes whole images there),
a cache with masks or boxes, a ``Resize`` or ``RandomPerspective`` before the crop (or a
warp before any crop but ``RandomResizedCrop``), or a resampling that the
per-box kernel does not run (``RandomResizedCrop(antialias=False)`` with bilinear or nearest).
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

from batchaug import _fusion, _random
from batchaug._validation import check_fill_for
from batchaug.data import roi_decode
from batchaug.data.jpeg import corrupt_sample, decode_jpegs
from batchaug.functional import _sized as R
from batchaug.functional import _utils
from batchaug.functional._resize import resize_each, resized_crop_per_sample_applies
from batchaug.functional._sized import _one_affine
from batchaug.functional._warp import affine_matrix
from batchaug.transforms import _geometry as G
from batchaug.transforms._timm import TimmRandomResizedCrop


class RoiCrop:
    """A crop's steps split for :meth:`__call__`: ``flips`` (before), ``final`` (the
    size-fixing step, step ``len(flips)``), ``post`` (the steps after it, on the dense batch).

    Example:
        >>> from batchaug import RandomResizedCrop
        >>> roi, why = plan([RandomResizedCrop(224)])
        >>> roi is not None or why.startswith("nvImageCodec")
        True
    """

    def __init__(self, flips: Sequence[nn.Module], final: nn.Module,
                 post: Sequence[nn.Module], decode_scale: str = "full",
                 warp: Optional[nn.Module] = None) -> None:
        self.flips = list(flips)
        self.final = final
        self.post = list(post)
        #: the first step of a window rule of the pair table (a warp) between the flips and
        #: ``final`` (step ``len(flips)``; ``final`` is then step ``len(flips) + 1``): see
        #: :meth:`_warped`
        self.warp = warp
        #: decode the windows and nothing else (the batch's pixels are left unwritten): the
        #: decode-only ceiling of ``batchaug bench --recipe photos``
        self.decode_only = False
        #: "auto": a window at least twice the output size is decoded at a DCT scale (see
        #: :func:`dct_denominator`; not through a warp: those windows are exact); "full":
        #: every window at full resolution (exact)
        self.decode_scale = decode_scale

    def __call__(self, data: Sequence[Tensor], sizes: Tensor, keys: Optional[Tensor],
                 threads: int, names: Sequence[int], channels: int) -> Tensor:
        """The cropped ``(B, C, oh, ow)`` uint8 batch of the JPEG bitstreams ``data``
        (``sizes`` ``(B, 2)`` int64 CPU, their recorded sizes; ``names``: their cache indices,
        for errors), drawn with ``keys`` (or the global generator) as the crop stage draws.
        Decoded and resized on ``threads`` threads, the calling one included
        (``functional._utils``: each image on one thread, one intra-op thread each)."""
        n = len(data)
        x = torch.empty((n, channels, 0, 0), dtype=torch.uint8)  # what the flips' draws read
        hflip = torch.zeros(n, dtype=torch.bool)
        vflip = torch.zeros(n, dtype=torch.bool)
        for step, t in enumerate(self.flips):
            if not t.is_identity(x, sizes):
                drawn = t.make_params(x, _random.substream(keys, step), sizes)
                if t.horizontal:
                    hflip = hflip ^ drawn
                else:
                    vflip = vflip ^ drawn
        step = len(self.flips)
        if self.warp is not None and self.warp.training:
            return self._warped(data, sizes, keys, threads, names, channels, hflip, vflip)
        step += int(self.warp is not None)  # a warp in eval(): the identity, nothing drawn
        win = self.final.window(sizes, _random.substream(keys, step), channels)
        step += 1
        final = self.final
        resize = not isinstance(final, G._FixedWindow)  # the window resized to the output
        post = self.post
        mirror: Optional[List[bool]] = None  # a flip right after the resize, written flipped
        if resize:
            mirror, post, step = self._mirror(x, keys, step)
        choice: Optional[Tensor] = None
        if win.shape[1] == 5:  # TimmRandomResizedCrop: each sample's interpolation first
            choice, win = win[:, 0], win[:, 1:]
        top, left, wh, ww = win.unbind(1)
        h, w = sizes[:, 0], sizes[:, 1]
        # the part of the (flipped) image the window covers, then where it lies unflipped
        t0, l0 = top.clamp(min=0), left.clamp(min=0)
        t1, l1 = torch.minimum(top + wh, h), torch.minimum(left + ww, w)
        empty = (t1 <= t0) | (l1 <= l0)  # all padding: pixel (0, 0) stands in (never read)
        t0, l0 = torch.where(empty, 0, t0), torch.where(empty, 0, l0)
        t1, l1 = torch.where(empty, 1, t1), torch.where(empty, 1, l1)
        src_t = torch.where(vflip, h - t1, t0)
        src_l = torch.where(hflip, w - l1, l0)
        windows = torch.stack((src_t, src_l, t1 - t0, l1 - l0), 1)
        if resize:
            rrc = final.first if isinstance(final, TimmRandomResizedCrop) else final
            oh, ow, antialias = rrc.size[0], rrc.size[1], rrc.antialias
        else:
            oh, ow, antialias = final.height, final.width, False
        out = torch.empty((n, channels, oh, ow), dtype=torch.uint8)
        modes = ([final.interpolations[k] for k in choice.tolist()] if choice is not None
                 else [getattr(final, "interpolation", "")] * n)  # (crops: unused)
        flips = torch.stack((vflip, hflip), 1).tolist()
        offsets = torch.stack((top - t0, left - l0), 1).tolist()

        dens = [1] * n
        if resize and self.decode_scale == "auto":
            dens = [dct_denominator(bh, bw, oh, ow) for bh, bw in windows[:, 2:].tolist()]
        win_list = windows.tolist()

        def part(ks: List[int]) -> None:
            """Decode, flip back and resize (or pad) images ``ks`` into ``out`` (on one
            intra-op thread: ``image_threads`` below)."""
            exact = [k for k in ks if dens[k] == 1]
            pieces = dict(zip(exact, decode_jpegs(
                [data[k] for k in exact], torch.device("cpu"), 1,
                [names[k] for k in exact], windows=windows[exact])))
            for k in ks:
                if dens[k] > 1:
                    pieces[k] = _scaled_window(data[k], win_list[k], sizes[k].tolist(),
                                               dens[k], channels, names[k])
            for k in ks:
                p = pieces[k]
                if self.decode_only:
                    continue
                p = _as_flipped(p, flips[k], names[k], channels)
                if resize:
                    resize_each([p], [oh, ow], [modes[k]], antialias, out[k:k + 1],
                                None if mirror is None else [mirror[k]])
                else:
                    self._window(p, offsets[k], out[k:k + 1])

        # parts at once, each decoding and resizing its own images (the decoder and
        # interpolate release the GIL): the resizes run in parallel too
        k = max(1, min(int(threads), n))
        parts = [list(range(a, n, k)) for a in range(k)]
        with _utils.image_threads(k):
            _utils.for_each(lambda a: part(parts[a]), k)
        return self._post(out, post, keys, step)

    def _mirror(self, x: Tensor, keys: Optional[Tensor], step: int
                ) -> Tuple[Optional[List[bool]], List[nn.Module], int]:
        """A RandomHorizontalFlip right after the resize, drawn (step ``step``) to be written
        flipped by the resize: ``(each sample's flip or None, the steps left, next step)``."""
        post = self.post
        if not post or not (isinstance(post[0], G._RandomFlip) and post[0].horizontal):
            return None, post, step
        mirror = None
        if post[0].training:  # (eval: the identity, nothing drawn)
            mirror = post[0].make_params(x, _random.substream(keys, step)).tolist()
        return mirror, post[1:], step + 1

    @staticmethod
    def _post(out: Tensor, post: Sequence[nn.Module], keys: Optional[Tensor], step: int
              ) -> Tensor:
        """The steps after the size-fixing one on the fixed-size batch: the modules themselves
        (as in an Augment)."""
        for t in post:
            if getattr(t, "takes_keys", False):
                out = t(out, _random.substream(keys, step))
            else:
                out = t(out)
            step += 1
        return out

    def _warped(self, data: Sequence[Tensor], sizes: Tensor, keys: Optional[Tensor],
                threads: int, names: Sequence[int], channels: int, hflip: Tensor,
                vflip: Tensor) -> Tensor:
        """The warp then RandomResizedCrop: the warp's and the crop's own sized draws (in
        their order, as the pair draws on the decoded batch), then per image: the crop box's
        preimage under the warp (its bounding rectangle with the sampling's taps, clipped to
        the photo, ``_ragged.source_rect``), mirrored through the flips before the warp,
        decoded alone, flipped back, warped for the box only from that part
        (``_ragged.warp_window``, ``placed``) and resized into the batch: the pixels of
        ``functional._sized.affine_resized_crop`` on the whole decoded photo."""
        warp, rrc = self.warp, self.final
        step = len(self.flips)
        n = len(data)
        x = G._shape_only(sizes, channels)
        angle, translate, scale, shear = warp.make_params(x, _random.substream(keys, step), sizes)
        rotation = warp.rotation  # RandomRotation: torchvision's rotate matrix of the angle
        boxes = rrc.window(sizes, _random.substream(keys, step + 1), channels).tolist()
        check_fill_for(warp.fill, x, warp._name)
        interpolation, fill = warp.interpolation, warp.fill
        mirror, post, step = self._mirror(x, keys, step + 2)
        oh, ow = rrc.size[0], rrc.size[1]
        out = torch.empty((n, channels, oh, ow), dtype=torch.uint8)
        sl = sizes.tolist()
        flips = torch.stack((vflip, hflip), 1).tolist()
        cpu = torch.device("cpu")
        mats = _affine_matrices(angle, translate, scale, shear, rotation, warp.center)
        rows = None if mats is None else mats.tolist()

        def one(k: int) -> None:
            h, w = sl[k]
            if mats is None:
                mat = _one_affine(angle, translate, scale, shear, rotation, k, h, w,
                                  warp.center)
                row = mat[0].tolist()
            else:
                mat, row = mats[k:k + 1], rows[k]
            t0, l0, rh, rw = R.source_rect(row, h, w, *boxes[k])
            vf, hf = flips[k]
            window = torch.tensor([[h - t0 - rh if vf else t0, w - l0 - rw if hf else l0,
                                    rh, rw]])
            p = decode_jpegs([data[k]], cpu, 1, [names[k]], windows=window)[0]
            if self.decode_only:
                return
            p = _as_flipped(p, flips[k], names[k], channels)
            box = R.warp_window(p.unsqueeze(0), mat, *boxes[k], interpolation, fill,
                                placed=[t0, l0, h, w])
            resize_each([box[0]], [oh, ow], [rrc.interpolation], rrc.antialias, out[k:k + 1],
                        None if mirror is None else [mirror[k]])

        # each image on one thread (the decoder, grid_sample and interpolate release the GIL)
        with _utils.image_threads(max(1, int(threads))):
            _utils.for_each(one, n)
        return self._post(out, post, keys, step)

    def _window(self, piece: Tensor, offset: List[int], out: Tensor) -> None:
        """RandomCrop / CenterCrop: the window from its decoded part (``offset``: the window's
        corner relative to it, <= 0), padded with the fill where it leaves the image by the
        kernel the crop stage pads with, into ``out`` ``(1, C, oh, ow)``."""
        t = self.final
        oh, ow = out.shape[2], out.shape[3]
        if piece.shape[1] == oh and piece.shape[2] == ow and offset == [0, 0]:
            out[0].copy_(piece)  # inside the image: the window itself
            return
        fill = t.fill  # (CenterCrop's: zeros)
        size = torch.tensor([[piece.shape[1], piece.shape[2]]])
        out.copy_(R.window(piece.unsqueeze(0), size, torch.tensor([offset[0]]),
                           torch.tensor([offset[1]]), oh, ow, fill, "constant"))


def _affine_matrices(angle: Tensor, translate: Tensor, scale: Tensor, shear: Tensor,
                     rotation: bool, center: Optional[List[float]]) -> Optional[Tensor]:
    """Every image's inverse affine ``(B, 2, 3)`` in one call where it does not depend on the
    image's size (no ``center``), else None (then ``_one_affine`` per image). The same values
    as ``_one_affine``'s one-image calls: elementwise float64 ops, whose vectorised loop
    computes each element as its one-element call does (``tests/data/test_roi_crop.py``)."""
    if center is not None:
        return None
    if rotation:
        return R.rotation_matrix(angle, 0, 0)
    return affine_matrix(angle, translate, scale, shear, 0, 0)


def _as_flipped(piece: Tensor, flips: List[bool], name: int, channels: int) -> Tensor:
    """A decoded window ``(C, h, w)`` checked against the recorded channel count, then flipped
    (``flips``: vertical, horizontal) as the flips before the crop drew for its image."""
    if piece.shape[0] != channels:
        raise corrupt_sample(name, f"decode to {piece.shape[0]} channels, not the recorded "
                                   f"{channels}")
    dims = [d for d, f in zip((1, 2), flips) if f]
    return piece.flip(dims) if dims else piece


def dct_denominator(height: int, width: int, out_h: int, out_w: int) -> int:
    """The largest of 8, 4, 2 (else 1) that keeps a ``height x width`` window at least
    ``out_h x out_w`` once decoded at that scale (1/8, 1/4, 1/2 of each side).

    Example:
        >>> dct_denominator(500, 460, 224, 224), dct_denominator(300, 460, 224, 224)
        (2, 1)
    """
    for d in (8, 4, 2):
        if height // d >= out_h and width // d >= out_w:
            return d
    return 1


def _scaled_window(data: Tensor, window: List[int], size: List[int], den: int, channels: int,
                   name: int) -> Tensor:
    """The JPEG decoded at 1/``den`` scale (libjpeg-turbo's DCT scaling, through simplejpeg)
    and the ``window`` (top, left, height, width of the full-size image of ``size``) taken of
    it, its edges rounded to the nearest scaled pixel: ``(C, h', w')`` uint8."""
    import simplejpeg

    h, w = size
    try:
        array = simplejpeg.decode_jpeg(data.numpy(), colorspace="GRAY" if channels == 1
                                       else "RGB", min_height=-(-h // den),
                                       min_width=-(-w // den), min_factor=den)
    except ValueError as exc:
        raise corrupt_sample(name, f"cannot be decoded ({exc})") from None
    image = torch.from_numpy(array).permute(2, 0, 1)
    sh, sw = image.shape[1], image.shape[2]
    t, l, bh, bw = window
    # the window's edges on the scaled image (libjpeg's scaled size is ceil(side / den))
    t0, t1 = round(t * sh / h), round((t + bh) * sh / h)
    l0, l1 = round(l * sw / w), round((l + bw) * sw / w)
    t1, l1 = max(t1, t0 + 1), max(l1, l0 + 1)
    return image[:, t0:t1, l0:l1]


# What the window decode runs in a step's place: its draw (``window``, ``make_params``) and
# its pixels (the crop, resize and mirror kernels of the library class).
_REPLACED = ("forward", "make_params", "window", "apply_image", "is_identity", "with_sizes",
             "with_targets")


def plan(steps: Sequence[nn.Module], device: torch.device = torch.device("cpu"),
         targets: bool = False, decode_scale: str = "full") -> Tuple[Optional[RoiCrop], str]:
    """``(RoiCrop, "")`` when the crop ``steps`` (in order; an ``Augment``: its steps) can
    run on the JPEG bitstreams of a cache on ``device`` (``targets``: the cache has masks or
    boxes), else ``(None, why)``. ``decode_scale``: see ``DeviceLoader``.

    Example:
        >>> from batchaug import RandomPerspective, RandomResizedCrop
        >>> plan([RandomPerspective(), RandomResizedCrop(224)])[1][:31]
        'step 0 is RandomPerspective: on'
    """
    # step i draws from substream(keys, i), as in an Augment: a nested Augment's steps draw
    # from its own substreams, so only the top-level steps are looked at
    flat = list(steps)
    for i, m in enumerate(flat):
        # a user's subclass reaches the window path only while it keeps the methods of
        # _REPLACED of its nearest batchaug class
        base = next((c for c in type(m).__mro__ if c.__module__.startswith("batchaug.")),
                    None)
        own = "" if base is None else ", ".join(
            n for n in _REPLACED if getattr(type(m), n, None) is not getattr(base, n, None))
        if own:
            return None, (f"step {i} is {type(m).__name__}: it overrides {own}, which the "
                          f"window decode would not call")
    flips: List[nn.Module] = []
    final: Optional[nn.Module] = None
    warp: Optional[nn.Module] = None
    for i, m in enumerate(flat):
        if isinstance(m, G._RandomFlip) and warp is None:
            flips.append(m)
            continue
        if warp is None and i + 1 < len(flat) and _fusion.window_pair(m, flat[i + 1]):
            warp = m  # the crop's box decoded through the warp (RoiCrop._warped)
            continue
        if not (callable(getattr(m, "window", None)) and m.fixes_size()):
            return None, (f"step {i} is {type(m).__name__}: only flips, then "
                          f"RandomResizedCrop, TimmRandomResizedCrop, RandomCrop or CenterCrop "
                          f"(or RandomRotation / RandomAffine then RandomResizedCrop) take a "
                          f"window of the image")
        final = m
        post = flat[i + 1:]
        break
    if final is None:
        return None, "no size-fixing crop"
    cpu = torch.empty(0)
    crops = final.choice.transforms if isinstance(final, TimmRandomResizedCrop) else [final]
    for c in crops:
        if not isinstance(c, G._FixedWindow) and not resized_crop_per_sample_applies(
                cpu, c.interpolation, c.antialias):
            return None, (f"{type(final).__name__}(interpolation={c.interpolation!r}, "
                          f"antialias={c.antialias}) resamples batched (only bilinear with "
                          f"antialias or bicubic resample box by box)")
    if isinstance(final, G._FixedWindow) and (final.padding_mode != "constant"
                                              or not getattr(final, "pad_if_needed", True)):
        return None, (f"{type(final).__name__}(padding_mode={final.padding_mode!r}) reads "
                      f"pixels of the image beyond its window")
    if device.type != "cpu":
        return None, f"the cache is on {device} (nvJPEG decodes whole images there)"
    if targets:
        return None, "the cache has masks or boxes (they are cropped on the padded batch)"
    if not roi_decode.available():
        return None, ("nvImageCodec is not installed (pip install nvidia-nvimgcodec-cu13, "
                      "the roi extra)")
    # (decode_scale="auto" with a warp: the windows through the warp are decoded exactly,
    # RoiCrop._warped, still only the rectangles the boxes need)
    return RoiCrop(flips, final, post, decode_scale, warp), ""


__all__ = ["RoiCrop", "dct_denominator", "plan"]
