"""The command line (`batchaug cache`, `batchaug bench`, `batchaug show`) and batchaug.show's pictures."""
