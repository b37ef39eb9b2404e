"""Nsight Systems exports: host and device tables, NVTX ranges."""
