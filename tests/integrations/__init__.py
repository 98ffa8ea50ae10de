"""Other libraries: timm equivalents against timm, from_torchvision, PyTorch Lightning and Accelerate."""
