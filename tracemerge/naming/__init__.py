"""How the frameworks name their trace files and folders, as data, and what a path says of its process."""
