"""The data path: a device-resident image cache, its on-disk format and streaming writer, and a
device batch loader."""
from batchaug.data.cache import DeviceCache
from batchaug.data.format import CacheFormatError
from batchaug.data.ingest import BadImageError
from batchaug.data.loader import DeviceLoader
from batchaug.data.sources import HuggingFaceImages, TarShards
from batchaug.data.storage import DeviceMemoryError
from batchaug.data.writer import DiskFullError, WriteResult, write_cache

__all__ = ["BadImageError", "CacheFormatError", "DeviceCache", "DeviceLoader", "DeviceMemoryError",
           "DiskFullError", "HuggingFaceImages", "TarShards", "WriteResult", "write_cache"]
