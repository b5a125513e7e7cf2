"""Weight formats the checkpoint reader and the engines understand (NVFP4)."""
