"""`astra export`: a dispatch table as one standalone CUDA file (cuda_file), with the Python
callable and the SGLang swap-in guide beside it (guide)."""
