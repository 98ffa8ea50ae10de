"""Batched augmentation modules: one small ``nn.Module`` per transform, per-sample random params."""
# --- basic transforms (flip, crop, normalize, dtype) ---
# --- warp transforms (rotation, resized crop, resize) ---
