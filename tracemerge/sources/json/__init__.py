"""JSON trace text read in bounded batches and parts, without decoding a file whole."""
