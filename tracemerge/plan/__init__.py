"""The plan stage: from every file's scan to the merged trace's processes, tracks and ids."""
