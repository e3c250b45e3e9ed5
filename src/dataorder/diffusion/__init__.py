"""Diffusion: resolution buckets, image scans, multi-resolution datasets and lock-step bucket
samplers."""
