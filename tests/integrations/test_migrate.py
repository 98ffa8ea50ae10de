"""batchaug.from_torchvision (issue 11 item 3): the split, per-transform equality with the
torchvision transform it replaces (random ones with degenerate ranges or p=1, so the parameters
are fixed), the seed-003 pipelines, errors and warnings, v1 and v2, nested containers."""
import warnings

import pytest
import torch
import torchvision.transforms as T1
import torchvision.transforms.v2 as T2
from PIL import Image

import batchaug
from batchaug import DeviceCache, from_torchvision
from tests.data.loader_crop import LoaderCrop

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
VERSIONS = pytest.mark.parametrize("T", [T1, T2], ids=["v1", "v2"])


def _convert(pipeline):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return from_torchvision(pipeline)


def _images(n=3, h=24, w=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, 3, h, w), dtype=torch.uint8, generator=g)


def _check_equal(pipeline, x, atol):
    """pre_transform per image (+ the crop stage) + augment on the batch == the torchvision
    pipeline per image."""
    migration = _convert(pipeline)
    pre, aug = migration.pre_transform, migration.augment
    aug.train()
    batch = torch.stack([pre(img) for img in x])
    if migration.crop is not None:
        sizes = torch.tensor([list(batch.shape[-2:])] * batch.shape[0])
        batch = LoaderCrop(migration.crop)(batch, sizes)
    got = aug(batch)
    compose = pipeline if callable(pipeline) else T2.Compose(pipeline)
    want = torch.stack([compose(img).as_subclass(torch.Tensor) for img in x])
    assert got.dtype == want.dtype and got.shape == want.shape
    diff = (got.double() - want.double()).abs().max().item()
    assert diff <= atol, f"{pipeline}: max difference {diff} > {atol}"


# (factory of torchvision transforms given the module, uint8 tolerance). Random transforms are
# pinned: p=1 or a degenerate range, so torchvision and batchaug use the same parameters.
# Tolerances: exact, except where batchaug documents one uint8 step (GaussianBlur's two 1-D
# passes; ColorJitter's rounding, functional/_color.py). batchaug matches v2's uint8 kernels;
# v1's tensor Resize and autocontrast go through float and round a value 1 step the other way
# (V1_ATOL: measured 1).
# v1's ConvertImageDtype rounds its [0, 1] scaling one float32 ulp away from v2's (and
# batchaug's) on some values (measured 6e-8).
V1_ATOL = {"autocontrast": 1, "resize_after_random": 1, "resized_crop_whole": 1,
           "trailing_conversion": 6e-8}
CASES = {
    "hflip": (lambda T: [T.RandomHorizontalFlip(p=1.0)], 0),
    "vflip": (lambda T: [T.RandomVerticalFlip(p=1.0)], 0),
    "rotation_nearest": (lambda T: [T.RandomRotation((30, 30))], 0),
    "rotation_bilinear_fill": (lambda T: [T.RandomRotation(
        (-20, -20), interpolation=T.InterpolationMode.BILINEAR, fill=[10, 20, 30],
        center=[5, 7])], 1),
    "resized_crop_whole": (lambda T: [T.RandomResizedCrop(16, scale=(1, 1), ratio=(1, 1))], 0),
    "crop_padded": (lambda T: [T.RandomCrop(28, padding=2)], 0),
    "crop_asymmetric": (lambda T: [T.RandomCrop((30, 28), padding=[1, 2, 3, 4], fill=9)], 0),
    "crop_reflect": (lambda T: [T.RandomCrop(30, padding=3, padding_mode="reflect")], 0),
    "pad_after_random": (lambda T: [T.RandomHorizontalFlip(1.0), T.Pad([1, 2, 3, 4], fill=7)],
                         0),
    "pad_reflect_after_random": (lambda T: [T.RandomVerticalFlip(1.0),
                                            T.Pad(3, padding_mode="reflect")], 0),
    "resize_after_random": (lambda T: [T.RandomHorizontalFlip(1.0), T.Resize(16)], 0),
    "center_crop_after_random": (lambda T: [T.RandomHorizontalFlip(1.0), T.CenterCrop(12)], 0),
    "brightness": (lambda T: [T.ColorJitter(brightness=(1.5, 1.5))], 1),
    "contrast": (lambda T: [T.ColorJitter(contrast=(0.6, 0.6))], 1),
    "saturation": (lambda T: [T.ColorJitter(saturation=(1.4, 1.4))], 1),
    "hue": (lambda T: [T.ColorJitter(hue=(0.1, 0.1))], 1),
    "grayscale": (lambda T: [T.RandomHorizontalFlip(1.0), T.Grayscale(3)], 0),
    "random_grayscale": (lambda T: [T.RandomGrayscale(p=1.0)], 0),
    "invert": (lambda T: [T.RandomInvert(p=1.0)], 0),
    "posterize": (lambda T: [T.RandomPosterize(3, p=1.0)], 0),
    "solarize": (lambda T: [T.RandomSolarize(128, p=1.0)], 0),
    "sharpness": (lambda T: [T.RandomAdjustSharpness(2.0, p=1.0)], 1),
    "autocontrast": (lambda T: [T.RandomAutocontrast(p=1.0)], 0),
    "equalize": (lambda T: [T.RandomEqualize(p=1.0)], 0),
    "blur": (lambda T: [T.GaussianBlur(5, sigma=(1.2, 1.2))], 1),
    "apply": (lambda T: [T.RandomApply([T.RandomInvert(1.0), T.RandomVerticalFlip(1.0)], p=1.0)],
              0),
    "choice": (lambda T: [T.RandomChoice([T.RandomHorizontalFlip(1.0)])], 0),
    # a [0, 1] conversion with no Normalize after it: a ToDtype at the end of the augment
    "trailing_conversion": (lambda T: [T.RandomHorizontalFlip(1.0),
                                       T.ConvertImageDtype(torch.float32)], 0),
    "order": (lambda T: [T.RandomOrder([T.RandomInvert(1.0)])], 0),
    "nested": (lambda T: [T.RandomApply([T.Compose([
        T.RandomHorizontalFlip(1.0), T.RandomApply([T.RandomChoice([T.RandomInvert(1.0)])],
                                                   p=1.0)])], p=1.0)], 0),
}


@VERSIONS
@pytest.mark.parametrize("case", sorted(CASES))
def test_converted_transform_equals_torchvision(T, case):
    factory, atol = CASES[case]
    if T is T1:
        atol = V1_ATOL.get(case, atol)
    _check_equal(factory(T), _images(), atol)


@VERSIONS
def test_converted_types_and_arguments(T):
    migration = _convert([T.RandomRotation(30), T.RandomResizedCrop(224, scale=(0.3, 0.9)),
                          T.ColorJitter(0.4, 0.3, 0.2, 0.1), T.GaussianBlur(5, (0.1, 2.0)),
                          T.RandomApply([T.RandomInvert()], p=0.3),
                          T.RandomChoice([T.RandomInvert(), T.RandomEqualize()])])
    aug = migration.augment
    crop = migration.crop
    assert [type(m).__name__ for m in crop] == ["RandomRotation", "RandomResizedCrop"]
    names = [type(m).__name__ for m in aug]
    assert names == ["ColorJitter", "GaussianBlur", "RandomApply", "RandomChoice"]
    assert not any(type(m).__module__.startswith("torchvision")
                   for m in list(aug.modules()) + list(crop.modules()))
    assert list(crop[0].degrees) == [-30.0, 30.0]
    assert list(crop[1].scale) == [0.3, 0.9] and list(crop[1].size) == [224, 224]
    assert aug[2].p == 0.3


@VERSIONS
def test_normalize_folds_the_float_conversion(T):
    """ToTensor/ConvertImageDtype/ToDtype(scale=True) + Normalize == batchaug.Normalize on uint8;
    the conversion alone becomes a batchaug.ToDtype."""
    convert = T2.ToDtype(torch.float32, scale=True) if T is T2 else T1.ConvertImageDtype(
        torch.float32)
    x = _images()
    pipeline = [T.RandomHorizontalFlip(1.0), convert, T.Normalize(MEAN, STD)]
    pre, aug = _convert(pipeline)
    assert [type(m).__name__ for m in aug] == ["RandomHorizontalFlip", "Normalize"]
    _check_equal(pipeline, x, 1e-5)
    erasing = [T.RandomHorizontalFlip(1.0), convert, T.RandomErasing(p=0.0),
               T.Normalize(MEAN, STD)]
    assert [type(m).__name__ for m in _convert(erasing)[1]] == [
        "RandomHorizontalFlip", "ToDtype", "RandomErasing", "Normalize"]
    _check_equal(erasing, x, 1e-5)


def test_unscaled_float_conversion_is_not_folded_into_normalize():
    """``ToDtype(float32, scale=False)`` keeps 0..255: Normalize then sees unscaled values, as in
    torchvision (folding it as a [0, 1] conversion is off by ~1000 here), leading the pipeline
    or after a random step; a scaling ToDtype on the floats after it changes nothing, as in
    torchvision (float -> float is not rescaled)."""
    x = _images(h=16, w=20)
    unscaled = T2.ToDtype(torch.float32, scale=False)
    for pipeline in ([unscaled, T2.Normalize(MEAN, STD)],
                     [T2.RandomHorizontalFlip(1.0), unscaled, T2.Normalize(MEAN, STD)],
                     [T2.PILToTensor(), unscaled, T2.RandomVerticalFlip(1.0),
                      T2.Normalize(MEAN, STD)],
                     [T2.RandomHorizontalFlip(1.0), unscaled,
                      T2.ToDtype(torch.float32, scale=True), T2.Normalize(MEAN, STD)]):
        # outputs up to 1136: measured 2.4e-4, two float32 ulps there (1.2e-4 each)
        _check_equal(pipeline, x, 3e-4)


@VERSIONS
def test_random_erasing_after_normalize_erases_the_same_box_size(T):
    """Erasing keeps its place after Normalize (float); with a pinned area and ratio every sample
    loses as many pixels as torchvision erases."""
    pipeline = [T.RandomHorizontalFlip(1.0), T.ConvertImageDtype(torch.float32)
                if T is T1 else T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD),
                T.RandomErasing(p=1.0, scale=(0.1, 0.1), ratio=(1.0, 1.0), value=0)]
    pre, aug = _convert(pipeline)
    assert [type(m).__name__ for m in aug][-2:] == ["Normalize", "RandomErasing"]
    x = torch.full((4, 3, 20, 20), 200, dtype=torch.uint8)
    got = aug.train()(x)
    want = torch.stack([T2.Compose(pipeline)(img) for img in x])
    assert torch.equal((got == 0).sum(dim=(1, 2, 3)), (want == 0).sum(dim=(1, 2, 3)))
    assert (got == 0).sum(dim=(1, 2, 3)).min() > 0


def _pil(h, w, seed=0):
    g = torch.Generator().manual_seed(seed)
    arr = torch.randint(0, 256, (h, w, 3), dtype=torch.uint8, generator=g)
    return Image.fromarray(arr.numpy())


def test_seed003_test_pipeline_equals_torchvision_on_pil():
    test = T1.Compose([T1.Resize(255), T1.CenterCrop(224), T1.ToTensor(), T1.Normalize(MEAN, STD)])
    with pytest.warns(UserWarning) as record:
        pre, aug = from_torchvision(test)
    messages = " ".join(str(r.message) for r in record)
    assert "ToTensor" in messages and "folded into batchaug.Normalize" in messages
    assert [type(s).__name__ for s in pre.steps] == ["Resize", "CenterCrop"]
    assert [type(m).__name__ for m in aug] == ["Normalize"]
    for seed, (h, w) in enumerate([(300, 400), (260, 255), (500, 333)]):
        img = _pil(h, w, seed)
        stored = pre(img)
        assert stored.dtype == torch.uint8 and stored.shape == (3, 224, 224)
        got = aug.eval()(stored[None])[0]
        assert (got - test(img)).abs().max().item() <= 1e-5


def test_seed003_test_pipeline_v2_equals_torchvision_on_pil():
    test = T2.Compose([T2.Resize(255), T2.CenterCrop(224), T2.ToImage(),
                       T2.ToDtype(torch.float32, scale=True), T2.Normalize(MEAN, STD)])
    pre, aug = _convert(test)
    img = _pil(280, 350)
    got = aug.eval()(pre(img)[None])[0]
    assert (got - test(img)).abs().max().item() <= 1e-5


def test_seed003_train_pipeline_keeps_the_aspect_and_crops_in_the_loader():
    """The seed-003 train pipeline: the pre_transform only converts (each photo keeps its size
    and aspect), RandomRotation(30) + RandomResizedCrop(224) become the loader's crop, flip +
    Normalize the model's augment; no cache-size warning. With pinned parameters the three
    stages on a ragged batch of two photos equal the torchvision pipeline on each photo."""
    train = T1.Compose([T1.RandomRotation(30), T1.RandomResizedCrop(224),
                        T1.RandomHorizontalFlip(), T1.ToTensor(), T1.Normalize(MEAN, STD)])
    with pytest.warns(UserWarning) as record:
        migration = from_torchvision(train)
    messages = " ".join(str(r.message) for r in record)
    assert "one size" not in messages and "crop=" not in messages
    assert "eval()" in messages  # RandomResizedCrop's eval behaviour differs
    assert "PIL" in messages  # torchvision rotated and cropped PIL images
    pre, aug = migration.pre_transform, migration.augment
    assert pre.steps == []
    assert [type(m).__name__ for m in migration.crop] == ["RandomRotation", "RandomResizedCrop"]
    assert [type(m).__name__ for m in aug] == ["RandomHorizontalFlip", "Normalize"]
    stored = [pre(_pil(300, 451, 1)), pre(_pil(333, 250, 2))]
    assert [tuple(s.shape) for s in stored] == [(3, 300, 451), (3, 333, 250)]
    stage = LoaderCrop(migration.crop)
    assert stage.output_size == (224, 224)
    # pinned: 30 degrees, the fallback box (scale > 1 never fits), always flip
    pinned = T2.Compose([T2.RandomRotation((30, 30)), T2.RandomResizedCrop(224, scale=(2, 2)),
                         T2.RandomHorizontalFlip(1.0), T2.ToDtype(torch.float32, scale=True),
                         T2.Normalize(MEAN, STD)])
    mig = _convert(pinned)
    canvas = torch.zeros(2, 3, 333, 451, dtype=torch.uint8)
    for i, s in enumerate(stored):
        canvas[i, :, :s.shape[1], :s.shape[2]] = s
    sizes = torch.tensor([list(s.shape[1:]) for s in stored])
    got = mig.augment.train()(LoaderCrop(mig.crop)(canvas, sizes))
    for i, s in enumerate(stored):
        assert (got[i] - pinned(s)).abs().max().item() <= 1e-5


def test_validation_loader_reads_photos_through_a_copy_of_the_crop_in_eval():
    """docs/migrating.md: a validation cache at its own sizes, read through
    copy.deepcopy(migration.crop).eval(): no rotation, each photo's centre eval box resized
    (RandomResizedCrop's eval()); the training loader's crop stays in train()."""
    import copy

    migration = _convert([T1.RandomRotation(30), T1.RandomResizedCrop(32),
                          T1.RandomHorizontalFlip(), T1.ToTensor(), T1.Normalize(MEAN, STD)])
    photos = [(_pil(48 + 7 * i, 64 - 5 * i, i), 0) for i in range(4)]
    cache = DeviceCache.from_dataset(photos, pre_transform=migration.pre_transform,
                                     device="cpu", progress=False)
    assert cache.ragged
    train_loader = batchaug.DeviceLoader(cache, batch_size=4, crop=migration.crop)
    val_loader = batchaug.DeviceLoader(cache, batch_size=4, shuffle=False,
                                       crop=copy.deepcopy(migration.crop).eval())
    # the loader keeps the module itself: it follows its train() / eval()
    assert train_loader.crop is migration.crop and all(m.training for m in migration.crop)
    assert not any(m.training for m in val_loader.crop)
    x, _ = next(iter(val_loader))
    for i in range(4):
        ref = batchaug.RandomResizedCrop(32).eval()(cache.image(i)[None])
        assert torch.equal(x[i:i + 1], ref), i
    assert torch.equal(next(iter(val_loader))[0], x)  # deterministic


def test_printed_table_has_three_columns_with_a_crop():
    migration = _convert([T1.RandomRotation(30), T1.RandomResizedCrop(224),
                          T1.RandomHorizontalFlip(), T1.ToTensor(), T1.Normalize(MEAN, STD)])
    lines = str(migration).splitlines()
    assert [h.strip().split(" (")[0] for h in lines[0].split("|")] == [
        "pre_transform", "crop", "augment"]
    crop_column = [line.split(" | ")[1] for line in lines[2:]]
    # one entry per step, its continuation lines indented
    assert [c.split("(")[0] for c in crop_column if c.strip() and not c.startswith(" ")] == [
        "RandomRotation", "RandomResizedCrop"]
    assert lines[2].split("|")[2].strip().startswith("RandomHorizontalFlip(")


def _columns(text):
    """The printed table's three columns, each as the text of its lines joined."""
    rows = [line.split(" | ") for line in text.splitlines()[2:]]
    return ["".join(row[k] if k < len(row) else "" for row in rows) for k in range(3)]


def test_printed_table_lines_are_wrapped_and_keep_every_argument():
    """print(migration) wraps long steps (a RandomChoice, RandomResizedCrop's arguments) into
    lines of at most 100 characters, losing no character of any step."""
    from batchaug.migrate import _cell

    for pipeline in (
            [T1.RandomRotation(30), T1.RandomResizedCrop(224, scale=(0.3, 0.9)),
             T1.ColorJitter(0.4, 0.3, 0.2, 0.1), T1.GaussianBlur(5, (0.1, 2.0)),
             T1.RandomApply([T1.RandomInvert()], p=0.3),
             T1.RandomChoice([T1.RandomInvert(), T1.RandomEqualize(), T1.RandomAutocontrast(),
                              T1.RandomPosterize(4), T1.RandomSolarize(100)]),
             T1.ToTensor(), T1.Normalize(MEAN, STD), T1.RandomErasing()],
            T1.Compose([T1.Resize(255), T1.CenterCrop(224), T1.RandomHorizontalFlip(),
                        T1.ToTensor(), T1.Normalize(MEAN, STD)])):
        migration = _convert(pipeline)
        text = str(migration)
        assert max(len(line) for line in text.splitlines()) <= 100, text
        got = ["".join(c.split()) for c in _columns(text)]
        crop = [] if migration.crop is None else list(migration.crop)
        want = [[_cell(s) for s in migration.pre_transform.steps] + ["-> uint8 (C, H, W)"],
                [_cell(m) for m in crop] or ["(none: stored size)"],
                [_cell(m) for m in migration.augment]]
        assert got == ["".join("".join(w).split()) for w in want]
    # a container's cell lists its transforms (they are what it does)
    choice = _cell(_convert([T1.RandomChoice([T1.RandomInvert(), T1.RandomEqualize()])])
                   .augment[0])
    assert choice == ("RandomChoice(p=[0.5, 0.5], group_by_branch=True, "
                      "[RandomInvert(p=0.5), RandomEqualize(p=0.5)])")


def _notes(pipeline):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        migration = from_torchvision(pipeline)
    return migration, [str(w.message) for w in caught]


@VERSIONS
def test_cifar_random_crop_stays_in_the_augment_without_a_missing_crop_note(T):
    """CIFAR's RandomCrop(32, padding=4): torchvision's raises on an image smaller than the
    crop, so it is not a crop stage for photos of any size; it stays the augment's first step
    (the pipeline has its crop: no note that one is missing) and runs on the 32x32 batch."""
    migration, notes = _notes(T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(),
                                         T.ToTensor(), T.Normalize(MEAN, STD)]))
    assert migration.crop is None
    assert [type(m).__name__ for m in migration.augment] == ["RandomCrop",
                                                             "RandomHorizontalFlip", "Normalize"]
    assert not any("crop" in n.lower() or "size" in n for n in notes), notes
    pre, aug = migration  # no crop stage: unpacks to two
    batch = torch.stack([pre(Image.new("RGB", (32, 32))) for _ in range(4)])
    assert aug(batch).shape == (4, 3, 32, 32)


def test_size_notes_name_what_fixes_the_size():
    """Nothing fixes the size: the note says so (images of one size, or a crop= for the
    loader); a crop after a colour step: the note names it and says how to make it the crop
    stage, not to add a crop= (which would crop twice)."""
    _, notes = _notes([T2.RandomHorizontalFlip(), T2.ColorJitter(0.2)])
    assert any("nothing in the pipeline fixes the image size" in n and "crop=" in n
               for n in notes), notes
    migration, notes = _notes([T2.ColorJitter(0.2), T2.RandomResizedCrop(32)])
    assert migration.crop is None
    late = [n for n in notes if n.startswith("v2.RandomResizedCrop: it fixes the image size")]
    assert len(late) == 1 and "crop twice" in late[0] and "migration.crop" in late[0], notes
    assert not any("nothing in the pipeline" in n for n in notes)


def test_crop_stage_refusal_names_the_batchaug_class():
    """A torchvision transform given as a loader crop: the error names batchaug's class of the
    same name (which exists), or says there is none yet."""
    with pytest.raises(ValueError, match=r"use batchaug\.RandomResizedCrop with the same "
                                         r"arguments") as info:
        LoaderCrop(T2.RandomResizedCrop(8))
    assert "if it exists" not in str(info.value)
    with pytest.raises(ValueError, match="batchaug has no equivalent yet"):
        LoaderCrop(T2.ElasticTransform())


def test_unpacking_a_migration_with_a_crop_stage_names_crop():
    """`pre, augment = migration` would drop the loader's crop stage: with one it raises a
    ValueError naming migration.crop; without one it unpacks to two. Copies keep the crop."""
    import copy
    import pickle

    migration = _convert([T1.RandomRotation(30), T1.RandomResizedCrop(224),
                          T1.RandomHorizontalFlip(), T1.ToTensor(), T1.Normalize(MEAN, STD)])
    assert migration.crop is not None
    with pytest.raises(ValueError, match=r"migration\.crop.*would drop"):
        pre, aug = migration
    with pytest.raises(ValueError, match=r"migration\.crop"):
        list(migration)
    for twin in (copy.deepcopy(migration), pickle.loads(pickle.dumps(migration)),
                 migration._replace(augment=batchaug.Augment())):
        assert [type(m).__name__ for m in twin.crop] == ["RandomRotation", "RandomResizedCrop"]
    assert migration._replace(crop=None).crop is None
    fixed = _convert([T1.Resize(32), T1.CenterCrop(32), T1.RandomHorizontalFlip()])
    pre, aug = fixed
    assert fixed.crop is None and pre is fixed.pre_transform and aug is fixed.augment


def test_pre_transform_builds_a_cache():
    test = T1.Compose([T1.Resize(40), T1.CenterCrop(32), T1.ToTensor(), T1.Normalize(MEAN, STD)])
    pre, aug = _convert(test)
    data = [(_pil(h, w, i), i % 2) for i, (h, w) in enumerate([(50, 60), (45, 40), (64, 48)])]
    cache = DeviceCache.from_dataset(data, pre_transform=pre, device="cpu", progress=False)
    assert cache.images.shape == (3, 3, 32, 32) and cache.images.dtype == torch.uint8
    for i, (img, _) in enumerate(data):
        got = aug.eval()(cache.images[i:i + 1])[0]
        assert (got - test(img)).abs().max().item() <= 1e-5


@VERSIONS
def test_unsupported_transforms_are_listed_in_one_error(T):
    pipeline = [T.Resize(64), T.Lambda(lambda im: im), T.RandomHorizontalFlip(),
                T.RandomRotation(10, expand=True), T.TenCrop(8),
                T.RandomApply([T.FiveCrop(8)], p=0.5)]
    with pytest.raises(ValueError) as info:
        from_torchvision(pipeline)
    message = str(info.value)
    for part in ("Lambda", "expand=True", "TenCrop", "FiveCrop"):
        assert part in message
    assert message.count("\n  - ") == 4
    assert "RandomHorizontalFlip" not in message


def test_transform_must_be_a_pipeline():
    with pytest.raises(TypeError, match="transform must be"):
        from_torchvision(5)


def test_leading_pad_and_grayscale_go_into_the_pre_transform():
    pipeline = T1.Compose([T1.Grayscale(), T1.Pad(2), T1.CenterCrop(20), T1.PILToTensor(),
                           T1.RandomHorizontalFlip(1.0)])
    pre, aug = _convert(pipeline)
    assert [type(s).__name__ for s in pre.steps] == [
        "Grayscale", "Pad", "CenterCrop", "PILToTensor"]
    img = _pil(18, 22)
    stored = pre(img)
    assert stored.dtype == torch.uint8 and stored.shape == (1, 20, 20)
    assert torch.equal(aug.train()(stored[None])[0], pipeline(img))


def test_pre_transform_writes_a_cache(tmp_path):
    from batchaug.data import write_cache

    test = T1.Compose([T1.Resize(20), T1.CenterCrop(16), T1.ToTensor(), T1.Normalize(MEAN, STD)])
    pre, aug = _convert(test)
    data = [(_pil(h, w, i), i % 2) for i, (h, w) in enumerate([(30, 24), (20, 20), (17, 40)])]
    write_cache(data, tmp_path / "c", pre_transform=pre, progress=False, shuffle=False)
    cache = DeviceCache.load(tmp_path / "c", device="cpu")
    assert cache.images.shape == (3, 3, 16, 16)
    for i, (img, _) in enumerate(data):
        assert (aug.eval()(cache.images[i:i + 1])[0] - test(img)).abs().max().item() <= 1e-5


def test_refused_arguments_name_the_transform():
    with pytest.raises(ValueError, match="RandomRotation.*interpolation"):
        _convert([T2.RandomRotation(10, interpolation=T2.InterpolationMode.BOX)])


def test_accepts_sequential_and_list_and_batchaug_modules():
    seq = torch.nn.Sequential(T2.RandomHorizontalFlip(1.0), batchaug.RandomInvert(1.0))
    pre, aug = _convert(seq)
    assert [type(m).__name__ for m in aug] == ["RandomHorizontalFlip", "RandomInvert"]
    x = _images()
    assert torch.equal(aug.train()(x), 255 - x.flip(-1))


def test_printed_table_has_both_columns():
    result = _convert(T1.Compose([T1.Resize(255), T1.CenterCrop(224), T1.RandomHorizontalFlip(),
                                  T1.ToTensor(), T1.Normalize(MEAN, STD)]))
    text = str(result)
    header = text.splitlines()[0]
    assert "pre_transform" in header and "augment" in header and "|" in header
    assert "Resize" in text and "CenterCrop" in text and "RandomHorizontalFlip" in text
    row = next(line for line in text.splitlines() if line.startswith("Resize"))
    assert "| RandomHorizontalFlip" in row
    assert repr(result) == text
    pre, aug = result  # unpacks as a pair
    assert isinstance(aug, batchaug.Augment)


def test_augment_is_scriptable():
    _, aug = _convert([T2.RandomRotation(10), T2.RandomHorizontalFlip(),
                       T2.ToDtype(torch.float32, scale=True), T2.Normalize(MEAN, STD)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(aug.eval())
    x = _images()
    assert torch.equal(scripted(x), aug(x))


def test_tensor_pipeline_has_no_pil_note_and_antialias_false_is_named():
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        from_torchvision([T2.CenterCrop(32), T2.RandomResizedCrop(16, antialias=False)])
    messages = " ".join(str(r.message) for r in record)
    assert "PIL" not in messages and "one size" not in messages
    assert "antialias=False" in messages


def test_readme_train_augment_in_eval_serves_the_test_cache():
    """README: with Resize(256) + CenterCrop(256) prepended, the train pipeline has a fixed cache
    size (no size warning), and its augment in eval() on the test pre_transform's 224x224 images
    is the test pipeline."""
    train = [T1.RandomRotation(30), T1.RandomResizedCrop(224), T1.RandomHorizontalFlip(),
             T1.ToTensor(), T1.Normalize(MEAN, STD)]
    test = T1.Compose([T1.Resize(255), T1.CenterCrop(224), T1.ToTensor(), T1.Normalize(MEAN, STD)])
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        pre, augment = from_torchvision(T1.Compose([T1.Resize(256), T1.CenterCrop(256)] + train))
    assert not any("one size" in str(r.message) for r in record)
    assert pre(_pil(300, 451)).shape == (3, 256, 256)
    test_pre, _ = _convert(test)
    img = _pil(320, 240, 5)
    got = augment.eval()(test_pre(img)[None])[0]
    assert (got - test(img)).abs().max().item() <= 1e-5


@VERSIONS
def test_resize_with_max_size_converts_and_matches(T):
    """Resize(max_size=...) has a batchaug equivalent (torchvision's rule) since issue 9."""
    import torchvision.transforms.v2.functional as TF

    pre, aug = from_torchvision([T.PILToTensor(), T.RandomHorizontalFlip(p=0.0),
                                 T.Resize(32, max_size=40)])
    x = torch.randint(0, 256, (2, 3, 30, 60), dtype=torch.uint8)
    y = aug.eval()(x)
    ref = torch.stack([TF.resize(img, [32], max_size=40, antialias=True) for img in x])
    assert y.shape == ref.shape == (2, 3, 20, 40)
    assert torch.equal(y, ref)
