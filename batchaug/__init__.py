"""batchaug: batched per-sample image augmentation inside the model, and a device-resident data path."""

# --- transforms (core) ---
# --- prefix (compose) ---
# --- data ---
from batchaug.data import CacheFormatError, DeviceCache, DeviceLoader, DeviceMemoryError
# --- bench helpers ---

__version__ = "0.1.0"

__all__ = [
    # --- transforms (core) ---
    # --- prefix (compose) ---
    # --- data ---
    "CacheFormatError",
    "DeviceCache",
    "DeviceLoader",
    "DeviceMemoryError",
    # --- bench helpers ---
]
