"""The process and the machine: files written safely (fileio, output_paths), child processes kept from
outliving a command (supervise, process_state), CUDA wheels' library folders (cuda_paths), progress on
stderr (progress), and the platform fingerprint (platform)."""
