"""Ascend (torch_npu / MindSpore) profiling output: text exports, DB exports and their directories."""
