"""The data path: a device-resident image cache, its on-disk format, and a device batch loader."""
from batchaug.data.cache import DeviceCache, DeviceMemoryError
from batchaug.data.format import CacheFormatError
from batchaug.data.loader import DeviceLoader

__all__ = ["CacheFormatError", "DeviceCache", "DeviceLoader", "DeviceMemoryError"]
