"""What a run keeps on disk: checkpoints and their random-generator states (`checkpoint`), run
folders and their metadata (`runs`), and a finished run's records read back (`run_records`)."""
