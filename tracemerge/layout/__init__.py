"""The encode stage: one file's stored events laid out on the merged trace's tracks and encoded."""
