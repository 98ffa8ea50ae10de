"""Kernels and transform modules against torchvision references: geometry, colour, policies, mixers, containers, targets (masks, boxes, keypoints), sizes and keyed draws."""
