"""The benchmarks' own rules (benchmarks/ and `batchaug bench`): equal windows, contenders doing the same job, each script's quick mode."""
