"""The data path: DeviceCache and its storage (fixed, ragged, JPEG), the writer, placements, the DeviceLoader and its crop stage, resume, distributed runs."""
