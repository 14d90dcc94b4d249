"""publish: find, publish and prune training checkpoints on POSIX and S3-compatible roots."""

__version__ = "0.1.0"
