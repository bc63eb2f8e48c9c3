"""The process and the machine: files, child processes, library paths, progress, the platform (README, Layout)."""
